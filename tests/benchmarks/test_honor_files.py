"""`python -m benchmarks.honor`: flags refused in one line before any vLLM starts, and the files it
writes (no engine here; tests/vllm_patch/test_honor_engine.py runs a burst on the real one)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from benchmarks.honor import checked, main, parser, write
from tests.tuner.core.test_honor import one_range, rows
from tuner.core.honor import Burst, HonorCell, check, measured_cell


@pytest.mark.parametrize("flags, named", [
    (["--batch-sizes", "1,64"], "--batch-sizes='1,64': B=64 exceeds --max-num-seqs=32"),
    (["--edge", "16"], "--edge=16: needs a batch size"),
    (["--batch-sizes", "8"], "--edge=8"),
    (["-K", "3", "--reference-k", "3"], "--reference-k=3"),
    (["--method", "eagle3"], "--method=eagle3 needs --drafter"),
    (["--tolerance", "0.7"], "--tolerance=0.7"),
    (["--emulate", "0.7,x"], "--emulate='0.7,x'"),
])
def test_bad_flags_exit_2_with_one_line_naming_the_flag(
        flags: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", str(tmp_path), "--out", str(tmp_path / "o"), *flags]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()  # nothing started, nothing written


def test_defaults_measure_an_edge_between_the_batch_sizes(tmp_path: Path) -> None:
    run = checked(parser().parse_args(["--model", str(tmp_path)]))
    assert run.batch_sizes == [1, 4, 16] and run.plan is not None
    assert run.plan.table.to_list() == [[1, 4, 3], [5, 32, 1]]
    assert (run.plan.B_below, run.plan.B_above) == (4, 16) and run.reference_k == 1
    assert checked(parser().parse_args(["--model", str(tmp_path), "--edge", "0"])).plan is None


def test_files_hold_the_check_a_row_a_cell_and_no_machine_paths(tmp_path: Path) -> None:
    model = tmp_path / "model32"
    run = checked(parser().parse_args(["--model", str(model), "--method", "eagle3", "--drafter",
                                       str(model / "eagle3"), "--out", str(tmp_path / "o")]))
    cells = [measured_cell([Burst(rows(B, k, 10))], one_range(k), B, 3)
             for B in (1, 16) for k in range(4)]
    write(run, check(cells, 3), {"main": 12.0}, f"python -m benchmarks.honor --model {model} "
          f"--drafter {model / 'eagle3'}")
    body = json.loads((tmp_path / "o" / "honor.json").read_text())
    assert body["check"]["verified"] == "honored" and body["model"] == "model32"
    assert body["drafter"] == "eagle3" and str(tmp_path) not in json.dumps(body)
    assert body["command"].endswith("--model $MODEL --drafter $DRAFTER")
    with (tmp_path / "o" / "honor.csv").open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 8 and table[0]["verdict"] == "honored" and table[0]["drafts"] == "0.0"


def _engine(K_engine: int, ms: float, ks: range) -> list[HonorCell]:
    """Two bursts per (B, k) at B = 1, 32, each step ms + k + B/32 milliseconds."""
    return [measured_cell([Burst(rows(B, k, 20, ms=ms + k + B / 32)) for _ in range(2)],
                          one_range(k), B, K_engine) for B in (1, 32) for k in ks]


def test_the_summary_holds_each_cells_drafts_and_step_the_drafting_percent_and_the_finding(
        tmp_path: Path) -> None:
    main_cells, ref = _engine(3, 20.0, range(4)), _engine(1, 19.0, range(2))
    result = check(main_cells, 3, reference=ref, runner="v2")
    run = checked(parser().parse_args(["--model", str(tmp_path / "model32"), "--out", str(tmp_path / "o")]))
    write(run, result, {"main": 12.0}, "python -m benchmarks.honor")
    got = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert (got["K"], got["K_ref"], got["runner"], got["verified"]) == (3, 1, "v2", "honored")
    assert [(c["B"], c["k"], c["drafts_per_request"]) for c in got["cells"][:4]] == [
        (1, 0, 0.0), (1, 1, 1.0), (1, 2, 2.0), (1, 3, 3.0)]
    assert got["cells"][0]["step_ms"] == pytest.approx(20.0 + 1 / 32, abs=1e-3)
    assert [(d["B"], d["k"]) for d in got["drafting"]] == [(1, 0), (1, 1), (32, 0), (32, 1)]
    d = got["drafting"][0]   # 20.03 ms on the K=3 engine against 19.03 on the K=1 one
    assert d["longer_pct"] == pytest.approx((20 + 1 / 32) / (19 + 1 / 32) * 100 - 100, abs=0.06)
    assert d["ci_pct"][0] - 0.06 <= d["longer_pct"] <= d["ci_pct"][1] + 0.06
    assert d["verdict"] == result.drafted == "startup_k"
    assert got["verification"][1]["B"] == 32 and got["verification"][1]["change_pct"] == pytest.approx(
        (21 / 24 - 1) * 100, abs=0.05)  # T(32, 0) = 21 ms against T(32, 3) = 24 ms
    assert got["finding"] == result.finding and got["meta"]["model"] == "model32"


def test_summary_from_a_stored_honor_json_and_a_bad_one_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = checked(parser().parse_args(["--model", str(tmp_path), "--out", str(tmp_path / "o")]))
    write(run, check(_engine(3, 20.0, range(4)), 3), {"main": 1.0}, "python -m benchmarks.honor")
    first = (tmp_path / "o" / "summary.json").read_text()
    (tmp_path / "o" / "summary.json").unlink()
    assert main(["--summary", str(tmp_path / "o" / "honor.json")]) == 0
    assert (tmp_path / "o" / "summary.json").read_text() == first
    (tmp_path / "bad.json").write_text('{"check": {}}')
    assert main(["--summary", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert "--summary=" in err and err.count("\n") == 1, err
