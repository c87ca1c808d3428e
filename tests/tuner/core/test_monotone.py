"""Weighted isotonic projections (tuner/core/monotone.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tuner.core.monotone import monotone_step_times, nondecreasing, nonincreasing


def test_pool_adjacent_violators() -> None:
    assert nondecreasing([1, 3, 2, 4]).tolist() == [1, 2.5, 2.5, 4]
    # the better-supported value holds its place
    assert nondecreasing([1, 3, 2, 4], [1, 1, 9, 1]).tolist() == [1, 2.1, 2.1, 4]
    # the demo's â = [0.22, 0.22, 0.45] after a traffic switch (a prior of 1.0 weighed at the
    # position no range drafted): the evidence pulls position 3 down to the others
    fit = nonincreasing([0.22, 0.22, 0.45], [100, 50, 1])
    assert np.allclose(fit, (22 + 11 + 0.45) / 151) and (np.diff(fit) <= 0).all()


def test_a_cliff_is_kept_and_noise_below_it_is_pooled() -> None:
    T = np.array([[4.0, 4.5], [4.2, 4.1], [12.0, 12.5], [12.1, 13.0]])  # B rows, k columns
    out = monotone_step_times(T)
    assert (np.diff(out, axis=0) >= -1e-12).all() and (np.diff(out, axis=1) >= -1e-12).all()
    assert out[2, 0] == 12.0  # the jump between rows 1 and 2 is as measured


@given(st.lists(st.floats(0, 100), min_size=1, max_size=30),
       st.lists(st.floats(0.01, 10), min_size=30, max_size=30))
def test_the_fit_is_ordered_and_keeps_the_weighted_mean(y: list[float], w: list[float]) -> None:
    weights = np.asarray(w[:len(y)])
    fit = nondecreasing(y, weights)
    assert (np.diff(fit) >= -1e-9).all()
    assert np.isclose((fit * weights).sum(), (np.asarray(y) * weights).sum(), rtol=1e-9, atol=1e-6)
    if (np.diff(y) >= 0).all():
        assert np.allclose(fit, y)
