"""Have the step times changed? A two-window test on the live step times per cell (pure).

Per (B bucket, k), the median of per-scrape mean steps in each of the two last disjoint windows
of STEP_WINDOW_S seconds against the cell's level, the same median over the REFERENCE_S seconds
before them, more than a factor ``ratio`` apart the same way in both; after a change the older
level is held for HOLD_S seconds, and a cell whose steps go back to it in that time had a
transient: the change is taken back, not followed by a second one
(StepTimeWindow.step_time_changes: its docstring derives the false-alarm rate). A change of load
moves B to other cells, not a cell's level, so load alone is no change here.

The acceptance test is sidecar/acceptance_change.py; on either change the caller drops what is
stale and rebuilds (sidecar/controller.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tuner.core.admin_api import BucketK

__all__ = ["STEP_RATIO", "StepTimeChange", "StepTimeWindow"]

FloatArray = npt.NDArray[np.float64]
# The step-time test (StepTimeWindow.step_time_changes) in seconds, not scrapes: the noise it must
# ignore is correlated in time (a shared CPU: tens of percent for tens of seconds), whatever the
# scrape interval.
STEP_WINDOW_S = 12.0  # each of the two test windows
REFERENCE_S = 120.0   # the level they are compared with: the cell's scrapes this long before them
HOLD_S = 60.0         # after a change the older level is kept this long (a transient goes back)
STEP_RATIO = 1.7      # the factor that is a change (settings.change_step_ratio's default)
MIN_WINDOW_SCRAPES = 3  # a window has at least this many scrapes, however long the interval
OLDER_STEPS = 4  # the reference holds at least this many times min_steps
MIN_SCRAPE_STEPS = 3  # a scrape with fewer steps of a cell has no say in a median


def _scrapes(seconds: float, interval_s: float, least: int = 1) -> int:
    return max(least, math.ceil(seconds / interval_s - 1e-9))


def _median(x: FloatArray) -> float:
    """np.median of a 1-d array without its overhead (timeit, 240 values, the 2-core dev box:
    2.6 µs against 18 µs), and it
    runs three times for every cell at every scrape (and the tests replay hours of scrapes)."""
    v = np.sort(x)
    return float(v[(v.size - 1) // 2] + v[v.size // 2]) / 2


@dataclass(frozen=True, slots=True)
class _Held:
    """A cell's step-time change within HOLD_S: the level before it and the level it found."""

    old_ms: float
    new_ms: float
    old_start: int  # the first scrape of the reference before the change (back on a revert)
    until: int      # the scrape from which the new level is the cell's only one


@dataclass(slots=True)
class _Cell:
    """One (B bucket, k)'s step times per scrape, a ring of the step-time test's span."""

    seconds: FloatArray
    steps: FloatArray
    ms: FloatArray      # the scrape's mean step; nan with fewer than MIN_SCRAPE_STEPS steps
    last: int           # the last scrape that timed any of its steps
    start: int = 0      # its level is that of its scrapes since this one (a change moves it)
    held: _Held | None = None


@dataclass(slots=True)
class StepTimeWindow:
    """Each cell's per-scrape step times over the step-time test's span, the scrapes
    ``interval_s`` apart (its windows are sized in seconds: StepTimeWindow.step_time_changes)."""

    interval_s: float = 1.0
    _cells: dict[BucketK, _Cell] = field(default_factory=dict)
    _pushed: int = 0  # scrapes pushed: the next one's number

    @property
    def step_window(self) -> int:
        """Scrapes in each of the step-time test's two windows."""
        return _scrapes(STEP_WINDOW_S, self.interval_s, MIN_WINDOW_SCRAPES)

    @property
    def span(self) -> int:
        """Scrapes the step-time test looks at: its reference, then its two windows."""
        return 2 * self.step_window + _scrapes(REFERENCE_S, self.interval_s)

    def add(self, step_time: Mapping[BucketK, tuple[float, float]]) -> None:
        cells = dict(step_time)
        i, span = self._pushed, self.span
        self._pushed += 1
        for key, (s, n) in cells.items():
            if n > 0 and s >= 0 and key not in self._cells:
                self._cells[key] = _Cell(np.zeros(span), np.zeros(span), np.full(span, np.nan), i)
        for key, cell in list(self._cells.items()):
            s, n = cells.get(key, (0.0, 0.0))
            if not (n > 0 and s >= 0):
                s, n = 0.0, 0.0
            elif i > cell.last:
                cell.last = i
            if i - cell.last >= span:  # nothing of it left in the span
                del self._cells[key]
                continue
            slot = i % span
            cell.seconds[slot], cell.steps[slot] = s, n
            cell.ms[slot] = 1000.0 * s / n if n >= MIN_SCRAPE_STEPS else np.nan

    def newer_step_time(self) -> dict[BucketK, tuple[float, float]]:
        """(seconds, steps) per cell over the newer of the two step windows: what a cell keeps
        after a change, or after a transient went back (its level now, from STEP_WINDOW_S
        seconds of steps rather than the last few scrapes)."""
        slots = self._order()[-self.step_window:]
        out = {}
        for key, cell in self._cells.items():
            n = float(np.sum(cell.steps[slots]))
            if n > 0:
                out[key] = (float(np.sum(cell.seconds[slots])), n)
        return out

    def _order(self) -> npt.NDArray[np.int64]:
        """The ring's slots from the oldest scrape in the span to the newest."""
        return np.arange(self._pushed - self.span, self._pushed) % self.span

    def step_time_changes(self, min_steps: float = 30.0,
                              ratio: float = STEP_RATIO) -> list[StepTimeChange]:
        """Cells whose step time left their level by more than ``ratio``, the same way, in each of
        the two last disjoint windows of STEP_WINDOW_S seconds; and cells whose change, found
        within HOLD_S, went back (``reverted``). Records both in this window.

        A window's level is the median of its per-scrape mean steps (scrapes with MIN_SCRAPE_STEPS
        of the cell's steps, more than half the window's scrapes), with ``min_steps`` steps in each
        window. The cell's level is the same median over its scrapes in the REFERENCE_S seconds
        before the windows, since its last change (at least one window's worth of votes, and
        OLDER_STEPS·min_steps steps). Not from T̂: a profile wrong from the start is drift, which
        the blend corrects as live steps accumulate (sidecar/step_times.py). After a change the
        cell's level starts at the newer window, and for HOLD_S the older level is held beside it:
        if both windows come back within √ratio of it (×1.3), the change was a transient and is
        taken back (``reverted``: the caller restores the cell's steps and counts no change);
        after HOLD_S the new level alone is the cell's.

        Why ×1.7, the false-alarm rate and the time to detect: docs/sidecar.md, *Step-time change:
        the derivation*.
        """
        i, n_w, span = self._pushed - 1, self.step_window, self.span
        order = self._order()  # position p holds scrape i - span + 1 + p
        out = []
        for key, cell in sorted(self._cells.items()):
            ms, steps = cell.ms[order], cell.steps[order]
            n0, n1 = float(np.sum(steps[-2 * n_w:-n_w])), float(np.sum(steps[-n_w:]))
            if min(n0, n1) < min_steps:
                continue
            m0, m1 = _window_ms(ms[-2 * n_w:-n_w]), _window_ms(ms[-n_w:])
            held = cell.held
            if held is not None:
                if all(abs(np.log(m / held.old_ms)) < np.log(ratio) / 2 for m in (m0, m1)):
                    # back to the older level: the change was a transient
                    cell.held, cell.start = None, held.old_start
                    out.append(StepTimeChange(key[0], key[1], round(m1, 4), round(held.new_ms, 4),
                                              n1, reverted=True))
                elif i >= held.until:
                    cell.held = None
                continue
            first = max(cell.start - (i - span + 1), 0)  # the reference: since the level's start
            votes = ms[first:span - 2 * n_w]
            votes = votes[~np.isnan(votes)]
            if votes.size < n_w or float(np.sum(steps[first:span - 2 * n_w])) < OLDER_STEPS * min_steps:
                continue
            level = _median(votes)
            r0, r1 = m0 / level, m1 / level
            if (r0 > ratio and r1 > ratio) or (r0 < 1 / ratio and r1 < 1 / ratio):
                out.append(StepTimeChange(key[0], key[1], round(m1, 4), round(level, 4), n1))
                cell.held = _Held(level, m1, cell.start, i + _scrapes(HOLD_S, self.interval_s))
                cell.start = i - n_w + 1
        return out


@dataclass(frozen=True, slots=True)
class StepTimeChange:
    batch_size: int      # the B bucket
    k: int
    recent_ms: float     # the newer window's level
    estimate_ms: float   # the level it left: the reference's (reverted: the change's new level)
    steps: float         # the newer window's steps
    reverted: bool = False  # a change within HOLD_S whose steps went back: not a new change


def _window_ms(ms: FloatArray) -> float:
    """A window's level: the median of its per-scrape means if more than half of its scrapes
    have one (nan: fewer than MIN_SCRAPE_STEPS steps), else nan. Unweighted: a scrape full of
    slow steps (a burst of prefills) is one vote."""
    voted = ms[~np.isnan(ms)]
    return _median(voted) if 2 * voted.size > ms.size else float("nan")
