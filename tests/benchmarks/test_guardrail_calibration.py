"""The guardrail's calibration: its figures come from the guardrail itself on simulated scrapes."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.guardrail_calibration import ar1, main, rolled_back


def test_a_halved_goodput_is_rolled_back_and_an_unchanged_one_is_not_on_quiet_scrapes() -> None:
    rng = np.random.default_rng(0)
    assert rolled_back(0.05, 0.5, 20, rng)[0] == 1.0
    assert rolled_back(0.05, 0.0, 20, rng)[0] <= 0.1


def test_correlated_scrapes_pooled_roll_back_few_null_pushes() -> None:
    """ρ = 0.8 between 1-s scrapes of 14 steps at the audit's spread (sd 0.05 a scrape): one
    sample a scrape against z = 3 rolled back 11% of null pushes; now 0.4% (guardrail.json)."""
    share, _ = rolled_back(0.05, 0.0, 300, np.random.default_rng(0), rho=0.8)
    assert share <= 0.02


def test_the_scrape_noise_is_ar1_with_unit_variance() -> None:
    e = ar1(20_000, 0.8, np.random.default_rng(0))
    assert abs(np.std(e) - 1) < 0.05 and abs(np.corrcoef(e[:-1], e[1:])[0, 1] - 0.8) < 0.02


def test_bad_trials_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--trials", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trials=0" in err
