"""benchmarks/pair_dependence.py: the sidecar's `pair` events back into series, and the
dependence estimates on series whose dependence is known."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.pair_dependence import NULL_CASES, POWER_CASES, dependence, main, report
from benchmarks.sidecar_log import LoggedPair, comparisons, logged_pairs
from sidecar.measured import MIN_PAIRS


def test_pair_events_become_one_series_per_comparison_in_seq_order() -> None:
    lines = [json.dumps({"event": "pair", "pair": {"seq": s, "bucket": 8, "k": k, "ref": r,
                                                    "log_ratio": v, "steps": 16}})
             for s, k, r, v in ((300, 3, 1, 0.02), (100, 1, 3, 0.05), (200, 2, 1, 0.01))]
    lines += ["not json", json.dumps({"event": "rebuild", "pair": 1}),
              '{"event": "rebuild", "decision": {"pair": 1}}']
    logged = logged_pairs(lines)
    assert logged[0] == LoggedPair(seq=300, bucket=8, k=3, ref=1, log_ratio=0.02, steps=16)
    got = comparisons(logged)
    # k=1 over k=3 at +0.05 is k=3 over k=1 at -0.05
    assert got == {(8, 1, 3): [(100, -0.05), (300, 0.02)], (8, 1, 2): [(200, 0.01)]}


def test_two_logs_series_are_never_interleaved(tmp_path: Path) -> None:
    """Two engine runs number their steps alike: each log's pairs form their own series (run A
    alternates sign pair by pair, run B is constant), so the pooled lag-1 sees A's -1."""
    def log(path: Path, values: list[float]) -> Path:
        path.write_text("\n".join(json.dumps({"event": "pair", "pair": {
            "seq": 100 * (i + 1), "bucket": 4, "k": 0, "ref": 3, "log_ratio": v, "steps": 16}})
            for i, v in enumerate(values)) + "\n")
        return path
    a = log(tmp_path / "a.log", [0.1, -0.1] * 10)
    b = log(tmp_path / "b.log", [0.0] * 20)
    got = report([a, b])
    assert [(c["log"], c["pairs"]) for c in got["comparisons"]] == [("a.log", 20), ("b.log", 20)]
    assert got["pooled"]["lag1"] == pytest.approx(-1.0, abs=0.06)


@pytest.mark.parametrize(("rho", "factor"), [(0.0, 1.0), (0.5, 3.0)])
def test_dependence_reads_a_known_ar1(rho: float, factor: float) -> None:
    rng = np.random.default_rng(4)
    series = []
    for _ in range(40):
        x = np.empty(200)
        x[0] = rng.normal()
        for i in range(1, 200):
            x[i] = rho * x[i - 1] + math.sqrt(1 - rho * rho) * rng.normal()
        series.append(list(x + rng.normal(0, 5)))  # each comparison its own mean
    got = dependence(series)
    low, high = got["lag1_band"]
    assert low <= rho + 0.03 and high >= rho - 0.03 and abs(got["lag1"] - rho) < 0.05
    assert got["variance_factor_ar1"] == pytest.approx(factor, rel=0.2)
    # batches of 5 see the dependence inside 5 pairs: 1 + 2·Σ_j (1 - j/5)·ρ^j, 2.225 at 0.5
    inside = 1 + 2 * sum((1 - j / 5) * rho ** j for j in range(1, 5))
    assert got["variance_factor_batches"] == pytest.approx(inside, rel=0.15)


def test_too_few_pairs_give_no_estimate() -> None:
    assert dependence([[0.1], [0.2, 0.3]])["lag1"] is None


def test_the_simulation_runs_the_sidecars_interval_and_writes_its_rows(tmp_path: Path) -> None:
    out = tmp_path / "pd.json"
    assert main(["--trials", "20", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert [r["case"] for r in got["null"]] == [c[0] for c in NULL_CASES]
    assert got["min_pairs"] == MIN_PAIRS and len(got["power"]) == len(POWER_CASES)


def test_the_committed_simulation_meets_the_bound_where_required() -> None:
    path = Path(__file__).parents[2] / "benchmarks" / "results" / "calibration" / "pair_dependence.json"
    got = json.loads(path.read_text())
    assert got["trials"] >= 2000
    rows = {r["case"]: r for r in got["null"]}
    assert all(r["after"]["bound_500"] <= 0.05 for r in rows.values() if r["required"])
    assert rows["ar0.5"]["before"]["false_by_40"] > 0.2  # the audit's 24%


def test_a_pair_event_that_is_not_the_sidecars_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "other.log"
    log.write_text(json.dumps({"event": "pair", "pair": {"seq": 1, "bucket": 4}}) + "\n")
    assert main([str(log)]) == 2
    err = capsys.readouterr().err
    assert "a pair event that is not the sidecar's" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
