"""Statistics over a cell's samples (pure): which samples count, the cell's median step time with
its confidence interval, and whether the cell needs another repeat.

A sample is one repeat of one cell (B, k). With the plugin's per-step clock it holds the times of
the individual engine steps that ran exactly B requests at a steady k (``steps_ms``); the cell's
median and interval then come from those steps, resampled repeat by repeat
(tuner/core/intervals.cluster_median). Older samples hold only their repeat's figure (``step_ms``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tuner.core.intervals import Estimate, cluster_median

if TYPE_CHECKING:
    from tuner.core.profile import StepSample

__all__ = ["BATCH_FILL", "cell_estimate", "cell_sigma", "filled", "needs_more", "pooled_log_sd",
           "spread", "usable"]

# a workload sample stands for batch size B only if the engine ran at least this share of B
# requests a step over its window. Not 1: a closed loop loses about a step per request to the
# turnaround (reply, next request, admission), so requests living ~10 steps keep ~0.88 B in the
# CPU engine
BATCH_FILL = 0.8


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


def cell_estimate(samples: Sequence[StepSample], seed: int = 0) -> Estimate:
    """The cell's median step time (ms) and its 95% interval over the usable samples.

    Per-step times where the samples have them (cluster bootstrap: repeats, then steps);
    otherwise each repeat's figure is one value, and the interval is the repeats' own range
    (two or three repeats give no better honest interval than that).
    """
    good = usable(samples)
    clusters = [s.steps_ms for s in good if s.steps_ms]
    if clusters:
        return cluster_median(clusters, seed=seed)
    values = [s.step_ms for s in good]
    mid = statistics.median(values)
    if len(values) < 2:
        return Estimate(mid, mid, mid, 1)
    return Estimate(mid, min(values), max(values), len(values))


def needs_more(samples: Sequence[StepSample], repeats: int, ci_target: float,
               max_repeats: int) -> bool:
    """Another repeat while fewer than ``repeats`` samples held their batch, or the cell's
    interval is wider than ±ci_target, until ``max_repeats``. (On the CPU engine a client now
    and then lags a whole request lifetime: such a sample is a T for a smaller batch, not noise
    around T(B), and does not count towards ``repeats``.)"""
    if len(samples) >= max_repeats:
        return False
    good = usable(samples)
    if len([s for s in samples if filled(s)]) < repeats:
        return True
    return cell_estimate(good).halfwidth > ci_target


def _log_ss(samples: Sequence[StepSample]) -> tuple[float, int]:
    """(sum of squared deviations of log step time from their mean, degrees of freedom) over a
    cell's usable repeats."""
    logs = [math.log(s.step_ms) for s in usable(samples) if s.step_ms > 0]
    if len(logs) < 2:
        return 0.0, 0
    mean = statistics.fmean(logs)
    return sum((x - mean) ** 2 for x in logs), len(logs) - 1


def pooled_log_sd(cells: Iterable[Sequence[StepSample]]) -> float | None:
    """The sd of log step time between repeats of one cell, pooled over every cell with two or
    more usable repeats (sum of squares over degrees of freedom); None when no cell has two.

    One pool for the whole profile, not one per k: the host's slow stretches fall on every k of
    a batch size alike (repeats interleave the k's), and a per-k pool of the committed profiles
    held 8-13 degrees of freedom, one wild cell deciding it (the H200 MoE profile: 0.06 for k=1,
    0.29 for k=0)."""
    ss, df = 0.0, 0
    for samples in cells:
        s, d = _log_ss(samples)
        ss, df = ss + s, df + d
    return math.sqrt(ss / df) if df else None


def cell_sigma(samples: Sequence[StepSample], interval_sigma: float | None,
               pooled: float) -> float:
    """σ of log T for one cell's median: its own repeats' sd or the profile's pooled one,
    whichever is larger, over √n (n usable repeats; a cell measured once is as uncertain as one
    repeat elsewhere says), and never below what its own 95% interval implies.

    The larger of the two because two or three repeats give a sd with one or two degrees of
    freedom: two repeats that agree by chance would otherwise make a cell look exact, while a
    cell whose repeats disagree more than the profile's typical ones keeps its own spread."""
    good = usable(samples)
    ss, df = _log_ss(good)
    own = math.sqrt(ss / df) if df else 0.0
    n = max(len(good), 1)
    return max(max(own, pooled) / math.sqrt(n), interval_sigma or 0.0)
