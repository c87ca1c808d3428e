"""The honor check from a profile's own sweep (tuner/honor_run.from_profile) and where it shows:
the profile file, the tune summary's warnings, the report."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from tuner import findings
from tuner.core.honor import Overall, sweep_cell
from tuner.core.profile import Profile, load
from tuner.honor_run import from_profile
from tuner.report import markdown

RESULTS = Path(__file__).parents[2] / "benchmarks" / "results"


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*/profile.json")), ids=lambda p: p.parent.name)
def test_committed_profiles_load_with_or_without_an_honor_check(path: Path) -> None:
    """Profiles from before the honor check load without one; a newer one carries a verdict
    drawn from its own samples' drafts."""
    profile = load(path)
    if profile.honor is None:
        assert all(s.drafts is None for s in profile.samples)
    else:
        assert profile.honor.verified in get_args(Overall)
        assert any(s.drafts is not None for s in profile.samples)


def with_drafts(profile: Profile, verified: int | None) -> Profile:
    """The profile as if each sample had read its ring: every request verified the sample's k
    (None), or ``verified`` drafts whatever k the table asked."""
    samples = [s.model_copy(update={"drafts": float(s.k if verified is None else verified),
                                    "drafts_steps": 30}) for s in profile.samples]
    return profile.model_copy(update={"samples": samples})


def test_a_sweep_that_verified_each_k_reads_honored_and_shows_in_the_report(tmp_path: Path) -> None:
    profile = with_drafts(load(RESULTS / "cpu-tiny" / "profile.json"), None)
    profile.honor = from_profile(profile)
    assert profile.honor.verified == "honored" and profile.honor.drafted == "unmeasured"
    assert len(profile.honor.cells) == len(profile.samples_by_cell())
    assert findings.honor_warnings(profile) == []
    profile.save(tmp_path / "p.json")
    assert load(tmp_path / "p.json") == profile
    text = markdown(profile, "p.png")
    assert "## Preflight: does the engine honor the table?" in text
    assert "Verified drafts: **honored**" in text and "| 1 | 0.00 | 1.00 | 2.00 | 3.00 |" in text


def test_a_sweep_that_verified_the_startup_k_everywhere_is_a_warning() -> None:
    profile = with_drafts(load(RESULTS / "cpu-tiny" / "profile.json"), 3)
    profile.honor = from_profile(profile)
    assert profile.honor.verified == "ignored"
    (line,) = findings.honor_warnings(profile)
    assert "whatever the table asked" in line
    assert "(ignored)" in markdown(profile, "p.png")


def test_a_later_check_keeps_the_edge_and_runner_measured_before() -> None:
    profile = with_drafts(load(RESULTS / "cpu-tiny" / "profile.json"), None)
    edge = [sweep_cell(4, 3, 3, 32, [3.0], 30, 5.0).model_copy(update={"table": [[1, 4, 3], [5, 32, 1]]})]
    profile.honor = from_profile(profile, edge=edge, runner="v2")
    again = from_profile(profile)
    assert again.runner == "v2" and "V2 runner" in again.finding
    assert again.edge == edge and "Edge table [[1, 4, 3], [5, 32, 1]]" in again.finding
