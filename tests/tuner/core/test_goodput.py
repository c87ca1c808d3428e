from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tuner.core.errors import InvalidInput
from tuner.core.goodput import (
    build_table,
    choose_k,
    choose_table,
    goodput,
    interpolate_step_times,
    predicted_loss,
    tau,
)
from tuner.core.table import Table, check_for_engine, documented_table

A = [0.7, 0.5, 0.3]  # the paper's worked example
SLOW = 100.0


def test_tau_worked_example() -> None:
    np.testing.assert_allclose(tau(A), [1.0, 1.7, 2.2, 2.5])


@pytest.mark.parametrize(("t1", "t3", "best"), [(5.0, 8.0, 1), (4.5, 6.0, 3)])
def test_worked_example_picks_the_papers_k(t1: float, t3: float, best: int) -> None:
    # k=0 and k=2 made slow so only the paper's two candidates compete
    G = goodput([[SLOW, t1, SLOW, t3]], A)
    assert choose_k(G).tolist() == [best]


def test_goodput_scales_with_batch_size() -> None:
    G = goodput([[1.0, 2.0], [1.0, 2.0]], [0.5])
    np.testing.assert_allclose(G, [[1.0, 0.75], [2.0, 1.5]])


def test_tie_rule_keeps_previous_k_within_half_a_percent() -> None:
    G = [[1.0, 0.9],     # k=0 clearly best
         [1.0, 1.003],   # k=1 only 0.3% better: keep k=0
         [1.0, 1.007],   # 0.7% better: switch
         [1.0, 1.0]]     # exact tie: keep k=1
    assert choose_k(G).tolist() == [0, 0, 1, 1]
    # tie=0: any strict gain switches, an exact tie still keeps the previous k
    assert choose_k(G, tie=0.0).tolist() == [0, 1, 1, 1]


def test_first_row_ties_go_to_the_smallest_k() -> None:
    assert choose_k([[1.0, 1.0, 1.0]]).tolist() == [0]


def test_allowed_k_restricts_the_choice() -> None:
    G = [[1.0, 3.0, 2.0], [1.0, 3.0, 2.5]]
    assert choose_k(G, allowed_k={0, 2}).tolist() == [2, 2]
    assert choose_k(G, allowed_k={0}).tolist() == [0, 0]
    for bad in (set(), {3}, {-1}):
        with pytest.raises(InvalidInput, match="allowed_k"):
            choose_k(G, allowed_k=bad)


def test_interpolation_is_linear_inside_and_held_outside() -> None:
    T = interpolate_step_times([2, 4], [[2.0, 4.0], [4.0, 8.0]], max_num_seqs=6)
    np.testing.assert_allclose(T, [[2, 4], [2, 4], [3, 6], [4, 8], [4, 8], [4, 8]])
    one = interpolate_step_times([8], [[1.0, 2.0]], max_num_seqs=3)
    np.testing.assert_allclose(one, [[1, 2]] * 3)
    # grid points beyond max_num_seqs still shape the line below it
    np.testing.assert_allclose(interpolate_step_times([1, 11], [[1.0], [11.0]], 3), [[1], [2], [3]])


@pytest.mark.parametrize(("grid", "T", "match"), [
    ([2, 2], [[1.0], [1.0]], "grid_B: batch sizes must be >= 1 and strictly increasing"),
    ([0, 2], [[1.0], [1.0]], "grid_B: batch sizes must be >= 1"),
    ([1.5, 2.0], [[1.0], [1.0]], "grid_B: expected a non-empty 1-D list of integers"),
    ([], [], "grid_B"),
    ([1, 2], [[1.0, 2.0]], r"T_grid: shape \(1, 2\) does not match"),
    ([1, 2], [[1.0], [float("nan")]], "T_grid: contains nan or inf"),
    ([1, 2], [[1.0], [0.0]], "T_grid: every step time must be > 0"),
    ([1, 2], [["a"], [1.0]], "T_grid: not numeric"),
])
def test_interpolation_rejects_bad_profiles(grid: list[float], T: list[list[float]],
                                            match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        interpolate_step_times(grid, T, max_num_seqs=4)


def test_bad_acceptance_and_shapes() -> None:
    with pytest.raises(InvalidInput, match=r"a: every a_i must lie in \[0, 1\]"):
        tau([0.5, 1.2])
    with pytest.raises(InvalidInput, match="a: contains nan"):
        tau([float("nan")])
    with pytest.raises(InvalidInput, match="T_dense: has 3 columns but a gives K=1"):
        goodput([[1.0, 1.0, 1.0]], [0.5])
    with pytest.raises(InvalidInput, match="max_num_seqs=0"):
        interpolate_step_times([1], [[1.0]], max_num_seqs=0)
    with pytest.raises(InvalidInput, match="tie=-0.1"):
        choose_k([[1.0]], tie=-0.1)


def test_build_table_switches_down_as_load_grows() -> None:
    # step time grows with B·(k+1): long drafts pay at low load only
    grid = [1, 8, 32, 128]
    T = [[10 + 0.05 * b * (k + 1) for k in range(4)] for b in grid]
    choice = build_table(grid, T, A, max_num_seqs=128)
    ks = choice.ks.tolist()
    assert ks[0] == 3 and ks[-1] < 3 and ks == sorted(ks, reverse=True)
    assert choice.table == Table.from_dense(ks)
    assert choice.G.shape == (128, 4)
    loss = predicted_loss(choice.table, interpolate_step_times(grid, T, 128), A, 3)
    assert loss.max() <= 0.005 / 1.005 + 1e-12
    worse = predicted_loss(Table.from_list([[1, 128, 0]]), interpolate_step_times(grid, T, 128),
                           A, 3)
    assert worse[0] > 0.3


def test_predicted_loss_refuses_k_beyond_the_profile() -> None:
    T = np.ones((8, 2))
    with pytest.raises(InvalidInput, match="table: uses K=3"):
        predicted_loss(documented_table(3, 8), T, [0.5], num_speculative_tokens=3)
    # vLLM clamps K to num_speculative_tokens before the lookup, so this one fits
    assert predicted_loss(documented_table(3, 8), T, [0.5], num_speculative_tokens=1).shape == (8,)


# --- properties -------------------------------------------------------------------------

Profile = tuple[list[int], list[list[float]], list[float], int, set[int] | None]


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    grid = sorted(draw(st.sets(st.integers(1, 300), min_size=1, max_size=8)))
    K = draw(st.integers(1, 6))
    times = st.floats(0.1, 100.0, allow_nan=False)
    T = [[draw(times) for _ in range(K + 1)] for _ in grid]
    a = draw(st.lists(st.floats(0.0, 1.0), min_size=K, max_size=K))
    allowed = draw(st.none() | st.sets(st.integers(0, K), min_size=1))
    return grid, T, a, draw(st.integers(1, 300)), allowed


@given(profiles(), st.sampled_from([0.0, 0.005, 0.05]))
def test_built_table_covers_every_batch_size(profile: Profile, tie: float) -> None:
    grid, T, a, max_num_seqs, allowed = profile
    K = len(a)
    choice = build_table(grid, T, a, max_num_seqs, tie=tie, allowed_k=allowed)
    assert choice.table == Table.from_dense(choice.ks.tolist())
    assert choice.table.ranges[-1][1] == max_num_seqs
    assert choice.ks.shape == (max_num_seqs,)
    assert set(choice.ks.tolist()) <= (allowed if allowed is not None else set(range(K + 1)))
    check_for_engine(choice.table, K, max_num_seqs, allowed_k=allowed)
    # the tie rule never costs more than tie/(1+tie) of the best allowed goodput
    loss = predicted_loss(choice.table, interpolate_step_times(grid, T, max_num_seqs), a, K,
                          allowed_k=allowed)
    assert np.all(loss >= -1e-12) and np.all(loss <= tie / (1 + tie) + 1e-12)


@given(profiles())
def test_zero_tie_reaches_the_best_goodput(profile: Profile) -> None:
    grid, T, a, max_num_seqs, _ = profile
    T_dense = interpolate_step_times(grid, T, max_num_seqs)
    choice = choose_table(T_dense, a, tie=0.0)
    G = goodput(T_dense, a)
    # exact ties may keep the previous k, so compare goodput, not the index
    np.testing.assert_array_equal(G[np.arange(max_num_seqs), choice.ks], G.max(axis=1))


def test_cliffs_flag_step_jumps_and_the_table_edges_inside_them() -> None:
    from tuner.core.goodput import cliff_warnings, cliffs

    grid = [1, 64, 128, 192, 256]
    # k=0..2; k=2 runs out of CUDA graphs above 128 (B*(k+1) > 512 tokens here): x2.5
    T = np.array([[10, 11, 12], [12, 13, 14], [14, 16, 18], [16, 19, 45], [18, 22, 50]], float)
    found = cliffs(grid, T)
    assert [(c.B_lo, c.B_hi, c.k) for c in found] == [(128, 192, 2)]
    assert found[0].ratio == pytest.approx(2.5)
    warn = cliff_warnings(Table.from_list([[1, 150, 2], [151, 256, 1]]), found)
    assert len(warn) == 1 and "B=150/151" in warn[0] and "129..192" in warn[0]
    assert cliff_warnings(Table.from_list([[1, 128, 2], [129, 256, 1]]), found) == []  # on a grid point
    assert cliffs([1, 2], np.array([[1.0], [5.0]])) == []  # adjacent B: nothing to refine


def test_refine_points_bisect_only_the_cliffs_under_a_table_edge() -> None:
    from tuner.core.goodput import cliffs, refine_points

    grid = [1, 64, 128, 192, 256]
    T = np.array([[10, 11, 12], [30, 33, 36], [34, 38, 42], [38, 43, 110], [42, 48, 120]], float)
    found = cliffs(grid, T)  # 1->64 for every k (compute grows), 128->192 for k=2
    assert refine_points(Table.from_list([[1, 150, 2], [151, 256, 1]]), found) == [160]
    assert refine_points(Table.from_list([[1, 20, 2], [21, 256, 1]]), found) == [32]
    assert refine_points(Table.from_list([[1, 256, 2]]), found) == []  # no edge: nothing to learn
