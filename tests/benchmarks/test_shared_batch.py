"""The shared-B calibration's simulated rings (benchmarks/shared_batch.py): pure."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.pair_dependence import ALPHA
from benchmarks.shared_batch import (EVERY, JUMP, RUN, band_wide, main, null_figures, ring, simulate,
                                     unpairable)
from sidecar.measured import pairs_in
from tuner.core.admin_api import Step


def test_the_matching_takes_the_batch_sizes_out_of_a_pair() -> None:
    """k has no effect, but the duel runs sit mostly above a step in T inside the band (B 37)
    and their references mostly below (B 36): over the whole band the run reads the step in T,
    per shared batch size it reads nothing."""
    steps = []
    for i in range(EVERY * 6):
        duel = i % EVERY >= EVERY - RUN
        B = 37 if (i % 4 != 0) == duel else 36     # runs 3/4 at 37, references 1/4
        seconds = 0.07 * (1 + JUMP * (B >= 37))
        steps.append(Step(i + 1, B, 1 if duel else 3, 1 if duel else 3, seconds, B, 2 * B, seconds))
    matched = [p.log_ratio for p in pairs_in(steps, set())]
    wide = [r for _, r, _ in band_wide(steps)]
    assert matched and wide
    assert max(abs(r) for r in matched) < 1e-9
    assert np.mean(wide) == pytest.approx(-math.log1p(JUMP) / 2, rel=0.1)


def test_a_short_simulation_holds_the_shape_the_calibration_reads() -> None:
    got = simulate(trials=2, seed=3, alpha=ALPHA)
    assert [r["case"] for r in got["rows"]] == ["shared-b-wander", "shared-b-drain", "shared-b-ramp",
                                                "shared-b-edge"]
    for row in got["rows"]:
        m = row["matched"]
        assert m["comparisons"] >= 2 and m["pairs_median"] >= 5, row
        assert abs(m["mean_log_ratio"]) < 0.02 and row["held_bands"] >= 2
        assert row["band_wide_gated"]["comparisons"] <= row["band_wide"]["comparisons"]


def test_a_steady_load_s_band_stays_pairable_and_a_drain_s_may_be_left_before_its_first_pair() -> None:
    """Read as the sidecar reads the ring: a load wandering inside one band pairs nearly every
    run, so three unpaired runs never come first; a slow drain pairs a run now and then, and
    three runs without a pair may come before the first pair there."""
    rng = np.random.default_rng(0)
    assert [was for was, _ in unpairable(ring("wander", rng))] == [False]
    drains = [got for _ in range(6) for got in unpairable(ring("drain", rng))]
    assert any(was and after for was, after in drains), drains   # left, then paired


def test_no_trials_is_refused() -> None:
    assert main(["--trials", "0"]) == 2


def test_a_clean_null_run_still_states_an_upper_bound() -> None:
    """No comparison erred: the bound is the rule of three (3/n), not 0."""
    got = null_figures([np.full(10, 0.001)] * 300, ALPHA)
    assert got["false_rate"] == 0.0 and got["bound"] == 0.01 and got["comparisons"] == 300
