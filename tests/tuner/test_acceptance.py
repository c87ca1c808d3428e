from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tuner.acceptance import from_histogram, monotone, per_position, stock_estimate
from tuner.core.errors import InvalidInput


def test_per_position_divides_and_marks_unobserved_positions_nan() -> None:
    a = per_position([70, 25, 0], [100, 50, 0])
    np.testing.assert_allclose(a[:2], [0.7, 0.5])
    assert math.isnan(a[2])


@pytest.mark.parametrize(("accepted", "drafted", "match"), [
    ([1, 2], [3], "accepted has 2 positions but drafted has 1"),
    ([5], [3], "exceeds drafted"),
    ([-1], [3], "accepted: counts must be finite and >= 0"),
    ([1], [float("inf")], "drafted: counts must be finite"),
    ([[1]], [[1]], "expected a 1-D sequence"),
])
def test_per_position_rejects_bad_counts(accepted: list[Any], drafted: list[Any], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        per_position(accepted, drafted)


def test_monotone_is_a_cumulative_minimum_that_keeps_nan() -> None:
    out = monotone([0.6, 0.7, float("nan"), 0.65, 0.2])
    np.testing.assert_allclose(out[[0, 1, 3, 4]], [0.6, 0.6, 0.6, 0.2])
    assert math.isnan(out[2])


def test_from_histogram_dict_and_array_agree() -> None:
    # two drafts of 3 keeping 2 and 0, two drafts of 1 keeping 1
    H = {(3, 2): 1, (3, 0): 1, (1, 1): 2}
    drafted, accepted = from_histogram(H)
    np.testing.assert_allclose(drafted, [4, 2, 2])
    np.testing.assert_allclose(accepted, [3, 1, 0])
    dense = np.zeros((4, 4))
    for (d, acc), count in H.items():
        dense[d, acc] = count
    for got, want in zip(from_histogram(dense), (drafted, accepted), strict=True):
        np.testing.assert_allclose(got, want)
    # a narrow array (no draft kept everything) is padded, not truncated
    np.testing.assert_allclose(from_histogram([[5, 0], [1, 0], [0, 3]])[1], [3, 0])


@pytest.mark.parametrize(("H", "match"), [
    ({}, "empty histogram"),
    ({(1, 2): 1}, r"acc > d"),
    ({(-1, 0): 1}, "negative"),
    ({(1, 1): -3}, "finite and >= 0"),
    ([1, 2], "expected a 2-D array"),
    ([[1], [1, 2]], "not a rectangular numeric array"),
])
def test_from_histogram_rejects_bad_histograms(H: object, match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        from_histogram(H)


def test_stock_estimate_is_biased_low_when_lengths_vary() -> None:
    H = {(3, 3): 50, (0, 0): 50}  # ngram found no match half the time
    drafted, accepted = from_histogram(H)
    np.testing.assert_allclose(per_position(accepted, drafted), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(stock_estimate(accepted, num_drafts=100), [0.5, 0.5, 0.5])
    assert np.isnan(stock_estimate([0, 0], 0)).all()
    with pytest.raises(InvalidInput, match="num_drafts=-1"):
        stock_estimate([0], -1)


@st.composite
def histograms(draw: st.DrawFn) -> dict[tuple[int, int], int]:
    K = draw(st.integers(1, 6))
    keys = st.integers(0, K).flatmap(lambda d: st.tuples(st.just(d), st.integers(0, d)))
    return draw(st.dictionaries(keys, st.integers(0, 1000), min_size=1))


@given(histograms())
def test_histogram_counts_are_nested(H: dict[tuple[int, int], int]) -> None:
    drafted, accepted = from_histogram(H)
    # position i+1 exists only where position i does, and is kept only where i was kept
    assert np.all(np.diff(drafted) <= 0) and np.all(np.diff(accepted) <= 0)
    assert np.all(accepted <= drafted)
    a = per_position(accepted, drafted)
    observed = ~np.isnan(a)
    assert np.all((a[observed] >= 0) & (a[observed] <= 1))
    # observed exactly where someone drafted; monotone never raises a value
    np.testing.assert_array_equal(observed, drafted > 0)
    assert np.all(monotone(a)[observed] <= a[observed])
    # one walk over the drafts gives the same counts
    for i in range(len(drafted)):
        assert drafted[i] == sum(n for (d, _), n in H.items() if d > i)
        assert accepted[i] == sum(n for (_, acc), n in H.items() if acc > i)
