"""Has the acceptance of the traffic changed? Two windows that must agree, against the recent past (pure).

A change of traffic (other prompts, another temperature) moves acceptance for good; a change in
the *mix of requests in flight* moves it for a few seconds and goes back: a burst of fresh
requests whose drafter has nothing to propose yet (ngram finds no match in a new output), or
whose first drafts miss, reads low until the requests age (read as changes, such bursts cost
pushes of model-made tables: docs/sidecar.md). So the test asks three things of a change:

1. **Whole request lives, and what the drafter proposed, not what K offered.** The evidence is
   the first draft's acceptance over the request-steps that had a proposal, counted per request
   and added when the request finishes (the plugin's finished_* counters; a long request in
   pieces of 256 steps): a burst's young and old steps then arrive together, whatever the mix
   in flight, and a switch shows as soon as requests that began after it finish. A request with
   nothing to propose is not one whose drafts fail: it changes goodput (the estimator's exact
   counters keep it), not acceptance. An older plugin gives per step accepted_i / proposed_i
   (proposed_i: request-steps whose drafter made more than i drafts); stock vLLM, the offered
   counts.
2. **Persistence.** The last two disjoint windows of ``window`` active scrapes (scrapes with
   proposals; idle ones are skipped, so bursts separated by idle gaps still fill windows) must
   each differ from the reference the same way: |z| > ``z`` and |p - p_ref| > ``min_delta``.
   A transient that fills one window and is gone in the next (a burst's first seconds, then its
   aged requests) is no change; a switch that lasts fills both, so it is found within two
   windows (~6 s of traffic at 1-s scrapes and the 3-s floor a window has).
3. **Against the recent past, not the prior.** The reference is the counts of the active
   scrapes before the two windows (4 windows' worth at least, 120 s at most, only since the
   last change or push: a push moves which steps of a request's life propose):
   the same traffic's own rate, mix of ages included, rather than the profile's prompts. A
   profile that was wrong from the start is not a change: the estimator learns it.

z_j = (p_j - p_ref) / sqrt(p_ref (1 - p_ref) (1/n_j + 1/n_ref)) per window j; drafts within one
step are correlated, so ``z`` stays far above the usual 2.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["MIN_CHANGE_DRAFTS", "AcceptanceChange", "AcceptanceWindows", "shift"]

FloatArray = npt.NDArray[np.float64]
MIN_CHANGE_DRAFTS = 100.0  # fewer proposals at a position in a window are no evidence
REFERENCE_S = 120.0        # the reference holds at most this much active scrape time
# and at least this many windows' worth: a shorter one samples a burst's phases, not their mix
# (bursts whose first seconds miss: a 3-scrape reference read 0.27 against a mix of 0.46)
MIN_REFERENCE_WINDOWS = 4
# the evidence (kept, proposed) per position tested; the estimator's (accepted, offered drafted)
Counts = tuple[FloatArray, FloatArray, FloatArray, FloatArray]


@dataclass(frozen=True, slots=True)
class AcceptanceChange:
    position: int        # 1-based i of the strongest evidence
    recent: float        # p_i over the newer window
    older: float         # p_i over the older window
    reference: float     # p_i over the reference before them
    drafted: float       # proposals behind the newer window's p_i
    z: float             # the weaker of the two windows' z (both are beyond the threshold)


def shift(ref: tuple[float, float], windows: list[tuple[float, float]], z: float,
          min_delta: float, min_drafts: float = MIN_CHANGE_DRAFTS) -> float | None:
    """The weaker z of ``windows`` ((accepted, proposed) each) against ``ref`` when every one is
    beyond ``z`` and ``min_delta`` the same way, else None."""
    acc_ref, n_ref = ref
    if n_ref < min_drafts or any(n < min_drafts for _, n in windows):
        return None
    p_ref = min(max(acc_ref / n_ref, 1e-3), 1 - 1e-3)
    scores = []
    for acc, n in windows:
        p = acc / n
        score = (p - p_ref) / math.sqrt(p_ref * (1 - p_ref) * (1 / n + 1 / n_ref))
        if abs(score) <= z or abs(p - acc_ref / n_ref) <= min_delta:
            return None
        scores.append(score)
    if min(scores) < 0 < max(scores):
        return None  # one window up, one down: the mix moved, not the traffic
    return min(scores, key=abs)


@dataclass(slots=True)
class AcceptanceWindows:
    """Per-scrape counts of the active scrapes (evidence at position 1), newest last."""

    window: int = 3          # active scrapes in each of the two windows, at least
    interval_s: float = 1.0  # the scrape period
    window_s: float = 3.0    # ... and at least this much scrape time (0.5-s scrapes: 6)
    _items: deque[Counts] = field(default_factory=deque)

    @property
    def size(self) -> int:
        """Active scrapes in each window."""
        return max(self.window, math.ceil(self.window_s / self.interval_s - 1e-9))

    @property
    def keep(self) -> int:
        """Active scrapes kept: the reference's at most, then the two windows."""
        return max(math.ceil(REFERENCE_S / self.interval_s), self.size) + 2 * self.size

    def add(self, kept: FloatArray, proposed: FloatArray, accepted: FloatArray,
             drafted: FloatArray) -> None:
        """One scrape: the evidence (``kept`` of ``proposed``, per position tested) and the
        estimator's counts; a scrape without evidence is idle and not kept."""
        if proposed.size == 0 or proposed[0] <= 0:
            return
        f = np.float64
        self._items.append((np.minimum(kept, proposed).astype(f), np.asarray(proposed, dtype=f),
                            np.asarray(accepted, dtype=f), np.asarray(drafted, dtype=f)))
        while len(self._items) > self.keep:
            self._items.popleft()

    def _sum(self, items: list[Counts]) -> Counts:
        def total(j: int) -> FloatArray:
            return np.asarray(np.sum([c[j] for c in items], axis=0), dtype=np.float64)
        return total(0), total(1), total(2), total(3)

    def test(self, z: float, min_delta: float,
             min_drafts: float = MIN_CHANGE_DRAFTS) -> AcceptanceChange | None:
        """The strongest position whose two last windows both left the reference the same way."""
        w = self.size
        if len(self._items) < (2 + MIN_REFERENCE_WINDOWS) * w:
            return None
        items = list(self._items)
        ref, older, newer = self._sum(items[:-2 * w]), self._sum(items[-2 * w:-w]), self._sum(items[-w:])
        best: AcceptanceChange | None = None
        for i in range(ref[0].size):
            pairs = [(float(c[0][i]), float(c[1][i])) for c in (older, newer)]
            score = shift((float(ref[0][i]), float(ref[1][i])), pairs, z, min_delta, min_drafts)
            if score is not None and (best is None or abs(score) > abs(best.z)):
                best = AcceptanceChange(i + 1, round(pairs[1][0] / pairs[1][1], 4),
                                        round(pairs[0][0] / pairs[0][1], 4),
                                        round(float(ref[0][i] / ref[1][i]), 4), pairs[1][1],
                                        round(score, 2))
        return best

    def since_change(self) -> tuple[FloatArray, FloatArray]:
        """(accepted_i, offered drafted_i) of the newer window that found a change: the new
        traffic's counts (the older one may straddle the change), which the estimator restarts
        from."""
        _, _, acc, dra = self._sum(list(self._items)[-self.size:])
        return acc, dra

    def restart(self) -> None:
        """After a change: the reference starts again from the newer window that found it."""
        while len(self._items) > self.size:
            self._items.popleft()

    def clear(self) -> None:
        """An engine restart, or a push: nothing before it is evidence of this run's traffic
        under this table."""
        self._items.clear()
