"""Every user-facing command answers bad input with one line naming the argument, the value and
the fix, and exit status 2; a bug (any other exception) surfaces as a bug, with its traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tabletune.cli import main


def broken(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    err = capsys.readouterr().err
    return rc, err


@pytest.mark.parametrize(("argv", "says"), [
    (["table", "{missing}"], "No such file"),
    (["table", "{not_json}"], "is not JSON"),
    (["table", "{bad_field}"], "engine.max_num_seqs"),
    (["table", "{profile}", "--acceptance", "x,y"], "--acceptance='x,y'"),
    (["table", "{profile}", "--acceptance", "0.2,0.9,0.1"], "non-increasing"),
    (["table", "{profile}", "--confidence", "1.5"], "--confidence"),
    (["table", "{profile}", "--acceptance", "0.5,0.4,0.3", "--save", "out.json"], "drop --acceptance"),
    (["compare", "{profile}", "not json"], "TABLE='not json': not JSON"),
    (["compare", "{profile}", "[[2,8,1]]"], "must start at 1"),
    (["report", "{not_json}"], "is not JSON"),
    (["serve", "--table", "nope"], "--table='nope'"),
    (["serve", "--table", "[[1,8,9]]", "-K", "3"], "exceeds num_speculative_tokens"),
    (["serve", "--emulate", "x,y"], "--emulate='x,y'"),
    (["tune", "--grid", "a,b"], "--grid='a,b'"),
    (["tune", "-K", "0"], "K must be >= 1"),
    (["tune", "--workload", "96"], "PROMPT_TOKENS:OUTPUT_TOKENS"),
    (["tune", "--emulate", "0.3,0.5"], "--emulate='0.3,0.5'"),
    (["tune", "--prompts", "{missing}"], "prompts file"),
    (["tune", "--grid", "1,64"], "max_num_seqs"),
    (["sidecar", "--profile", "{profile}", "--interval-s", "abc"], "--interval-s"),
    (["sidecar", "--profile", "{missing}"], "No such file"),
    (["demo", "--load", "0"], "--load=0"),
    (["status", "--sidecar", "nope"], "--sidecar='nope'"),
    (["status", "--sidecar", "http://127.0.0.1:1", "--timeout-s", "2"], "no sidecar answered at"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], says: str, tmp_path: Path,
                                          profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = {"missing": str(tmp_path / "nope.json"), "not_json": broken(tmp_path, "a.json", "{nope"),
              "profile": str(profile),
              "bad_field": broken(tmp_path, "b.json", profile.read_text().replace('"max_num_seqs": 16',
                                                                         '"max_num_seqs": "many"'))}
    rc, err = run(capsys, *[a.format(**values) for a in argv])
    assert rc == 2, err
    assert "Traceback" not in err and says in err, err
    assert err.count("\n") == 1, err  # one line


def test_a_bug_is_not_called_bad_input(profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.core.profile import Profile

    def boom(*a: object, **kw: object) -> None:
        raise ValueError("a numpy error deep in the math")

    monkeypatch.setattr(Profile, "build", boom)
    with pytest.raises(ValueError, match="numpy error"):
        main(["table", str(profile)])


@pytest.mark.parametrize("module", ["sidecar", "benchmarks"])
def test_the_module_entry_points_answer_bad_input_the_same_way(module: str) -> None:
    args = {"sidecar": ["--profile", "/nonexistent/p.json"],
            "benchmarks": ["--profile", "/nonexistent/p.json"]}[module]
    proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[1])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "/nonexistent/p.json" in proc.stderr


def test_table_prints_the_evidence_behind_each_range(profile: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["table", str(profile)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_speculative_tokens_per_batch_size"][0][2] == 3
    assert out["rule"] == {"tie": 0.005, "confidence": 0.9, "min_width": 4, "min_k": 0}
    assert any("% to " in line for line in out["evidence"])  # gains carry their interval


def test_table_writes_tensorrt_llms_schedule_too(profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["table", str(profile), "--format", "trtllm"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["draft_len_schedule"]["1"] == 3 and out["speculative_config"]["max_draft_len"] == 3


def test_table_saves_the_profile_re_tabled_by_this_rule(profile: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from tuner.core.profile import load

    old = load(profile)
    old.table = [[1, old.engine.max_num_seqs, 0]]  # the table an older rule stored
    old.save(profile)
    out = tmp_path / "re-tabled.json"
    assert main(["table", str(profile), "--tie", "0.02", "--save", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)["num_speculative_tokens_per_batch_size"]
    saved = load(out)
    assert saved.table == printed != old.table and saved.tie == 0.02
    assert saved.cells == old.cells and saved.acceptance == old.acceptance  # measurements kept
    assert load(profile).table == old.table  # the input is left as it was
