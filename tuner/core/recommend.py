"""A deployment recommendation, not only a table (pure).

A table cannot switch speculation off: its k=0 still runs the drafter (and on the GPU V1 runner
any table costs full CUDA graphs; docs/tuner.md, *What to deploy*, has the measurements). So the
tuner ends with what to deploy, backed by its measurements:

- ``table``: the tuned table (it splits: some k beats the others with confidence somewhere);
- ``fixed_k``: one k everywhere (the table has one range: no split is supported by the data);
- ``no_speculation``: plain decoding beats the table at every batch size the preflight timed;
- ``depends_on_load``: plain decoding wins at some loads and the table at others, which no
  single engine config covers (e.g. two pools, or routing by load);
- ``unmeasured``: no preflight, so plain decoding was not compared.

G(B, k) = B·τ(k)/T(B, k) (eq. G); plain decoding has τ = 1 and its own step time.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from tuner.core.confidence import Confident

__all__ = ["Recommendation", "recommend"]

Kind = Literal["table", "fixed_k", "no_speculation", "depends_on_load", "unmeasured"]


class Recommendation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind
    summary: str
    evidence: list[str]


def _plain_vs_table(choice: Confident, B: list[int], nospec_ms: list[float],
                    tie: float) -> tuple[list[int], list[int], list[str]]:
    """Batch sizes where plain decoding beats the table by more than the tie, and the others."""
    plain_wins: list[int] = []
    table_wins: list[int] = []
    lines: list[str] = []
    for b, t in zip(B, nospec_ms):
        table_G = float(choice.G[b - 1, choice.ks[b - 1]])
        ratio = (b / t) / table_G
        lines.append(f"B={b}: no speculation {b / t:.3f} tokens/ms, the table (k="
                     f"{int(choice.ks[b - 1])}) {table_G:.3f}: {ratio - 1:+.1%}")
        (plain_wins if ratio > 1 + tie else table_wins).append(b)
    return plain_wins, table_wins, lines


def recommend(choice: Confident, tie: float, preflight_B: list[int] | None = None,
              nospec_ms: list[float] | None = None) -> Recommendation:
    """What to deploy, from the confident table and (if timed) plain decoding at a few B."""
    ranges = choice.table.to_list()
    spec = (f"the fixed k={ranges[0][2]} (one range: no split is supported by the data)"
            if len(ranges) == 1 else f"the tuned table {ranges}")
    evidence = [f"B={r.start}-{r.end}: k={r.k}" + ("" if r.runner_up is None else
                f", {r.gain:+.1%} ({r.gain_low:+.1%} to {r.gain_high:+.1%}) vs k={r.runner_up}")
                for r in choice.ranges]
    kind: Kind = "fixed_k" if len(ranges) == 1 else "table"
    if not preflight_B or not nospec_ms:
        return Recommendation(kind="unmeasured", summary=f"deploy {spec}; plain decoding was not "
                              "timed (tune with --preflight to compare)", evidence=evidence)
    plain_wins, table_wins, lines = _plain_vs_table(choice, preflight_B, nospec_ms, tie)
    evidence += lines
    if plain_wins and not table_wins:
        return Recommendation(kind="no_speculation", summary="serve without speculative decoding: "
                              f"it beats {spec} at every batch size timed ({plain_wins})",
                              evidence=evidence)
    if plain_wins:
        return Recommendation(kind="depends_on_load", summary=(
            f"the best choice changes with load: no speculation wins at B={plain_wins}, {spec} "
            f"at B={table_wins}; a table cannot switch speculation off (its k=0 still drafts), "
            "so no single engine config covers both: consider two pools, or routing by load"),
            evidence=evidence)
    best = float(np.max(choice.G)) if choice.G.size else 0.0
    return Recommendation(kind=kind, summary=f"deploy {spec}; it beats no speculation at every "
                          f"batch size timed ({table_wins})", evidence=evidence + [
                              f"best predicted goodput {best:.3f} tokens/ms"])
