"""The guardrail's calibration: its figures come from the guardrail itself on simulated scrapes."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.guardrail_calibration import main, rolled_back_share


def test_a_halved_goodput_is_rolled_back_and_an_unchanged_one_is_not_on_quiet_scrapes() -> None:
    rng = np.random.default_rng(0)
    assert rolled_back_share(3, 0.05, 0.5, 20, rng) == 1.0
    assert rolled_back_share(3, 0.05, 0.0, 20, rng) <= 0.1


def test_bad_trials_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--trials", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trials=0" in err
