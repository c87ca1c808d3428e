"""Medians with confidence intervals, by bootstrap (pure).

Per-step times come in clusters: the steps of one repeat share the host's state at that moment
(a slow stretch slows them all), so resampling single steps would call the interval far
narrower than the data supports. The cluster bootstrap resamples whole repeats, then steps
within them, and takes the median of what it drew: the interval then widens with the
disagreement between repeats, as it should (docs/measurement.md, rule 8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Estimate", "bootstrap_medians", "cluster_median", "sigma_log"]

Z95 = 1.959963984540054


@dataclass(frozen=True, slots=True)
class Estimate:
    """A median and its (1 - alpha) bootstrap interval, in the data's unit."""

    median: float
    low: float
    high: float
    n: int  # observations behind it

    @property
    def halfwidth(self) -> float:
        """Half the interval's width relative to the median (0.02: ±2%)."""
        return (self.high - self.low) / 2 / self.median if self.median > 0 else float("inf")


def bootstrap_medians(clusters: Sequence[Sequence[float]], replicates: int = 400,
                      seed: int = 0) -> np.ndarray:
    """The medians of ``replicates`` cluster-bootstrap draws: clusters resampled, then values
    within each (one cluster: its values alone). Clusters without values are ignored; at least
    one value is needed."""
    groups = [np.asarray(c, dtype=np.float64) for c in clusters if len(c)]
    if not groups:
        raise ValueError("cluster_median needs at least one value")
    rng = np.random.default_rng(seed)
    medians = np.empty(replicates)
    for r in range(replicates):
        picks = rng.integers(0, len(groups), size=len(groups)) if len(groups) > 1 else [0]
        drawn = [groups[i][rng.integers(0, len(groups[i]), size=len(groups[i]))] for i in picks]
        medians[r] = np.median(np.concatenate(drawn))
    return medians


def cluster_median(clusters: Sequence[Sequence[float]], replicates: int = 400,
                   alpha: float = 0.05, seed: int = 0) -> Estimate:
    """Median over all values, interval from resampling clusters, then values within each.

    One cluster: the values alone are resampled (no between-repeat information yet). Clusters
    without values are ignored; at least one value is needed.
    """
    medians = bootstrap_medians(clusters, replicates, seed)
    pooled = np.concatenate([np.asarray(c, dtype=np.float64) for c in clusters if len(c)])
    low, high = np.quantile(medians, [alpha / 2, 1 - alpha / 2])
    return Estimate(float(np.median(pooled)), float(low), float(high), int(pooled.size))


def sigma_log(median: float, low: float | None, high: float | None,
              fallback: float = 0.05) -> float:
    """The standard deviation of log(estimate) that a 95% interval [low, high] implies
    (a log-normal reading of it); ``fallback`` where there is no interval."""
    if low is None or high is None or low <= 0 or high <= low or median <= 0:
        return fallback
    return float((np.log(high) - np.log(low)) / (2 * Z95))
