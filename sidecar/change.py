"""Has the traffic changed? A two-window test on the live counts (pure).

After a switch of traffic the estimator's live counts and the prior describe the old traffic,
and halving after each rebuild takes many rebuilds to forget them. So every scrape compares
the *recent* window (the last few scrapes' counts) with the estimate in force:

- acceptance: per position i with at least ``min_drafts`` recent drafts,
  z_i = (p_i - â_i) / sqrt(â_i (1 - â_i) / n_i) with p_i = accepted_i / drafted_i recent;
  a change is |z_i| > ``z`` and |p_i - â_i| > ``min_delta`` (a large, well-supported jump; drafts
  in one step are correlated, so z is set far above the usual 2);
- step time: per (B bucket, k) with at least ``min_steps`` recent and older live steps, the
  recent mean step against the older live mean more than a factor ``ratio`` apart either way.

On a change the caller drops the stale counts, lowers the prior's weight, and rebuilds at once
(sidecar/controller.py). The change lies somewhere inside the window, so the counts kept are
the newest scrape's alone where it holds enough drafts (``min_drafts``), else the window's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["MIN_CHANGE_DRAFTS", "AcceptanceChange", "RecentWindow", "StepTimeChange", "acceptance_change",
           "step_time_changes"]

FloatArray = npt.NDArray[np.float64]
Cell = tuple[int, int]
MIN_CHANGE_DRAFTS = 100.0  # fewer recent drafts at a position are no evidence of a change


@dataclass(slots=True)
class RecentWindow:
    """The counts of the last ``size`` complete scrapes."""

    size: int = 3
    _items: deque[tuple[FloatArray, FloatArray, dict[Cell, tuple[float, float]]]] = field(
        default_factory=deque)

    def push(self, accepted: FloatArray, drafted: FloatArray,
             step_time: Mapping[Cell, tuple[float, float]]) -> None:
        self._items.append((np.asarray(accepted, dtype=np.float64),
                            np.asarray(drafted, dtype=np.float64), dict(step_time)))
        while len(self._items) > self.size:
            self._items.popleft()

    def clear(self) -> None:
        self._items.clear()

    def scale_step_time(self, factors: Mapping[Cell, float]) -> None:
        """Scale the window's step-time cells as the live totals were (LiveStepTimes.cap), so
        that live minus window stays the older steps alone."""
        for _, _, cells in self._items:
            for key, f in factors.items():
                if key in cells:
                    s, n = cells[key]
                    cells[key] = (s * f, n * f)

    @property
    def full(self) -> bool:
        return len(self._items) >= self.size

    def counts(self) -> tuple[FloatArray, FloatArray]:
        """(accepted_i, drafted_i) summed over the window."""
        if not self._items:
            return np.zeros(0), np.zeros(0)
        acc = np.sum([a for a, _, _ in self._items], axis=0)
        dra = np.sum([d for _, d, _ in self._items], axis=0)
        return np.asarray(acc, dtype=np.float64), np.asarray(dra, dtype=np.float64)

    def newest(self) -> tuple[FloatArray, FloatArray]:
        """(accepted_i, drafted_i) of the last scrape alone."""
        if not self._items:
            return np.zeros(0), np.zeros(0)
        acc, dra, _ = self._items[-1]
        return acc.copy(), dra.copy()

    def step_time(self) -> dict[Cell, tuple[float, float]]:
        """(seconds, steps) per cell summed over the window."""
        out: dict[Cell, tuple[float, float]] = {}
        for _, _, cells in self._items:
            for key, (s, n) in cells.items():
                s0, n0 = out.get(key, (0.0, 0.0))
                out[key] = (s0 + s, n0 + n)
        return out


@dataclass(frozen=True, slots=True)
class AcceptanceChange:
    position: int        # 1-based i of the strongest evidence
    recent: float        # p_i over the recent window
    estimate: float      # â_i in force
    drafted: float       # recent drafts behind p_i
    z: float


@dataclass(frozen=True, slots=True)
class StepTimeChange:
    batch_size: int      # the B bucket
    k: int
    recent_ms: float
    estimate_ms: float   # the cell's older live mean
    steps: float


def acceptance_change(accepted: FloatArray, drafted: FloatArray, a_hat: FloatArray,
                      min_drafts: float = MIN_CHANGE_DRAFTS, z: float = 6.0,
                      min_delta: float = 0.1) -> AcceptanceChange | None:
    """The strongest position whose recent acceptance left â (see the module), else None."""
    if accepted.size != a_hat.size or drafted.size != a_hat.size:
        return None  # an empty window (no scrape yet)
    best: AcceptanceChange | None = None
    for i in range(a_hat.size):
        n = float(drafted[i])
        if n < min_drafts:
            continue
        p, a = float(accepted[i]) / n, float(np.clip(a_hat[i], 1e-3, 1 - 1e-3))
        score = (p - a) / np.sqrt(a * (1 - a) / n)
        if abs(score) > z and abs(p - a) > min_delta and (best is None or abs(score) > abs(best.z)):
            best = AcceptanceChange(i + 1, round(p, 4), round(float(a_hat[i]), 4), n,
                                    round(float(score), 2))
    return best


def step_time_changes(recent: Mapping[Cell, tuple[float, float]],
                      older: Mapping[Cell, tuple[float, float]], min_steps: float = 30.0,
                      ratio: float = 1.3) -> list[StepTimeChange]:
    """Cells whose recent mean step is more than ``ratio`` away (either way) from the same
    cell's older live steps. Not from T̂: a profile that was wrong from the start is drift, which
    the blend corrects as live steps accumulate; dropping them on every window would keep it
    from ever doing so."""
    out = []
    for cell, (seconds, n) in sorted(recent.items()):
        old_seconds, old_n = older.get(cell, (0.0, 0.0))
        if n < min_steps or old_n < min_steps or old_seconds <= 0:
            continue
        recent_ms, before_ms = 1000.0 * seconds / n, 1000.0 * old_seconds / old_n
        if not 1 / ratio <= recent_ms / before_ms <= ratio:
            out.append(StepTimeChange(cell[0], cell[1], round(recent_ms, 4), round(before_ms, 4), n))
    return out
