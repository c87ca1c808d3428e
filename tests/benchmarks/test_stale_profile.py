"""A stale profile (benchmarks/stale_profile.py): one k's step times scaled, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.stale_profile import main, scaled
from benchmarks.synthetic import paper_profile
from tuner.core.errors import InvalidInput
from tuner.core.profile import StepSample, load


def test_only_the_chosen_ks_times_move_and_the_table_follows() -> None:
    base = paper_profile()
    samples = [StepSample(B=c.B, k=c.k, rep=0, client_ms=c.client_ms, engine_ms=c.engine_ms,
                          engine_steps=65, full_draft_share=None, steps_ms=[c.step_ms] * 3)
               for c in base.cells]
    profile = base.model_copy(update={"samples": samples})
    stale = scaled(profile, 0, 0.4)
    for old, new in zip(profile.cells, stale.cells, strict=True):
        factor = 0.4 if old.k == 0 else 1.0
        assert new.step_ms == pytest.approx(old.step_ms * factor)
        assert (new.B, new.k, new.wall_s) == (old.B, old.k, old.wall_s)
    for old_s, new_s in zip(profile.samples, stale.samples, strict=True):
        factor = 0.4 if old_s.k == 0 else 1.0
        assert new_s.client_ms == pytest.approx(old_s.client_ms * factor)
        assert new_s.steps_ms == pytest.approx([t * factor for t in old_s.steps_ms or []])
    assert stale.acceptance == profile.acceptance
    assert stale.table == stale.build().table.to_list() and {k for _, _, k in stale.table} == {0}
    assert profile.cells[0].step_ms == paper_profile().cells[0].step_ms  # the input untouched


@pytest.mark.parametrize(("k", "factor", "says"), [(9, 0.5, "--k=9: the profile has k"),
                                                   (0, 0.0, "--factor=0.0: must be > 0")])
def test_a_k_or_factor_it_cannot_apply_is_named(k: int, factor: float, says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        scaled(paper_profile(), k, factor)


def test_the_command_writes_a_profile_the_tools_load(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    paper_profile().save(tmp_path / "p.json")
    assert main(["--profile", str(tmp_path / "p.json"), "--k", "0", "--factor", "0.4",
                 "--out", str(tmp_path / "s.json")]) == 0
    assert load(tmp_path / "s.json").cells == scaled(paper_profile(), 0, 0.4).cells
    assert main(["--profile", str(tmp_path / "p.json"), "--k", "9", "--factor", "0.4",
                 "--out", str(tmp_path / "t.json")]) == 2
    assert "error: --k=9" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
