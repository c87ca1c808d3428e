"""Medians with cluster-bootstrap intervals (tuner/core/intervals.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.core.intervals import cluster_median, sigma_log


def test_agreeing_repeats_give_a_narrow_interval_a_slow_repeat_a_wide_one() -> None:
    rng = np.random.default_rng(0)
    same = [10 + 0.1 * rng.standard_normal(60) for _ in range(3)]
    tight = cluster_median(same)
    assert tight.low <= tight.median <= tight.high and tight.halfwidth < 0.01
    slow = same[:2] + [14 + 0.1 * rng.standard_normal(60)]
    wide = cluster_median(slow)
    assert wide.halfwidth > 0.1  # repeats are resampled: one slow stretch widens it
    # the same values as one cluster would look precise: the reason to resample repeats
    assert cluster_median([np.concatenate(slow)]).halfwidth < wide.halfwidth / 3


def test_interval_covers_the_true_median_most_of_the_time() -> None:
    rng = np.random.default_rng(3)
    hits = 0
    for i in range(60):
        level = rng.normal(10, 0.3, size=4)  # each repeat's own level (host state)
        clusters = [lv + rng.normal(0, 0.5, size=30) for lv in level]
        est = cluster_median(clusters, replicates=300, seed=i)
        hits += est.low <= 10.0 <= est.high
    assert hits >= 45  # nominal 95%; four clusters are few, so allow a generous margin


def test_sigma_log_reads_a_95_interval() -> None:
    band = np.exp(1.96 * 0.05)
    assert sigma_log(10.0, 10 / band, 10 * band) == pytest.approx(0.05, rel=1e-3)
    assert sigma_log(10.0, None, None) == 0.05 and sigma_log(10.0, 10.0, 10.0, fallback=0.07) == 0.07
    with pytest.raises(ValueError):
        cluster_median([[], []])
