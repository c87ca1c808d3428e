"""The checkpoint belongs to a profile by the hash of its measured content, apart from the
prior it holds: a restart after a rebased prior restores prior, w and counts exactly (#27.1)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sidecar import checkpoint
from sidecar.estimator import EstimatorState
from tests.sidecar.fake_engine import FakeEngine, make_profile, running, settings, write_profile
from tests.sidecar.test_app import get, ready_at, sidecar, until
from tuner.core.errors import InvalidInput
from tuner.core.table import Table

PRIOR = np.array([0.9, 0.8, 0.7])


def test_the_profile_id_is_its_measured_content() -> None:
    p = make_profile()
    same = p.model_copy(update={"created_at": p.created_at + 1, "tie": 0.02,
                                "timings_s": {"total": 1.0}})
    assert checkpoint.profile_id(p) == checkpoint.profile_id(same)
    assert checkpoint.profile_id(p) != checkpoint.profile_id(make_profile(a=(0.9, 0.8, 0.6)))
    slower = make_profile(step_ms={1: [10, 12, 16, 19], 16: [10, 12, 24, 30]})
    assert checkpoint.profile_id(p) != checkpoint.profile_id(slower)


def test_a_rebased_prior_of_the_same_profile_is_restored_exactly(tmp_path: Path) -> None:
    path = tmp_path / "estimator.json"
    rebased = EstimatorState(prior=np.array([0.0026, 6.3e-5, 6.3e-5]), w=3e-6,
                             accepted=np.array([0.5, 0.0, 0.0]), drafted=np.array([40.0, 38.0, 30.0]))
    checkpoint.save(path, rebased, 1.0, "abc")
    back = checkpoint.restore(path, PRIOR, 2000.0, "abc")
    assert back.to_dict() == rebased.to_dict()
    # another profile: what was observed stays, the prior and its weight are the new profile's
    other = checkpoint.restore(path, PRIOR, 2000.0, "def")
    assert other.prior.tolist() == PRIOR.tolist() and other.w == 2000.0
    assert other.drafted.tolist() == rebased.drafted.tolist()


def test_a_schema_1_checkpoint_is_still_read_by_its_prior(tmp_path: Path) -> None:
    path = tmp_path / "estimator.json"
    state = EstimatorState(prior=PRIOR, w=125.0, accepted=np.ones(3), drafted=np.full(3, 2.0))
    path.write_text(json.dumps({"schema_version": 1, "saved_at": 1.0, "estimator": state.to_dict()}))
    assert checkpoint.restore(path, PRIOR, 2000.0, "abc").to_dict() == state.to_dict()
    assert checkpoint.restore(path, PRIOR * 0.5, 2000.0, "abc").w == 2000.0


def test_the_table_we_wanted_is_saved_for_this_profile_only(tmp_path: Path) -> None:
    path = tmp_path / "estimator.json"
    state = EstimatorState(prior=PRIOR, w=125.0)
    wanted = checkpoint.SavedTable(Table.from_list([[1, 8, 3], [9, 16, 1]]), 7)
    checkpoint.save(path, state, 1.0, "abc", wanted)
    assert checkpoint.saved_table(path, "abc") == wanted
    assert checkpoint.saved_table(path, "def") is None  # another profile's table: not ours
    assert checkpoint.saved_table(tmp_path / "none.json", "abc") is None
    # a schema 2 file (before the table was saved) still restores its estimator, no table
    path.write_text(json.dumps({"schema_version": 2, "saved_at": 1.0, "profile_sha256": "abc",
                                "estimator": state.to_dict()}))
    assert checkpoint.restore(path, PRIOR, 2000.0, "abc").w == 125.0
    assert checkpoint.saved_table(path, "abc") is None


@pytest.mark.parametrize("text", ["{not json", '{"schema_version": 4, "saved_at": 1, "estimator": {}}',
                                  '{"schema_version": 2, "saved_at": 1, "estimator": {}, "x": 1}'])
def test_an_unreadable_checkpoint_starts_from_the_prior(tmp_path: Path, text: str) -> None:
    path = tmp_path / "estimator.json"
    path.write_text(text)
    with pytest.raises(InvalidInput, match="delete it"):
        checkpoint.load(path)
    fresh = checkpoint.restore(path, PRIOR, 2000.0, "abc")
    assert fresh.w == 2000.0 and fresh.drafted.tolist() == [0.0] * 3


async def test_a_restart_after_a_rebase_serves_the_checkpoint_field_by_field(tmp_path: Path) -> None:
    """The fault run of #27.1: a change of traffic rebases the prior; after a restart
    /v1/state must show the checkpoint's prior, w and counts, not the profile's."""
    path = tmp_path / "estimator.json"
    async with running(FakeEngine()) as fake:
        s = settings(write_profile(tmp_path / "p.json"), fake.url, checkpoint=path, timeout_s=5.0,
                     rebuild_every_steps=100_000, change_window=2, change_window_s=0.0,
                     guard_window=0)

        async def scraped_after(steps: int, a: tuple[float, ...]) -> None:
            gets = fake.metrics_gets
            fake.run(steps, a=a)

            async def seen() -> bool:  # two scrapes later: one complete scrape covers the run
                return fake.metrics_gets >= gets + 2
            await until(seen)

        async with sidecar(s) as (base, stop, task):
            await ready_at(base)
            for _ in range(9):  # the change test's reference, then its two windows
                await scraped_after(100, (0.9, 0.8, 0.7))
            for _ in range(5):
                await scraped_after(100, (0.02, 0.01, 0.005))
            _, before = await get(base + "/v1/state")
            assert before["traffic_changes"] >= 1, before["recent_decisions"]
            stop.set()
            assert await task == 0
        found = checkpoint.read(path)
        assert found is not None
        saved, state = found
        assert saved.profile_sha256 == before["profile_sha256"]
        assert state.prior[0] < 0.1 and state.w <= s.change_prior_weight  # rebased, saved
        async with sidecar(s) as (base, stop, task):
            await ready_at(base)
            _, after = await get(base + "/v1/state")
            stop.set()
            assert await task == 0
    restored = after["estimator"]
    assert set(restored) == set(saved.estimator) == {"prior", "w", "accepted", "drafted"}
    for field in ("prior", "w", "accepted", "drafted"):
        assert restored[field] == saved.estimator[field], field
    assert after["prior_acceptance"] == [0.9, 0.8, 0.7]  # the profile's, shown apart
    assert after["a_hat"][0] < 0.1
