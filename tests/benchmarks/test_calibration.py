"""The analysis's error rates on simulated runs of a real run's shape (benchmarks/calibration.py).

Deterministic seeds and a few hundred trials keep this to seconds; the larger-trial figures are
committed in benchmarks/results/calibration/calibration.json (its README has the command).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.calibration import RUN, design_blocks, draw, simulate, verdicts
from benchmarks.cells import TABLES, Window
from benchmarks.stats import analyze

TRIALS = 400
ALPHA = 0.05
MC = 3 * math.sqrt(ALPHA * (1 - ALPHA) / TRIALS)   # three Monte-Carlo standard errors


@pytest.mark.parametrize("cv", [0.05, 0.15])
@pytest.mark.parametrize("blocks", [6, 20])
def test_with_no_effect_a_run_makes_a_false_verdict_at_most_five_percent_of_the_time(
        cv: float, blocks: int) -> None:
    o = simulate(np.random.default_rng(int(cv * 100) + blocks), TRIALS, blocks, cv)
    assert o.codes.shape[1] == RUN.family + len(RUN.loads)   # + each load's reference itself
    assert o.family_false_rate <= ALPHA + MC


def test_heavy_tailed_windows_keep_the_family_wise_rate() -> None:
    o = simulate(np.random.default_rng(7), TRIALS, 10, 0.10, heavy=True)
    assert o.family_false_rate <= ALPHA + MC


def test_the_designed_blocks_find_a_five_percent_effect_at_cv_ten_percent() -> None:
    blocks = design_blocks(0.10, 0.05)
    assert 150 <= blocks <= 300     # what a 10% window CV costs: docs/measurement.md
    o = simulate(np.random.default_rng(3), TRIALS, blocks, 0.10, effect=0.05)
    se = math.sqrt(0.8 * 0.2 / (TRIALS * len(RUN.loads)))
    assert o.power >= 0.8 - 3 * se
    assert o.family_false_rate <= ALPHA + MC


def test_a_small_run_has_little_power_and_says_nothing_false() -> None:
    o = simulate(np.random.default_rng(4), 200, 6, 0.10, effect=0.05)
    assert o.power < 0.3 and o.family_false_rate <= ALPHA + MC


def test_the_simulation_runs_the_same_analysis_as_a_real_cells_file() -> None:
    """Simulated runs, written as windows, give analyze() the verdicts the calibration counted."""
    tables, paired = draw(np.random.default_rng(11), 3, 8, 0.05, effect=0.06)
    codes, keys = verdicts(tables, paired)
    word = {1.0: "better", -1.0: "worse"}
    for t in range(3):
        windows = _windows({n: Y[t] for n, Y in tables.items()}, {k: Y[t] for k, Y in paired.items()})
        a = analyze(windows, head_to_head=list(RUN.head_to_head))
        got = {("ref", p, n): c for (p, n), c in a.comparisons.items()}
        got |= {("aa", c.policy, n): c for n, c in a.aa.items()}
        got |= {("vs", f"{x}\t{y}", n): c for (x, y, n), c in a.versus.items()}
        assert set(got) == set(keys)
        for j, k in enumerate(keys):
            assert word.get(codes[t, j], "none") == (got[k].verdict if got[k].verdict in word.values()
                                                     else "none"), k
        assert a.comparisons[("tuned", 1)].ratio.median == pytest.approx(1.06, abs=0.04)


def _windows(tables: dict[int, np.ndarray], paired: dict[tuple[str, int], np.ndarray]) -> list[Window]:
    out: list[Window] = []
    block = 0
    for n, Y in tables.items():
        for b in range(Y.shape[0]):
            out += [Window(block=block, round=b, load=n, group=TABLES, position=i, policy=p,
                           tokens_per_s=float(np.exp(Y[b, i])), window_s=4.0, started_s=0.0)
                    for i, p in enumerate(RUN.tables)]
            block += 1
    for (p, n), Y in paired.items():
        for b in range(Y.shape[0]):
            out += [Window(block=block, round=b, load=n, group=p, position=i, policy=q,
                           tokens_per_s=float(np.exp(Y[b, i])), window_s=4.0, started_s=0.0)
                    for i, q in enumerate((p, RUN.pair_ref))]
            block += 1
    return out


def test_the_committed_calibration_has_the_promised_shape() -> None:
    path = Path(__file__).parents[2] / "benchmarks" / "results" / "calibration" / "calibration.json"
    c = json.loads(path.read_text())
    assert {"cv", "blocks", "family_false_rate", "trials"} <= set(c["null"][0])
    assert {"cv", "effect", "blocks", "power", "trials"} <= set(c["power"][0])
    for row in c["null"]:
        assert row["family_false_rate"] <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / row["trials"])
    assert all(row["power"] >= 0.78 for row in c["power"])
