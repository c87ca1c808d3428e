"""The honor check's headline figures from honor.json (pure): summary.json.

    python -m benchmarks.honor --summary DIR/honor.json     # writes DIR/summary.json

Per one-range cell (table [[1, N, k]] at B) on each engine: the drafts each request verified
(tokens / B - 1, median over the steady decode steps), the step time and the verdict; the
edge table's cells; per (B, k) both engines ran, the K engine's step over the K_ref engine's
in percent with its 95% interval (cluster bootstrap, tuner/core/honor.py) and the drafting
verdict; per B, T(B, 0) against T(B, K) on the K engine; the finding in words. Everything is
read from the check honor.json stored, nothing measured again.
"""

from __future__ import annotations

from typing import Any

from tuner.core.honor import DraftingCheck, HonorCell, HonorCheck
from tuner.core.honor_finding import verification_change

__all__ = ["summarize"]

META = ("command", "model", "method", "drafter", "num_speculative_tokens", "max_num_seqs",
        "batch_sizes", "reference_k", "decode_tokens", "repeats", "emulate", "hardware",
        "vllm_version", "timings_s")


def _pct(ratio: float) -> float:
    return round((ratio - 1) * 100, 1)


def cell(c: HonorCell) -> dict[str, Any]:
    return {"engine_K": c.engine_K, "table": c.table, "B": c.B, "k": c.k,
            "drafts_per_request": c.drafts, "step_ms": c.step_ms, "steps": c.steps,
            "off_table": c.off_table, "verdict": c.verdict}


def drafting(d: DraftingCheck) -> dict[str, Any]:
    """The K engine's step against the K_ref engine's at the same (B, k), in percent."""
    return {"B": d.B, "k": d.k, "K": d.K, "K_ref": d.K_ref, "longer_pct": _pct(d.ratio),
            "ci_pct": [_pct(d.low), _pct(d.high)], "extra_ms": d.extra_ms, "verdict": d.verdict}


def summarize(body: dict[str, Any]) -> dict[str, Any]:
    """summary.json from honor.json's body ({meta..., "check": HonorCheck})."""
    h = HonorCheck.model_validate(body["check"])
    return {"schema": 1, "K": h.K, "runner": h.runner,
            "K_ref": h.reference[0].engine_K if h.reference else None,
            "verified": h.verified, "drafted": h.drafted,
            "cells": [cell(c) for c in h.cells], "edge": [cell(c) for c in h.edge],
            "reference": [cell(c) for c in h.reference],
            "drafting": [drafting(d) for d in h.drafting],
            "verification": [{"B": B, "k0_ms": t0, "kK_ms": tK, "change_pct": _pct(t0 / tK)}
                             for B, t0, tK in verification_change(h.cells, h.K)],
            "finding": h.finding,
            "meta": {k: body[k] for k in META if k in body}}
