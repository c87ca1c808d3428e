"""Has the traffic changed? A two-window test on the live counts (pure).

After a switch of traffic the estimator's live counts and the prior describe the old traffic,
and halving after each rebuild takes many rebuilds to forget them. So every scrape compares
the *recent* window (the last few scrapes' counts) with the estimate in force:

- acceptance: per position i with at least ``min_drafts`` recent drafts,
  z_i = (p_i - â_i) / sqrt(â_i (1 - â_i) / n_i) with p_i = accepted_i / drafted_i recent;
  a change is |z_i| > ``z`` and |p_i - â_i| > ``min_delta`` (a large, well-supported jump; drafts
  in one step are correlated, so z is set far above the usual 2);
- step time: per (B bucket, k), the median of per-scrape mean steps in each of the two
  last disjoint windows against the older live mean, more than a factor ``ratio`` apart the
  same way in both (step_time_changes_robust: its docstring derives the false-alarm rate).

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

from tuner.core.admin_api import BucketK

__all__ = ["MIN_CHANGE_DRAFTS", "AcceptanceChange", "RecentWindow", "StepTimeChange", "acceptance_change",
           "step_time_changes", "step_time_changes_robust"]

FloatArray = npt.NDArray[np.float64]
MIN_CHANGE_DRAFTS = 100.0  # fewer recent drafts at a position are no evidence of a change
STEP_WINDOW = 5  # scrapes in each of the step-time test's two windows (step_time_changes_robust)
OLDER_STEPS = 4  # ... and the older steps they are compared with: this many times min_steps
MIN_SCRAPE_STEPS = 3  # a scrape with fewer steps of a cell has no say in its window's median


@dataclass(slots=True)
class RecentWindow:
    """The counts of the last ``size`` complete scrapes."""

    size: int = 3
    _items: deque[tuple[FloatArray, FloatArray, dict[BucketK, tuple[float, float]]]] = field(
        default_factory=deque)
    # the step times of the last 2·STEP_WINDOW scrapes (the newest are _items' own dicts):
    # the step-time test wants two disjoint windows (step_time_changes_robust)
    _cells: deque[dict[BucketK, tuple[float, float]]] = field(default_factory=deque)

    def push(self, accepted: FloatArray, drafted: FloatArray,
             step_time: Mapping[BucketK, tuple[float, float]]) -> None:
        cells = dict(step_time)
        self._items.append((np.asarray(accepted, dtype=np.float64),
                            np.asarray(drafted, dtype=np.float64), cells))
        self._cells.append(cells)
        while len(self._items) > self.size:
            self._items.popleft()
        while len(self._cells) > 2 * STEP_WINDOW:
            self._cells.popleft()

    def clear(self) -> None:
        self._items.clear()
        self._cells.clear()

    def scale_step_time(self, factors: Mapping[BucketK, float]) -> None:
        """Scale the window's step-time cells as the live totals were (LiveStepTimes.cap), so
        that live minus window stays the older steps alone."""
        for cells in self._cells:
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

    def step_time(self) -> dict[BucketK, tuple[float, float]]:
        """(seconds, steps) per cell summed over the window."""
        return _summed([cells for _, _, cells in self._items])

    def newer_step_time(self) -> dict[BucketK, tuple[float, float]]:
        """(seconds, steps) per cell over the newer of the two step windows: what a cell keeps
        after a change (its level now, from STEP_WINDOW scrapes rather than the last few)."""
        return _summed(self.step_windows()[1])

    def step_windows(self) -> tuple[list[dict[BucketK, tuple[float, float]]], ...]:
        """The per-scrape cells of the two last disjoint windows of STEP_WINDOW scrapes
        (older, newer); both empty until 2·STEP_WINDOW scrapes are in."""
        if len(self._cells) < 2 * STEP_WINDOW:
            return [], []
        cells = list(self._cells)
        return cells[:STEP_WINDOW], cells[STEP_WINDOW:]


def _summed(scrapes: list[dict[BucketK, tuple[float, float]]]) -> dict[BucketK, tuple[float, float]]:
    out: dict[BucketK, tuple[float, float]] = {}
    for cells in scrapes:
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


def step_time_changes(recent: Mapping[BucketK, tuple[float, float]],
                      older: Mapping[BucketK, tuple[float, float]], min_steps: float = 30.0,
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


def _median_ms(scrapes: list[dict[BucketK, tuple[float, float]]], cell: BucketK) -> float:
    """The median over scrapes of ``cell``'s per-scrape mean step (ms), counting only scrapes
    with at least MIN_SCRAPE_STEPS of its steps; nan if fewer than half the window's scrapes
    have that many. Unweighted: a scrape full of slow steps (a burst of prefills) is one vote."""
    means = [1000.0 * s / n for c in scrapes for s, n in [c.get(cell, (0.0, 0.0))]
             if n >= MIN_SCRAPE_STEPS]
    return float(np.median(means)) if 2 * len(means) > len(scrapes) else float("nan")


def step_time_changes_robust(window: RecentWindow, live_seconds: Mapping[BucketK, float],
                             live_steps: Mapping[BucketK, float], min_steps: float = 30.0,
                             ratio: float = 1.3) -> list[StepTimeChange]:
    """Cells whose step time left the older live steps' mean by more than ``ratio``, the same
    way, in each of the two last disjoint windows (RecentWindow.step_windows), each window
    read as the median of its per-scrape means (_median_ms), with ``min_steps`` in both windows
    and OLDER_STEPS times that in the older steps.

    Why not step_time_changes (one window's pooled mean): steps are heavy-tailed (a scrape
    with a burst of prefills, a CPU shared with the load generator), and every cell is tested
    at every scrape; in a plain demo it fired six times in 80 s, one of them in steady traffic
    and two for one cell in opposite directions. Here a false alarm needs, in each of two
    disjoint windows of STEP_WINDOW = 5 scrapes, at least 3 of a window's scrapes beyond the
    ratio in the same direction: if one scrape is that far off with probability p, a
    window with probability about C(5,3)·p³ = 10p³, both about 100p⁶. At p = 0.1 (one scrape
    in ten a burst, tests/sidecar/test_change.py) that is 1e-4 per cell and check; checks one
    scrape apart share 9 of 10 scrapes, so 12 cells over 1,200 scrapes (10 minutes at 0.5 s)
    make about 12·1200/10·1e-4 ≈ 0.15 false changes. A real change (the demo's switch, steps
    2x slower) passes both windows 10 scrapes after it (at 0.5 s, 5 s; at 2 s, 20 s), not
    counting the scrapes it needs for min_steps.
    """
    before, after = window.step_windows()
    if not after:
        return []
    older_sums, newer_sums = _summed(before), _summed(after)
    out = []
    for cell, (s1, n1) in sorted(newer_sums.items()):
        s0, n0 = older_sums.get(cell, (0.0, 0.0))
        old_s = live_seconds.get(cell, 0.0) - s0 - s1
        old_n = live_steps.get(cell, 0.0) - n0 - n1
        # the older mean is the baseline of both windows: more steps behind it than one window
        if min(n0, n1) < min_steps or old_n < OLDER_STEPS * min_steps or old_s <= 0:
            continue
        before_ms = 1000.0 * old_s / old_n
        r0, r1 = _median_ms(before, cell) / before_ms, _median_ms(after, cell) / before_ms
        if (r0 > ratio and r1 > ratio) or (r0 < 1 / ratio and r1 < 1 / ratio):
            out.append(StepTimeChange(cell[0], cell[1], round(r1 * before_ms, 4),
                                      round(before_ms, 4), n1))
    return out
