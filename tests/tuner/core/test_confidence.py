"""Tables that only split where the data can tell (tuner/core/confidence.py), on synthetic profiles."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.core.confidence import choose_confident, draw_acceptance, min_width
from tuner.core.errors import InvalidInput
from tuner.core.goodput import Cliff, choose_table

A = [0.7, 0.5, 0.3]  # tau = 1, 1.7, 2.2, 2.5


def flat(n: int, per_k: list[float]) -> np.ndarray:
    return np.tile(np.asarray(per_k, dtype=float), (n, 1))


def test_a_near_tie_inside_the_noise_keeps_one_range() -> None:
    # k=1 and k=3 within 0.5% of each other everywhere, each cell known to ±3%: the paper's
    # point rule flips between them on noise; the confident rule keeps the first k throughout
    rng = np.random.default_rng(1)
    n = 32
    base = flat(n, [4.0, 1.7 / 2.5 * 4.0 * 1.4, 5.0, 4.0 * 1.4])  # G(k=1) = G(k=3)
    noisy = base * np.exp(0.01 * rng.standard_normal(base.shape))
    point = choose_table(noisy, A, tie=0.005)
    assert len(point.table.ranges) > 2  # the point rule splits on this noise
    sure = choose_confident(noisy, np.full(base.shape, 0.03), A, drafted=[10_000] * 3)
    assert len(sure.table.ranges) == 1, sure.table


def test_a_clear_gain_splits_and_says_how_sure_it_is() -> None:
    n = 32
    T = np.empty((n, 4))
    for b in range(n):  # k=3 pays at small B; above B=16 its step grows 40% more than k=1's
        T[b] = [4.0, 4.4, 5.0, 5.6] if b < 16 else [4.0, 4.4, 6.5, 8.5]
    sure = choose_confident(T, np.full(T.shape, 0.01), A, drafted=[10_000] * 3)
    assert sure.table.to_list() == [[1, 16, 3], [17, 32, 1]]
    (edge,) = sure.edges
    assert (edge.end, edge.k_before, edge.k_after) == (16, 3, 1) and edge.confidence > 0.95
    first, second = sure.ranges
    assert first.k == 3 and first.gain_low > 0 and second.k == 1 and second.gain_low > 0


def test_wide_intervals_hold_the_split_back() -> None:
    n = 32
    T = np.empty((n, 4))
    for b in range(n):  # k=1 wins by ~4% above B=16: real, but inside ±10% cells
        T[b] = [4.0, 4.4, 5.0, 5.6] if b < 16 else [4.0, 4.4, 5.0, 6.4]
    assert len(choose_confident(T, np.full(T.shape, 0.002), A, [10_000] * 3).table.ranges) == 2
    assert len(choose_confident(T, np.full(T.shape, 0.10), A, [10_000] * 3).table.ranges) == 1


def test_a_narrow_range_is_merged_unless_a_cliff_forces_it() -> None:
    n = 32
    T = flat(n, [4.0, 4.4, 5.0, 5.6])
    T[9:11, 1] = 3.0  # k=1 much better at B=10, 11 only: a two-wide range
    sigma = np.full(T.shape, 0.005)
    merged = choose_confident(T, sigma, A, [10_000] * 3)
    assert all(e - s + 1 >= min_width(s) for s, e, _ in merged.table.ranges), merged.table
    cliff = Cliff(B_lo=9, B_hi=12, k=1, ratio=1.6)
    kept = choose_confident(T, sigma, A, [10_000] * 3, cliffs=[cliff])
    assert [10, 11, 1] in kept.table.to_list()


def test_allowed_k_and_bad_input() -> None:
    T = flat(8, [4.0, 4.4, 5.0, 5.6])
    only = choose_confident(T, np.full(T.shape, 0.01), A, allowed_k={0, 1})
    assert {k for _, _, k in only.table.ranges} <= {0, 1}
    with pytest.raises(InvalidInput, match="confidence"):
        choose_confident(T, np.full(T.shape, 0.01), A, confidence=1.0)
    with pytest.raises(InvalidInput, match="one shape"):
        choose_confident(T, np.full((8, 3), 0.01), A)


def test_acceptance_draws_stay_nested() -> None:
    draws = draw_acceptance([0.7, 0.69, 0.68], [50, 50, 50], 500, np.random.default_rng(0))
    assert (np.diff(draws, axis=1) <= 0).all()  # first i accepted implies first i-1 accepted
    assert abs(draws[:, 0].mean() - 0.7) < 0.03
    exact = draw_acceptance([0.7, 0.5], None, 3, np.random.default_rng(0))
    assert exact.tolist() == [[0.7, 0.5]] * 3


def test_changes_against_the_table_in_force_keep_only_confident_gains() -> None:
    from tuner.core.confidence import confident_changes, replicates

    n = 32
    T = np.empty((n, 4))
    for b in range(n):  # as above: k=3 clearly best to B=16, k=1 above
        T[b] = [4.0, 4.4, 5.0, 5.6] if b < 16 else [4.0, 4.4, 6.5, 8.5]
    G = replicates(T, np.full(T.shape, 0.01), A, [10_000] * 3)
    # the engine runs k=1 everywhere: moving B <= 16 to k=3 is a clear gain, kept
    ks, changes = confident_changes(G, [1] * n, [3] * 16 + [1] * 16)
    assert ks.tolist() == [3] * 16 + [1] * 16
    (c,) = changes
    assert (c.start, c.end, c.k_old, c.k_new, c.kept) == (1, 16, 1, 3, True) and c.gain_low > 0
    # a near-tie: k=2 vs k=3 at B > 16 ... made equal, with wide intervals: not worth a push
    T_tie = T.copy()
    T_tie[16:, 2] = T_tie[16:, 3] * 2.2 / 2.5
    G_tie = replicates(T_tie, np.full(T.shape, 0.05), A, [10_000] * 3)
    ks, changes = confident_changes(G_tie, [3] * 16 + [3] * 16, [3] * 16 + [2] * 16)
    assert ks.tolist() == [3] * 32 and [ch.kept for ch in changes] == [False]


def test_merge_remnants_merges_new_narrow_ranges_and_keeps_the_old_tables_own() -> None:
    from tuner.core.confidence import merge_remnants

    G = np.ones((16, 4))
    G[:, 0] = 2.0  # k=0 does better wherever a merge must pick a neighbour
    old = [3] * 1 + [1] * 15            # the operator's own 1-wide range at B=1
    ks = [3] + [1] * 5 + [2] + [0] * 9  # a push left [7, 7] k=2 behind
    out = merge_remnants(ks, old, G)
    assert out.tolist() == [3] + [1] * 5 + [0] * 10


# --- noise drawn per grid cell -------------------------------------------------------------

def test_draws_between_grid_points_share_the_grid_cells_errors() -> None:
    from tuner.core.confidence import draw_step_times

    T = flat(200, [4.0, 5.0])
    sigma = np.full(T.shape, 0.05)
    log_dev = [np.log(draw_step_times(T, sigma, 2000, np.random.default_rng(0), grid) / T[None])
               for grid in ([1, 100, 200], None)]
    on_grid, per_row = log_dev
    # B=99, 100, 101 all lean (weight ~0.99) on grid point 100: (nearly) one draw
    assert np.abs(on_grid[:, 98] - on_grid[:, 99]).max() < 0.05 * 0.05 * 4
    assert np.corrcoef(on_grid[:, 98, 0], on_grid[:, 100, 0])[0, 1] > 0.99
    assert abs(np.corrcoef(per_row[:, 98, 0], per_row[:, 100, 0])[0, 1]) < 0.1
    # a grid point carries its own σ; halfway between two, the average of two draws: σ/√2
    assert on_grid[:, 99].std() == pytest.approx(0.05, rel=0.06)
    assert on_grid[:, 149].std() == pytest.approx(0.05 / np.sqrt(2), rel=0.06)
    assert np.corrcoef(on_grid[:, 0, 0], on_grid[:, 199, 0])[0, 1] == pytest.approx(0, abs=0.1)


def test_a_grid_outside_the_rows_is_refused() -> None:
    T = flat(8, [4.0, 4.4, 5.0, 5.6])
    with pytest.raises(InvalidInput, match="grid"):
        choose_confident(T, np.full(T.shape, 0.01), A, grid=[1, 4, 16])
    with pytest.raises(InvalidInput, match="grid"):
        choose_confident(T, np.full(T.shape, 0.01), A, grid=[4, 1])


def test_interpolated_batch_sizes_are_not_more_precise_than_the_grid_on_the_32b_profile() -> None:
    # the committed 32B profile: 146 batch sizes interpolated from the grid points below them.
    # Drawn per row, their errors average out and k=3 over k=2 looked sure; drawn per grid cell
    # the interval is as wide as the few measurements behind it
    from pathlib import Path

    from tuner.core.confidence import replicates
    from tuner.core.goodput import interpolate_step_times
    from tuner.core.profile import load

    p = load(Path(__file__).parents[3] / "benchmarks" / "results"
             / "h200-vllm0.26-32b-ngram-emulated" / "profile.json")
    assert p.acceptance is not None
    n = p.engine.max_num_seqs
    T = interpolate_step_times(p.grid, p.step_time_matrix(), n)

    def gain(sigma: np.ndarray, grid: list[int] | None) -> np.ndarray:
        assert p.acceptance is not None
        G = replicates(T, sigma, p.acceptance.a, p.acceptance.drafted, grid=grid)
        return np.quantile((G[:, :146, 3] / G[:, :146, 2]).mean(axis=1) - 1, [0.025, 0.975])

    for sigma in (np.full(T.shape, 0.05), interpolate_step_times(p.grid, p.step_time_sigma(), n)):
        rows, cells = gain(sigma, None), gain(sigma, p.grid)
        assert cells[1] - cells[0] > 1.3 * (rows[1] - rows[0]), (rows, cells)
    # at the former fixed 5% the per-row interval excluded zero by 3 points; per cell it does not
    rows, cells = gain(np.full(T.shape, 0.05), None), gain(np.full(T.shape, 0.05), p.grid)
    assert rows[0] > 0.025 and cells[0] < 0
    # the tuner's own build draws per grid cell: B=95 and B=97 lean on grid point 96 together
    G = np.log(p.build().G_reps[:, :, 3] / p.build().G_reps[:, :, 2])
    assert np.corrcoef(G[:, 94], G[:, 96])[0, 1] > 0.95
