"""The guardrail's samples and test (sidecar/guardrail.py): short scrapes are pooled into samples
of at least min_steps engine steps, and the trial is Welch's t against Student's t quantile.
Its older cases (holds, extension, measured pushes) are in tests/sidecar/test_online.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sidecar.guardrail import MIN_STEPS, Guardrail, Sample, pooled, t_bar, welch
from tuner.core.table import Table

OLD, BAD = Table.from_list([[1, 16, 3]]), Table.from_list([[1, 16, 0]])


def scrape(goodput: float, steps: float = 14.0, batch: float = 8.0, seconds: float = 1.0) -> Sample:
    """A 1-s scrape of the H200's 32B model: ~14 engine steps of 70 ms."""
    return Sample(batch, goodput, steps, seconds)


def test_scrapes_are_pooled_into_samples_of_min_steps_with_tokens_over_seconds() -> None:
    g = Guardrail()
    for i in range(8):  # 7 scrapes of 14 steps hold 98 < 100: the 8th completes the sample
        g.observe(scrape(1000.0 + i), 0.0)
        assert len(g.baseline) == (1 if i == 7 else 0)
    (sample,) = g.baseline
    assert sample.steps == 8 * 14 >= MIN_STEPS and sample.seconds == 8.0 and not g.pending
    assert sample.goodput == pytest.approx(1003.5)
    # tokens over seconds, not a mean of rates; the batch weighted by steps
    both = pooled([scrape(1000.0, steps=60, batch=4.0, seconds=3.0),
                   scrape(400.0, steps=40, batch=9.0, seconds=1.0)])
    assert both.goodput == pytest.approx((3000 + 400) / 4) and both.batch == pytest.approx(6.0)
    assert both.steps == 100 and both.seconds == 4.0


def test_a_sample_never_straddles_a_push_and_settle_counts_scrapes() -> None:
    g = Guardrail(window=3, settle=1)
    for _ in range(3 * 8 + 5):  # three samples, then five scrapes of a fourth
        g.observe(scrape(1000.0), 0.0)
    assert len(g.baseline) == 3 and len(g.pending) == 5
    g.start(OLD, BAD)
    assert not g.pending  # the old table's part-sample is not pooled with the new table's
    g.observe(scrape(1000.0), 1.0)  # the settle: one scrape, not one sample
    assert not g.pending and g.trial is not None and g.trial.skipped == 1
    g.observe(scrape(1000.0), 1.0)
    assert len(g.pending) == 1


@pytest.mark.parametrize("rho", [0.0, 0.8])
def test_a_halved_goodput_on_short_scrapes_is_rolled_back_at_the_first_window(rho: float) -> None:
    rng = np.random.default_rng(1)
    noise = 0.05 * ar1(400, rho, rng)
    g = Guardrail()
    for e in noise[:160]:
        g.observe(scrape(1000.0 * math.exp(e)), 0.0)
    assert g.has_baseline
    g.start(OLD, BAD)
    out = [g.observe(scrape(500.0 * math.exp(e)), 1.0) for e in noise[160:201]]
    assert out[:-1] == [None] * 40  # settle (1 scrape) + 5 samples of 8 scrapes
    v = out[-1]
    assert v is not None and v.rolled_back and v.after == 5 and 0.45 < v.ratio < 0.55
    assert g.is_held(BAD, 2.0) is not None


def test_a_push_that_changed_nothing_is_kept_under_correlated_scrapes() -> None:
    """AR(1) ρ = 0.8 between 1-s scrapes of 14 steps, sd 0.2 in log goodput a scrape: one sample
    a scrape against z = 3 rolled back 28% of such pushes; pooled samples and Student's t at a
    level split over the looks, 0.25% (benchmarks/results/calibration/guardrail.json)."""
    rng = np.random.default_rng(0)
    back = 0
    for _ in range(300):
        g = Guardrail()
        noise = 0.2 * ar1(g.longest * 8 + 1 + g.longest * 8, 0.8, rng)
        for e in noise[:g.longest * 8]:
            g.observe(scrape(1000.0 * math.exp(e)), 0.0)
        g.start(OLD, BAD)
        for e in noise[g.longest * 8:]:
            verdict = g.observe(scrape(1000.0 * math.exp(e)), 1.0)
            if g.trial is None:
                back += bool(verdict is not None and verdict.rolled_back)
                break
    assert back <= 6, back  # 2% of 300


def test_welch_and_the_t_bar() -> None:
    diff, t, df = welch([0.0, 0.1, -0.1, 0.05], [-0.5, -0.4, -0.6])  # worked by hand:
    assert diff == pytest.approx(-0.5125)     # variances of the means 0.0018229 and 0.0033333
    assert t == pytest.approx(-7.1372, abs=1e-4) and df == pytest.approx(3.9901, abs=1e-4)
    assert welch([1.0, 1.0, 1.0], [0.5, 0.5, 0.5])[1] == -math.inf
    assert t_bar(0.025, 10.0) == pytest.approx(2.228139, abs=1e-5)   # a printed table's value
    assert t_bar(0.025, 10.09) == t_bar(0.025, 10.0)  # df floored to a tenth: never a lower bar
    assert t_bar(0.00135, 8.0) > 4 > 3.0  # on 5 + 5 samples a normal z of 3 tests at ~1%


def ar1(n: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """A stationary AR(1) with unit variance."""
    e = rng.standard_normal(n)
    for i in range(1, n):
        e[i] = rho * e[i - 1] + math.sqrt(1 - rho * rho) * e[i]
    return e
