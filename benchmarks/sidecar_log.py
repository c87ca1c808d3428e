"""A sidecar's JSON log read back: its `pair` events (sidecar/measured.py `Pair.logged`). Pure
but ``read_lines``.

One log is one sidecar process, watching one engine run: its seqs number that run's steps, so
two logs' pairs are never neighbours, and whatever reads dependence keeps each log's series apart.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

__all__ = ["Comparison", "LoggedPair", "comparisons", "logged_pairs", "read_lines"]

Comparison = tuple[int, int, int]  # (band, smaller k, larger k)


class LoggedPair(BaseModel):
    """A `pair` event of the sidecar's log."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    seq: int          # the run's first step
    bucket: int
    k: int            # the run's k
    ref: int          # the table's k on either side of it
    log_ratio: float  # goodput, the run over its references
    steps: int


def read_lines(path: Path) -> list[str]:
    """A log's lines, gzipped (`.gz`) or not."""
    raw = path.read_bytes()
    return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode().splitlines()


def logged_pairs(lines: Iterable[str]) -> list[LoggedPair]:
    """The `pair` events, in the order logged; a line that is not JSON (a log cut mid-write) is
    passed over, a `pair` event that does not parse is an error (ValueError)."""
    out = []
    for line in lines:
        if '"pair"' not in line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("event") == "pair" and isinstance(event.get("pair"), dict):
            out.append(LoggedPair.model_validate(event["pair"]))
    return out


def comparisons(pairs: Sequence[LoggedPair]) -> dict[Comparison, list[tuple[int, float]]]:
    """(seq, log ratio of the larger k over the smaller) per comparison, in seq order."""
    out: dict[Comparison, list[tuple[int, float]]] = {}
    for p in pairs:
        lo, hi = sorted((p.k, p.ref))
        sign = 1.0 if p.k == hi else -1.0
        out.setdefault((p.bucket, lo, hi), []).append((p.seq, sign * p.log_ratio))
    return {key: sorted(v) for key, v in out.items()}
