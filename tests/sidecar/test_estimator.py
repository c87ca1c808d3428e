from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.estimator import EstimatorState, decay_prior, estimate, halve_live, observe
from tuner.core.errors import InvalidInput


def test_papers_example() -> None:
    # offline a_2 = 0.5 worth 2000 drafts; 2000 live drafts at position 2 kept 1200 times
    state = EstimatorState(prior=np.array([0.8, 0.5]))
    observe(state, [1800, 1200], [2000, 2000])
    np.testing.assert_allclose(estimate(state), [0.85, 0.55])


def test_starts_at_the_prior() -> None:
    state = EstimatorState(prior=np.array([0.7, 0.5, 0.3]))
    assert state.w == 2000.0
    np.testing.assert_array_equal(state.accepted, [0, 0, 0])
    np.testing.assert_allclose(estimate(state), [0.7, 0.5, 0.3])


def test_halving_live_counts_keeps_their_rate_but_halves_their_weight() -> None:
    state = EstimatorState(prior=np.array([0.5]))
    observe(state, [1200], [2000])
    halve_live(state)
    np.testing.assert_allclose(state.accepted, [600])
    np.testing.assert_allclose(state.drafted, [1000])
    np.testing.assert_allclose(estimate(state), [(1000 + 600) / 3000])


def test_decaying_the_prior_moves_toward_live_traffic() -> None:
    state = EstimatorState(prior=np.array([0.5]))
    observe(state, [1200], [2000])
    decay_prior(state)
    assert state.w == 1000.0
    np.testing.assert_allclose(estimate(state), [(500 + 1200) / 3000])
    decay_prior(state, factor=0.0)
    np.testing.assert_allclose(estimate(state), [0.6])
    with pytest.raises(InvalidInput, match="factor=2"):
        decay_prior(state, factor=2)


def test_zero_weight_and_no_drafts_falls_back_to_the_prior() -> None:
    state = EstimatorState(prior=np.array([0.5, 0.25]), w=0.0)
    observe(state, [3, 0], [4, 0])
    np.testing.assert_allclose(estimate(state), [0.75, 0.25])


@pytest.mark.parametrize(("accepted", "drafted", "match"), [
    ([1], [2], "accepted_delta: expected 2 positions"),
    ([3, 0], [2, 2], "exceeds drafted_delta"),
    ([-1, 0], [2, 2], "accepted_delta: values must be finite and >= 0"),
    ([0, 0], [np.nan, 2], "drafted_delta: values must be finite"),
])
def test_observe_rejects_bad_deltas(accepted: list[Any], drafted: list[Any], match: str) -> None:
    state = EstimatorState(prior=np.array([0.5, 0.4]))
    with pytest.raises(InvalidInput, match=match):
        observe(state, accepted, drafted)
    np.testing.assert_array_equal(state.drafted, [0, 0])  # nothing half-applied


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"prior": np.array([])}, "prior: need 1..K probabilities"),
    ({"prior": np.array([1.5])}, "prior: need 1..K probabilities"),
    ({"prior": np.array([0.5]), "w": -1.0}, "w=-1.0"),
    ({"prior": np.array([0.5]), "accepted": np.array([1.0, 2.0])}, "accepted: expected 1"),
])
def test_state_validates(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        EstimatorState(**kwargs)


counts = st.floats(0, 1e6, allow_nan=False)


@given(st.integers(1, 8).flatmap(lambda K: st.tuples(
    st.lists(st.floats(0, 1), min_size=K, max_size=K),
    st.lists(counts, min_size=K, max_size=K),
    st.lists(counts, min_size=K, max_size=K))), st.floats(0, 1e5))
def test_json_round_trip(data: tuple[list[float], list[float], list[float]], w: float) -> None:
    prior, accepted, drafted = data
    state = EstimatorState(prior=np.array(prior), w=w, accepted=np.array(accepted),
                           drafted=np.array(drafted))
    back = EstimatorState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back.w == state.w
    for name in ("prior", "accepted", "drafted"):
        np.testing.assert_array_equal(getattr(back, name), getattr(state, name))


def test_from_dict_rejects_other_versions() -> None:
    data = EstimatorState(prior=np.array([0.5])).to_dict()
    with pytest.raises(InvalidInput, match="estimator state: keys"):
        EstimatorState.from_dict({**data, "extra": 1})
    with pytest.raises(InvalidInput, match="estimator state: keys"):
        EstimatorState.from_dict({"prior": [0.5]})
