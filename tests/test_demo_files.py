"""The demo's run files: a rerun starts its sidecar fresh and keeps the last run's record."""

from __future__ import annotations

from pathlib import Path

from tabletune.demo import Narrator, fresh_sidecar_files


def test_a_rerun_moves_the_last_sidecar_log_and_checkpoint_aside(tmp_path: Path) -> None:
    (tmp_path / "sidecar.log").write_text('{"event": "rebuild"}\n')
    (tmp_path / "sidecar.state.json").write_text("{}")
    log = fresh_sidecar_files(tmp_path)
    assert log == tmp_path / "sidecar.log" and not log.exists()
    assert not (tmp_path / "sidecar.state.json").exists()  # this run's sidecar starts fresh
    assert (tmp_path / "sidecar.log.prev").read_text() == '{"event": "rebuild"}\n'
    assert (tmp_path / "sidecar.state.json.prev").read_text() == "{}"
    narrator = Narrator(log)
    narrator.tell()  # nothing of the last run is told again
    assert narrator.seen == 0


def test_a_first_run_has_nothing_to_move(tmp_path: Path) -> None:
    assert fresh_sidecar_files(tmp_path) == tmp_path / "sidecar.log"
    assert list(tmp_path.iterdir()) == []
