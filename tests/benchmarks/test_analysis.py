"""Benchmark arithmetic and the TurboSpec-style baseline (pure)."""

from __future__ import annotations

import pytest

from benchmarks.analysis import Row, markdown, summarize
from benchmarks.baselines import linear_fit, turbospec_table
from benchmarks.synthetic import paper_profile


def rows(policy: str, load: int, *tps: float) -> list[Row]:
    return [Row(policy, load, i, t, 10, 5.0, "[]") for i, t in enumerate(tps)]


def test_loss_against_the_best_fixed_k_and_worst_case() -> None:
    data = (rows("fixed-k0", 1, 100, 100) + rows("fixed-k1", 1, 200, 180) +
            rows("fixed-k0", 8, 500, 500) + rows("fixed-k1", 8, 400, 400) +
            rows("tuned", 1, 190, 190) + rows("tuned", 8, 490, 490))
    s = summarize(data)
    assert s.median[("fixed-k1", 1)] == 190
    assert s.loss[("tuned", 1)] == pytest.approx(0.0)
    assert s.loss[("tuned", 8)] == pytest.approx(0.02)
    assert s.worst["fixed-k0"] == pytest.approx(1 - 100 / 190)
    assert s.worst["fixed-k1"] == pytest.approx(0.2)
    assert s.best_fixed_k == "fixed-k1"
    assert s.spread[("fixed-k1", 1)] == pytest.approx(20 / 190)
    text = markdown(s)
    assert "fixed-k1 (best single fixed k)" in text and "N=8" in text


def test_turbospec_fits_the_linear_model_and_builds_a_table() -> None:
    p = paper_profile()
    alpha, beta, gamma = linear_fit(p)
    assert alpha > 0 and beta > 0
    table = turbospec_table(p)
    assert table.to_list()[0][0] == 1 and table.to_list()[-1][1] == 16


def test_first_requests_are_staggered_over_one_lifetime() -> None:
    from tuner.sweep import first_lengths

    assert first_lengths(1, 128) == [128]
    lengths = first_lengths(4, 128)
    assert lengths == [32, 64, 96, 128]  # evenly spread, the last one full length
    assert min(first_lengths(256, 128)) == 1 and max(first_lengths(256, 128)) == 128
