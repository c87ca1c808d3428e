"""The plateau simulation: the deployed duel pacing and pairing give a burst's plateau about
one pair at 16-step runs, more at 8 (benchmarks/plateau_pairs.py)."""

from __future__ import annotations

import pytest

from benchmarks.plateau_pairs import main, pairs_per_burst


def test_a_plateau_pairs_about_once_a_burst_at_16_step_runs() -> None:
    r = pairs_per_burst(16, bursts=30, seed=1)
    assert r["runs"] >= 2 * 30 * 0.9          # two runs begin a burst...
    assert 0.6 * 30 <= r["pairs"] <= 1.2 * 30  # ...and about one of them pairs
    assert r["log_ratio_mean"] == pytest.approx(0.62, abs=0.05)  # k=3 over k=0 as simulated


def test_shorter_runs_pair_more_often_on_the_same_bursts() -> None:
    assert pairs_per_burst(8, 30, 1)["pairs"] >= 1.5 * pairs_per_burst(16, 30, 1)["pairs"]


@pytest.mark.parametrize("argv", [["--runs", "16,x"], ["--runs", "2"], ["--bursts", "0"]])
def test_bad_input_is_refused_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error: --")
