"""The model's error measured live (sidecar/model_error.py): pure, on synthetic draws and pairs."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

from sidecar.measured import EARLY_PAIRS, MeasuredGoodput
from sidecar.model_error import CHECK_LEVEL, bracketed, live_errors, model_log_ratio, ratio_error
from tuner.core.chi2 import chi2_cdf, chi2_ppf


def draws(ratio: dict[int, float], max_b: int = 16, reps: int = 100) -> np.ndarray:
    """G replicates [R, B, K+1] with G(k)/G(0) = ratio[k] at every B, no draw noise."""
    base = np.array([ratio[k] for k in sorted(ratio)])
    return np.broadcast_to(base, (reps, max_b, len(ratio))).copy()


def with_pairs(*comparisons: tuple[int, int, int, list[float]]) -> MeasuredGoodput:
    m = MeasuredGoodput()
    order = 0
    for bucket, k, ref, logs in comparisons:
        m.pairs[(bucket, k, ref)] = deque((v, 15, order + i) for i, v in enumerate(logs))
        order += len(logs)
    return m


G = draws({0: 1.0, 1: 1.5, 2: 1.8, 3: 2.0})


def test_the_model_ratio_is_read_either_way_round() -> None:
    rows = np.arange(9, 17)
    mid, sd = model_log_ratio(G, rows, 0, 3) or (0.0, 1.0)
    assert mid == pytest.approx(math.log(2.0)) and sd == pytest.approx(0.0)
    assert (model_log_ratio(G, rows, 3, 0) or (0.0,))[0] == pytest.approx(-math.log(2.0))
    assert model_log_ratio(G, rows, 0, 4) is None     # a k the model does not price


def test_the_ratio_error_bounds_the_sd_of_the_pairs_distances_from_the_model() -> None:
    """The H100's plateaus: pairs read k=3 over k=0 at 2.4x where the model said 2.0x, and k=1
    over k=0 at 1.6x where it said 1.5x; stored either way round. The error is the 90% upper
    bound on the sd those distances sample: sqrt(Σ e² / χ²_n(0.1))."""
    m = with_pairs((16, 3, 0, [math.log(2.4)] * 5), (8, 0, 1, [-math.log(1.6)] * 5))
    e = ratio_error(G, m)
    squares = math.log(2.4 / 2.0) ** 2 + math.log(1.6 / 1.5) ** 2
    assert e == pytest.approx(math.sqrt(squares / chi2_ppf(1 - CHECK_LEVEL, 2)), abs=1e-5)
    assert e == pytest.approx(math.sqrt(squares / 2) * 3.081, rel=1e-3)   # χ²_2(0.1) = 0.2107
    # a model far off where the pairs look (k=3 no better than k=0): a large error, ~8x at n=1
    assert (ratio_error(G, with_pairs((16, 3, 0, [0.0] * 5))) or 0.0) == pytest.approx(
        math.log(2.0) * 7.958, rel=1e-3)


def test_the_chi_square_quantiles_are_the_tabled_ones() -> None:
    for df, q, tabled in [(1, 0.1, 0.01579), (2, 0.1, 0.2107), (4, 0.1, 1.0636),
                          (10, 0.1, 4.8652), (1, 0.95, 3.8415), (30, 0.05, 18.4927)]:
        assert chi2_ppf(q, df) == pytest.approx(tabled, rel=1e-3)
        assert chi2_cdf(chi2_ppf(q, df), df) == pytest.approx(q, abs=1e-9)
    assert chi2_cdf(0.0, 3) == 0.0


def test_too_few_pairs_check_nothing() -> None:
    assert ratio_error(G, MeasuredGoodput()) is None
    assert ratio_error(G, with_pairs((16, 3, 0, [0.9] * (EARLY_PAIRS - 1)))) is None
    # the two directions of one comparison count together
    m = with_pairs((16, 3, 0, [0.9] * (EARLY_PAIRS - 2)), (16, 0, 3, [-0.9] * 2))
    assert ratio_error(G, m) is not None


def test_a_bucket_between_two_measured_ones_borrows_the_larger_error() -> None:
    own = {40: 0.1, 64: 0.3, 128: 0.2}
    live = bracketed(own, [8, 40, 48, 56, 64, 96, 136])
    assert live[48] == live[56] == 0.3          # between 40 and 64: the larger of the two
    assert live[96] == 0.3                      # between 64 and 128
    assert 8 not in live and 136 not in live    # outside the measured span: none
    assert {b: live[b] for b in own} == own     # a measured bucket keeps its own
    assert bracketed({40: 0.1}, [32, 48]) == {40: 0.1}   # one measurement brackets nothing
    assert 96 not in bracketed({40: 0.1, 128: 0.2}, [96])   # too wide a gap: 128 > 2 x 40


def test_a_bucket_just_switched_keeps_the_error_its_old_ks_steps_measured() -> None:
    """B 9-16 now at k=3 (5 steps of it so far) ran 40 steps of k=0 before: the error is read
    on k=0's steps until k=3 has its 32; then on k=3's."""
    T_ms = np.full((16, 4), 10.0)
    a = np.array([0.5, 0.5, 0.5])
    m = MeasuredGoodput()
    # [steps, seconds, emitted, sum of B]: 16 sequences a step, 10 ms; k=0 emits 16 a step
    m.cells[(16, 0)] = [40.0, 0.4, 40 * 16 * 0.9, 40 * 16.0]
    m.cells[(16, 3)] = [5.0, 0.05, 5 * 16 * 1.8, 5 * 16.0]
    got = live_errors(m, [3] * 16, T_ms, a)[16]
    assert got.k == 0 and got.steps == 40 and got.error == pytest.approx(-math.log(0.9), abs=1e-4)
    m.cells[(16, 3)] = [40.0, 0.4, 40 * 16 * 1.8, 40 * 16.0]
    got = live_errors(m, [3] * 16, T_ms, a)[16]
    assert got.k == 3 and got.error == pytest.approx(math.log(2.5 / 1.8), abs=1e-4)  # tau(3) = 2.5
    assert live_errors(MeasuredGoodput(), [3] * 16, T_ms, a) == {}
    # several other k's: the one with the most steps; none with 32: no error
    m.cells[(16, 3)] = [5.0, 0.05, 5 * 16 * 1.8, 5 * 16.0]
    m.cells[(16, 1)] = [60.0, 0.6, 60 * 16 * 1.5, 60 * 16.0]
    assert live_errors(m, [3] * 16, T_ms, a)[16].k == 1
    few = MeasuredGoodput()
    few.cells[(16, 0)] = [31.0, 0.31, 31 * 16.0, 31 * 16.0]
    assert live_errors(few, [3] * 16, T_ms, a) == {}
