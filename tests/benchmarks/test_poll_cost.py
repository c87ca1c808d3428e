"""The poll-cost bench (benchmarks/poll_cost.py): its pairing and its answer to bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.arm_run import ArmRun
from benchmarks.poll_cost import PollSummary, main, summarize
from benchmarks.synthetic import paper_profile
from tests.benchmarks.arm_runs import block_run, phase


def test_each_reader_is_paired_with_no_reader_in_its_block() -> None:
    runs, blocks = [], []
    for b in range(4):
        for arm, tps in (("none", 1000.0), ("metrics", 950.0 + b), ("stats", 1000.0 + b)):
            runs.append(block_run(b, "burst-c16", arm, [phase(tps * 10, 10.0)]))
            blocks.append(b)
    got = summarize(runs, blocks, 1.0)
    assert got.blocks == 4 and set(got.arms) == {"metrics", "stats"}
    metrics, stats = got.arms["metrics"], got.arms["stats"]
    assert metrics.blocks == 4 and metrics.throughput_ratio == pytest.approx(
        math.exp(sum(math.log((950 + b) / 1000) for b in range(4)) / 4), abs=1e-4)
    lo, hi = stats.throughput_ci
    assert lo is not None and hi is not None and stats.throughput_ratio is not None
    assert lo < stats.throughput_ratio < hi
    assert metrics.step_ms_ratio == 1.0  # the same engine step time in every run here


@pytest.mark.parametrize("flags", [["--blocks", "1"], ["--every-s", "0"]])
def test_a_design_it_cannot_run_is_refused_before_an_engine_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    paper_profile().save(tmp_path / "p.json")
    assert main(["--profile", str(tmp_path / "p.json"), "--out", str(tmp_path / "o"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flags[0]}={flags[1]}: give ") and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_the_committed_summary_is_its_runs_summarized() -> None:
    folder = Path(__file__).parents[2] / "benchmarks" / "results" / "cpu-tiny-poll-cost"
    record = json.loads((folder / "runs.json").read_text())
    runs = [ArmRun.model_validate(r) for r in record["runs"]]
    assert summarize(runs, record["blocks"], record["every_s"]) == PollSummary.model_validate_json(
        (folder / "summary.json").read_text())
