"""Statistics over a cell's samples (pure): which samples count, the cell's step time with its
confidence interval, and whether the cell needs another repeat.

A sample is one repeat of one cell (B, k). With the plugin's per-step clock it holds the times of
the individual engine steps that ran exactly B requests at a steady k (``steps_ms``), and its
figure (``step_ms``) is their median; older samples hold only the figure. The cell's estimate is
a Student t interval on the log of those per-repeat figures (tuner/core/intervals.log_t_interval).

Adding repeats while the interval is wide is optional stopping: each look at a 95% interval
would have its own 5% to miss, and stopping where one happens to look narrow would report it.
So the 5% is spent over the looks the rule can make (Bonferroni): a cell may stop after
``repeats``, ``repeats + 1``, ..., ``max_repeats`` usable repeats, L looks, and every interval
is at 1 - 0.05/L, whichever look stopped it (``cell_level``). With ``max_repeats == repeats``
there is one look and the interval is a plain 95% one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tuner.core.intervals import Estimate, log_t_interval

if TYPE_CHECKING:
    from tuner.core.profile import StepSample

__all__ = ["ALPHA", "BATCH_FILL", "cell_estimate", "cell_level", "cell_sigma", "filled", "needs_more",
           "pooled_log_sd", "repeat_median", "spread", "usable"]

# a workload sample stands for batch size B only if the engine ran at least this share of B
# requests a step over its window. Not 1: a closed loop loses about a step per request to the
# turnaround (reply, next request, admission), so requests living ~10 steps keep ~0.88 B in the
# CPU engine
BATCH_FILL = 0.8
ALPHA = 0.05  # a cell's interval misses its true step time at most this often, over all looks


def spread(values: Sequence[float]) -> float:
    """(max - min) / median: how far a cell's repeats disagree."""
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid > 0 else 0.0


def filled(sample: StepSample) -> bool:
    """Whether a sample measured its batch size: pure-decode samples record no batch and do;
    a workload sample does when its engine ran at least BATCH_FILL·B requests a step."""
    return sample.mean_batch is None or sample.mean_batch >= BATCH_FILL * sample.B


def usable(samples: Sequence[StepSample]) -> list[StepSample]:
    """The samples a cell's median is taken over: the filled ones, or all if none is."""
    return [s for s in samples if filled(s)] or list(samples)


def repeat_median(sample: StepSample) -> float:
    """One repeat's figure: the median of its steps where it has them, else its step time."""
    return statistics.median(sample.steps_ms) if sample.steps_ms else sample.step_ms


def cell_level(repeats: int, max_repeats: int | None, alpha: float = ALPHA) -> float:
    """The level of every interval of a cell whose repeats may stop at ``repeats``..``max_repeats``
    usable ones: 1 - alpha/L over the L looks (Bonferroni), so the interval reported at
    whichever look stopped the cell misses with probability at most alpha."""
    looks = max((max_repeats or repeats) - repeats + 1, 1)
    return 1 - alpha / looks


def cell_estimate(samples: Sequence[StepSample], level: float = 1 - ALPHA) -> Estimate:
    """The cell's step time (ms): the geometric mean of its usable repeats' medians, with its
    Student t interval at ``level`` (tuner/core/intervals.log_t_interval; eq. R)."""
    return log_t_interval([repeat_median(s) for s in usable(samples)], level)


def needs_more(samples: Sequence[StepSample], repeats: int, ci_target: float,
               max_repeats: int) -> bool:
    """Another repeat while fewer than ``repeats`` samples held their batch, or the cell's
    interval (at cell_level: the looks are paid for) is wider than ±ci_target, until
    ``max_repeats``. (On the CPU engine a client now and then lags a whole request lifetime:
    such a sample is a T for a smaller batch, not noise around T(B), and does not count
    towards ``repeats``.)"""
    if len(samples) >= max_repeats:
        return False
    if len([s for s in samples if filled(s)]) < repeats:
        return True
    return cell_estimate(samples, cell_level(repeats, max_repeats)).halfwidth > ci_target


def _log_ss(samples: Sequence[StepSample]) -> tuple[float, int]:
    """(sum of squared deviations of log step time from their mean, degrees of freedom) over a
    cell's usable repeats."""
    logs = [math.log(v) for v in map(repeat_median, usable(samples)) if v > 0]
    if len(logs) < 2:
        return 0.0, 0
    mean = statistics.fmean(logs)
    return sum((x - mean) ** 2 for x in logs), len(logs) - 1


def pooled_log_sd(cells: Iterable[Sequence[StepSample]]) -> float | None:
    """The sd of log step time between repeats of one cell, pooled over every cell with two or
    more usable repeats (sum of squares over degrees of freedom); None when no cell has two.

    One pool for the whole profile, not one per k: the host's slow stretches fall on every k of
    a batch size alike (repeats interleave the k's), and a per-k pool has too few degrees of
    freedom, one wild cell deciding it (docs/tuner.md)."""
    ss, df = 0.0, 0
    for samples in cells:
        s, d = _log_ss(samples)
        ss, df = ss + s, df + d
    return math.sqrt(ss / df) if df else None


def cell_sigma(samples: Sequence[StepSample], interval_sigma: float | None,
               pooled: float) -> float:
    """σ of log T for one cell's estimate: its own repeats' sd or the profile's pooled one,
    whichever is larger, over √n (n usable repeats; a cell measured once is as uncertain as one
    repeat elsewhere says). ``interval_sigma`` (what a stored interval implies) counts only for
    a cell that kept no samples: where repeats exist, they are what its interval is made of.

    The larger of the two because two or three repeats give a sd with one or two degrees of
    freedom: two repeats that agree by chance would otherwise make a cell look exact, while a
    cell whose repeats disagree more than the profile's typical ones keeps its own spread. The
    pool's many degrees of freedom (one per repeated cell and extra repeat) are why the table
    rule may draw normal errors with it where one cell's t interval could not."""
    good = usable(samples)
    if not good:
        return max(pooled, interval_sigma or 0.0)
    ss, df = _log_ss(good)
    own = math.sqrt(ss / df) if df else 0.0
    return max(own, pooled) / math.sqrt(len(good))
