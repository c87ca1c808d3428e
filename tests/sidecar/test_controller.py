"""Controller.tick against a tiny real aiohttp app (tests/sidecar/fake_engine.py).

The fake serves canned /metrics and a fake admin API, so the faults a real engine cannot
produce on demand (500s, truncated bodies, garbage, hangs, resets, 4xx) are exercised here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sidecar import checkpoint, profile_fit
from sidecar.controller import Controller
from sidecar.decision import BIAS_NOTE
from sidecar.server import state_of
from tests.sidecar.fake_engine import (
    STARTUP,
    TOKEN,
    TUNED,
    FakeEngine,
    closed_port_url,
    running,
    settings,
    write_profile,
)
from tuner.core.engine_client import EngineClient
from tuner.core.errors import InvalidInput, ProfileMismatch
from tuner.core.profile import load


@asynccontextmanager
async def controller_for(engine: FakeEngine, tmp_path: Path, admin_url: str | None = None,
                         profile: dict[str, Any] | None = None,
                         clock: Callable[[], float] = time.time,
                         **overrides: Any) -> AsyncIterator[tuple[Controller, FakeEngine]]:
    async with running(engine) as fake:
        path = write_profile(tmp_path / "profile.json", **(profile or {}))
        s = settings(path, fake.url, admin_url, **overrides)
        async with EngineClient(s.engine_url, s.admin_url, s.token(), s.timeout_s,
                                s.retry_attempts, max_wait_s=0.05,
                                max_body_bytes=s.max_metrics_bytes) as client:
            yield Controller(s, load(path), client, clock), fake


def records(caplog: pytest.LogCaptureFixture, condition: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "condition", None) == condition]


async def rebuild_once(c: Controller, fake: FakeEngine, steps: int = 150,
                       a: tuple[float, ...] = (0.9, 0.8, 0.7)) -> Any:
    if c.observer.prev is None:
        assert await c.tick() is None  # first scrape: a baseline, no delta yet
    fake.run(steps, a)
    return await c.tick()


# --- the happy path --------------------------------------------------------------------------

async def test_rebuild_pushes_the_profile_table_with_the_token(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(), tmp_path) as (c, fake):
        decision = await rebuild_once(c, fake)
        assert decision is not None and decision.outcome == "pushed", decision
        assert fake.table == TUNED and fake.table_puts == [{"table": TUNED, "if_version": 1}]
        assert fake.auth_headers == [f"Bearer {TOKEN}"]
        # the exploration budget always (the rotation is charged to it), no duels unasked, and
        # the rotation over every runnable k until a rebuild has judged the k's
        assert fake.policy_puts == [{"explore_every": 12, "explore_run": 3, "hysteresis": 1,
                                     "duel_share": 0.25, "duel_horizon": 1000, "explore_ks": []}]
        assert decision.old_table == STARTUP and decision.new_table == TUNED
        assert decision.source == "plugin" and decision.bias_note is None
        # live counts (600 drafts a position) are in the decision, before halving
        assert decision.drafted == [600.0] * 3 and decision.accepted == [540.0, 480.0, 420.0]
        # B=5..8 moves from k=1 to k=3: a predicted gain; B=1..4 and 9..16 keep their k
        gains = {(g.batch_size_start, g.batch_size_end): g.gain for g in decision.gains}
        assert gains[(9, 16)] == pytest.approx(0.0)
        assert gains[(1, 8)] > 0
        assert c.engine_table.info is not None and c.engine_table.info.version == 2


async def test_no_push_when_the_engine_already_runs_the_table(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(table=TUNED), tmp_path) as (c, fake):
        decision = await rebuild_once(c, fake)
        assert decision is not None and decision.outcome == "unchanged"
        assert fake.table_puts == []


async def test_waits_for_rebuild_every_steps(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(), tmp_path) as (c, fake):
        assert await rebuild_once(c, fake, steps=60) is None  # 60 < 100 steps
        assert c.steps_since_rebuild == 60
        fake.run(40)
        assert await c.tick() is not None and c.steps_since_rebuild == 0


async def test_halving_and_prior_decay_in_the_flow(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(), tmp_path, prior_weight=1000.0, prior_decay=0.5,
                              profile={"a": (0.5, 0.25, 0.1)}) as (c, fake):
        decision = await rebuild_once(c, fake, a=(0.9, 0.8, 0.7))
        # â_1 = (1000·0.5 + 540) / (1000 + 600), eq. â with the counts before halving
        assert decision.a_hat[0] == pytest.approx((500 + 540) / 1600, abs=1e-6)
        assert decision.prior_weight == 1000.0
        np.testing.assert_allclose(c.belief.acceptance.drafted, [300.0] * 3)
        np.testing.assert_allclose(c.belief.acceptance.accepted, [270.0, 240.0, 210.0])
        assert c.belief.acceptance.w == 500.0
        second = await rebuild_once(c, fake, a=(0.9, 0.8, 0.7))
        assert second.prior_weight == 500.0 and second.drafted == [900.0] * 3


async def test_low_live_acceptance_moves_the_table(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(table=TUNED), tmp_path, prior_weight=10.0) as (c, fake):
        decision = await rebuild_once(c, fake, a=(0.3, 0.1, 0.0))
        assert decision.outcome == "pushed" and decision.new_table == [[1, 16, 1]]
        assert decision.gains[0].gain is not None and decision.gains[0].gain > 0


# --- dry-run ---------------------------------------------------------------------------------

async def test_dry_run_never_writes(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(), tmp_path, dry_run=True) as (c, fake):
        decision = await rebuild_once(c, fake)
        assert decision.outcome == "dry_run" and decision.new_table == TUNED
        fake.restart()  # even a reset does not make a dry run push
        await c.tick()
        fake.run(150)
        assert (await c.tick()).outcome == "dry_run"
        assert fake.table_puts == [] and fake.policy_puts == [] and fake.table == STARTUP
        assert state_of(c)["recommended_table"] == TUNED


async def test_dry_run_next_to_stock_vllm_says_the_estimate_is_biased(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(plugin=False), tmp_path, admin_url=closed_port_url(),
                              dry_run=True, prior_weight=0.0) as (c, fake):
        decision = await rebuild_once(c, fake, steps=150)
        assert decision.outcome == "dry_run" and decision.source == "stock"
        assert decision.bias_note == BIAS_NOTE and "biased low" in BIAS_NOTE
        assert decision.old_table is None and all(g.gain is None for g in decision.gains)
        # drafted_i ≈ num_drafts; accepted_i is vLLM's own (lagging) series
        assert decision.drafted == [600.0] * 3
        assert decision.accepted == [513.0, 456.0, 399.0]
        state = state_of(c)
        assert state["bias_note"] == BIAS_NOTE and state["recommended_table"] is not None
        assert state["conditions"]["admin"] == "absent"


async def test_without_dry_run_the_admin_endpoint_is_awaited(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(), tmp_path, admin_url=closed_port_url()) as (c, fake):
        for _ in range(3):
            assert await c.tick() is None
        assert c.readiness() == (False, f"waiting for the plugin's admin endpoint at "
                                    f"{c.settings.admin_url}")
        assert fake.metrics_gets == 0


# --- faults ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["500", "truncate", "cut", "garbage", "hang", "missing",
                                   "overflow", "huge"])
async def test_metrics_faults_never_crash_and_log_once(tmp_path: Path, fault: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path, max_metrics_bytes=64 * 1024) as (c, fake):
        await rebuild_once(c, fake)
        fake.metrics_fault = fault
        for _ in range(3):
            fake.run(100)
            assert await c.tick() is None
        assert c.observer.consecutive_failures == 3
        logged = records(caplog, "scrape")
        assert len(logged) == 1 and logged[0].levelno == logging.WARNING
        assert fake.table == TUNED  # the last good table stays in the engine
        fake.metrics_fault = None
        await c.tick()
        logged = records(caplog, "scrape")
        assert len(logged) == 2 and logged[1].state == "ok" and c.observer.consecutive_failures == 0


async def test_vllm_down_is_not_a_crash(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(), tmp_path, dry_run=True) as (c, fake):
        c.settings = c.settings.model_copy(update={"engine_url": closed_port_url()})
        c.client.engine_url = c.settings.engine_url
        assert await c.tick() is None
        assert c.stats.failures["scrape_unavailable"] == 1
        assert c.readiness() == (False, f"no complete scrape of {c.settings.engine_url}/metrics yet "
                                   "(the last one: unavailable)")


async def test_a_4xx_is_logged_with_its_reason_and_not_retried(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(admin_status=422), tmp_path) as (c, fake):
        decision = await rebuild_once(c, fake)
        assert decision.outcome == "rejected"
        assert "422" in decision.reason and "K=3 is not allowed here" in decision.reason
        assert "(field table)" in decision.reason
        assert len(fake.table_puts) == 1 and fake.table == STARTUP
        assert c.stats.failures["push_rejected"] == 1 and not c.engine_table.needs_sync


async def test_a_5xx_is_retried_then_pushed_once_the_engine_recovers(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(admin_status=500), tmp_path) as (c, fake):
        decision = await rebuild_once(c, fake)
        assert decision.outcome == "failed" and "500" in decision.reason
        assert len(fake.table_puts) == 3  # retry_attempts
        assert fake.table == STARTUP and c.engine_table.needs_sync
        fake.admin_status = None
        fake.run(10)
        assert await c.tick() is None  # not a rebuild: the pending push is synced
        assert fake.table == TUNED and not c.engine_table.needs_sync


async def test_counter_reset_re_pushes_table_and_policy(tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path) as (c, fake):
        await rebuild_once(c, fake)
        assert fake.table == TUNED and len(fake.policy_puts) == 1
        fake.restart()
        assert fake.table == STARTUP
        assert await c.tick() is None
        assert fake.table == TUNED and len(fake.policy_puts) == 2 and c.stats.resets == 1
        assert any(r.getMessage() == "table re-pushed" for r in caplog.records)
        # the live counts survive the restart; the next interval counts again
        fake.run(150)
        assert (await c.tick()).outcome == "unchanged"


async def test_profile_that_does_not_match_the_engine_is_refused(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(max_num_seqs=32), tmp_path) as (c, _):
        with pytest.raises(ProfileMismatch, match="max_num_seqs: profile has 16, engine has 32"):
            await c.tick()
    async with controller_for(FakeEngine(K=2), tmp_path, profile={"K": 3},
                              dry_run=True, admin_url=closed_port_url()) as (c, _):
        with pytest.raises(ProfileMismatch, match="/metrics has 2 draft positions"):
            await c.tick()
    with pytest.raises(ProfileMismatch, match="model: profile has 'tiny', --model-name is 'x'"):
        async with controller_for(FakeEngine(), tmp_path, model_name="x"):
            pass


async def test_drift_is_reported_per_cell_and_warned_once(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path, drift_warn=0.15) as (c, fake):
        await c.tick()
        fake.run(20, B=4, step_ms=27.0)  # profile T(4, 3) = 18 ms: 1.5x slower
        await c.tick()
        assert records(caplog, "drift") == []  # 20 steps: a start's transient, no warning yet
        fake.run(130, B=4, step_ms=27.0)
        decision = await c.tick()
        assert [(d.batch_size, d.k, d.ratio) for d in decision.drift] == [(4, 3, 1.5)]
        (slow,) = records(caplog, "drift")
        assert "B=4 k=3: 1.5x the profile's 18.0 ms over 150 steps" in slow.getMessage()
        fake.run(2000, B=4, step_ms=18.0)
        await c.tick()
        assert c.belief.drift_cells[0].ratio < 1.15
        assert [r.state for r in records(caplog, "drift")] == ["slow", "ok"]


async def test_checkpoint_after_every_rebuild_restores(tmp_path: Path) -> None:
    path = tmp_path / "state" / "estimator.json"
    async with controller_for(FakeEngine(), tmp_path, checkpoint=path, prior_decay=0.5) as (c, fake):
        await rebuild_once(c, fake)
        assert path.exists() and not list(path.parent.glob(".*.tmp"))
        saved = checkpoint.load(path)
        assert saved is not None and saved.w == c.belief.acceptance.w == 1000.0
        np.testing.assert_allclose(saved.drafted, c.belief.acceptance.drafted)
        async with EngineClient(fake.url, fake.url, None, 1.0) as client:
            again = Controller(c.settings, c.profile, client)
        assert again.belief.acceptance.w == 1000.0
        np.testing.assert_allclose(again.belief.acceptance.accepted, c.belief.acceptance.accepted)


async def test_a_corrupt_checkpoint_starts_from_the_prior(tmp_path: Path) -> None:
    path = tmp_path / "estimator.json"
    path.write_text("{not json")
    async with controller_for(FakeEngine(), tmp_path, checkpoint=path) as (c, _):
        assert c.belief.acceptance.w == 2000.0 and c.belief.acceptance.drafted.tolist() == [0.0] * 3


async def test_the_token_is_never_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with controller_for(FakeEngine(admin_status=500), tmp_path) as (c, fake):
        await rebuild_once(c, fake)
        fake.admin_status = 401
        fake.restart()
        await c.tick()
        assert any("401" in r.getMessage() or "401" in str(getattr(r, "error", ""))
                   for r in caplog.records)
        assert TOKEN not in caplog.text and TOKEN not in repr(c.settings)
        assert TOKEN not in repr(c.client)


# --- incomplete scrapes and restarts (issue #15.3) ------------------------------------------

def restarts(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "engine restart"]


async def test_missing_plugin_series_are_skipped_not_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path, rebuild_every_steps=10_000) as (c, fake):
        await rebuild_once(c, fake, steps=10)
        drafted = c.belief.acceptance.drafted.copy()
        fake.plugin = False
        for _ in range(3):
            fake.run(10)
            assert await c.tick() is None
        assert restarts(caplog) == [] and c.stats.resets == 0 and not c.engine_table.needs_sync
        assert len(fake.policy_puts) == 1 and fake.table_puts == []
        np.testing.assert_allclose(c.belief.acceptance.drafted, drafted)  # nothing fed from them
        logged = records(caplog, "scrape")
        assert [r.state for r in logged] == ["incomplete"]
        assert "drafted[0]" in logged[0].error and c.stats.failures["scrape_incomplete"] == 3
        fake.plugin = True
        await c.tick()  # the next complete scrape covers the whole gap
        np.testing.assert_allclose(c.belief.acceptance.drafted, drafted + 3 * 10 * 4)
        assert [r.state for r in records(caplog, "scrape")] == ["incomplete", "ok"]
        assert c.observer.source == "plugin" and c.observer.consecutive_failures == 0


async def test_stale_plugin_values_are_not_fed_as_fresh(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path, rebuild_every_steps=10_000) as (c, fake):
        await rebuild_once(c, fake, steps=10)
        drafted = c.belief.acceptance.drafted.copy()
        fake.stall(age_s=5.0)  # > 2 intervals of 0.05 s
        fake.run(10)
        assert await c.tick() is None
        np.testing.assert_allclose(c.belief.acceptance.drafted, drafted)
        (logged,) = records(caplog, "scrape")
        assert logged.state == "incomplete" and "5.0 s old (> 0.1 s)" in logged.error
        fake.unstall()
        await c.tick()
        np.testing.assert_allclose(c.belief.acceptance.drafted, drafted + 10 * 4)
        assert restarts(caplog) == [] and fake.table_puts == []


async def test_a_new_engine_start_time_is_a_restart_even_when_counters_caught_up(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path) as (c, fake):
        await rebuild_once(c, fake)
        assert fake.table == TUNED
        fake.restart()
        fake.run(400)  # every counter is above the old run's again
        assert await c.tick() is None
        (restart,) = restarts(caplog)
        assert "start time changed" in restart.reason
        assert fake.table == TUNED and len(fake.policy_puts) == 2 and c.stats.resets == 1


async def test_without_the_start_gauge_a_counter_going_down_is_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(started_at=None, stats_age_s=None), tmp_path) as (c, fake):
        await rebuild_once(c, fake)
        fake.restart()
        assert await c.tick() is None
        (restart,) = restarts(caplog)
        assert "counters went down" in restart.reason and fake.table == TUNED


# --- the state is what the sidecar last saw (issue #15.5) -----------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_readiness_and_state_follow_the_last_scrape_and_admin_call(tmp_path: Path) -> None:
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, interval_s=1.0,
                              timeout_s=0.3) as (c, fake):
        await c.tick()
        assert c.readiness() == (True, "ready")
        state = state_of(c)
        assert state["ready"] is True and state["last_scrape_ok_at"] == clock.now
        assert state["last_scrape_age_s"] == 0 and state["admin_age_s"] == 0
        fake.metrics_fault = "500"  # vLLM killed: its /metrics and the admin endpoint die
        fake.admin_down = True
        clock.now += 1.0
        await c.tick()
        assert c.readiness()[0]  # one failed scrape: still within 3 intervals
        clock.now += 2.5
        await c.tick()
        ok, reason = c.readiness()
        assert not ok and "no complete scrape" in reason and "for 3.5 s (> 3.3 s)" in reason
        assert "the last one: unavailable" in reason
        state = state_of(c)
        assert state["ready"] is False and state["ready_reason"] == reason
        assert state["last_scrape_age_s"] == 3.5 and state["admin_age_s"] == 3.5
        assert state["conditions"]["scrape"] == "unavailable"
        details = state["condition_details"]["scrape"]
        assert details["since"] == clock.now - 2.5 and "500" in details["error"]
        # vLLM back, the admin endpoint still dead: a push fails, so not ready
        fake.metrics_fault = None
        fake.run(150)
        decision = await c.tick()
        assert decision is not None and decision.outcome == "failed"
        ok, reason = c.readiness()
        assert not ok and "the last call to the plugin's admin endpoint" in reason
        assert state_of(c)["conditions"]["admin"] == "unavailable"
        fake.admin_down = False
        clock.now += 1.0
        await c.tick()  # the failed push is synced: the admin answers again
        assert c.readiness() == (True, "ready") and fake.table == TUNED
        assert state_of(c)["admin_age_s"] == 0


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == name]


OPERATOR = [[1, 16, 2]]


async def test_a_foreign_table_is_held_off_then_replaced(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock,
                              foreign_hold_s=300.0) as (c, fake):
        assert (await rebuild_once(c, fake)).outcome == "pushed" and fake.version == 2
        fake.operator_put(OPERATOR)
        await c.tick()  # the scrape shows v3, which we did not write
        (event,) = events(caplog, "foreign_table")
        seen = event.foreign_table
        assert (seen["known_version"], seen["version"], seen["table"]) == (2, 3, OPERATOR)
        assert seen["ours"] == TUNED and "recommending only until" in seen["action"]
        assert event.levelno == logging.WARNING and c.stats.foreign_tables == 1
        assert state_of(c)["foreign_hold"]["version"] == 3
        fake.run(150)
        decision = await c.tick()
        assert decision.outcome == "held" and "(v3)" in decision.reason
        assert decision.old_table == OPERATOR and fake.table == OPERATOR
        assert len(fake.table_puts) == 1  # nothing written while holding
        clock.now += 300.0
        await c.tick()
        (ended,) = events(caplog, "foreign_table_hold_ended")
        assert "pushing again" in ended.action and state_of(c)["foreign_hold"] is None
        fake.run(150)
        assert (await c.tick()).outcome == "pushed" and fake.table == TUNED
        assert len(events(caplog, "foreign_table")) == 1  # our own push is not foreign


async def test_a_table_written_since_our_last_read_is_never_overwritten(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The push is a conditional PUT (if_version of the table last read, with no GET before
    it): a write that came in since wins, and the foreign-table rule takes over."""
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path, foreign_hold_s=300.0) as (c, fake):
        assert await c.tick() is None  # first scrape: a baseline
        fake.run(150, (0.9, 0.8, 0.7))
        fake.operator_put(OPERATOR)  # after the tick read the table, before the rebuild's PUT
        decision = await c.rebuild()
        assert decision.outcome == "held" and "after we read it" in decision.reason
        assert fake.table == OPERATOR and fake.version == 2
        assert fake.table_puts == [{"table": TUNED, "if_version": 1}]  # refused with 409
        (event,) = events(caplog, "foreign_table")
        assert event.foreign_table["version"] == 2 and c.engine_table.holding()


async def test_a_push_whose_reply_was_lost_is_ours_when_its_retry_meets_409(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The retry of a conditional PUT that had landed finds the table moved: by us, not by
    someone else, so no foreign-table hold."""
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path, foreign_hold_s=300.0) as (c, fake):
        fake.lose_reply = True
        decision = await rebuild_once(c, fake)
        assert decision.outcome == "pushed" and "reply was lost" in decision.reason
        assert fake.table == TUNED and len(fake.table_puts) == 2  # the PUT and its retry
        assert events(caplog, "foreign_table") == [] and not c.engine_table.holding()


async def test_foreign_hold_0_reasserts_our_table_at_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path, foreign_hold_s=0.0) as (c, fake):
        await rebuild_once(c, fake)
        fake.operator_put(OPERATOR)
        assert await c.tick() is None
        assert fake.table == TUNED and fake.version == 4
        (event,) = events(caplog, "foreign_table")
        assert "reasserting our table now" in event.foreign_table["action"]


async def test_an_engine_restart_ends_a_hold(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path) as (c, fake):
        await rebuild_once(c, fake)
        fake.operator_put(OPERATOR)
        await c.tick()
        assert c.engine_table.holding()
        fake.restart()
        await c.tick()
        assert not c.engine_table.holding() and fake.table == TUNED
        (ended,) = events(caplog, "foreign_table_hold_ended")
        assert "restarted" in ended.action


async def test_a_version_we_did_write_is_not_foreign(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path) as (c, fake):
        await rebuild_once(c, fake)
        fake.operator_put(TUNED)  # e.g. a push of ours whose reply was lost
        await c.tick()
        assert events(caplog, "foreign_table") == [] and not c.engine_table.holding()
        assert c.engine_table.info is not None and c.engine_table.info.version == 3


async def test_the_same_table_written_again_is_not_foreign(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A version move that leaves the table as it was (a config reconcile re-applying it, or a
    bench that ran other tables while the sidecar was frozen and put its table back) holds
    nothing; a different table still does."""
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path, foreign_hold_s=300.0) as (c, fake):
        assert await c.tick() is None  # never pushed: the startup table is what runs
        fake.operator_put(STARTUP)
        fake.operator_put(OPERATOR)  # unseen: the next scrape finds v3 back on STARTUP
        fake.operator_put(STARTUP)
        await c.tick()
        assert events(caplog, "foreign_table") == [] and not c.engine_table.holding()
        assert c.engine_table.info is not None and c.engine_table.info.version == 4
        fake.operator_put(OPERATOR)
        await c.tick()
        (event,) = events(caplog, "foreign_table")
        assert event.foreign_table["table"] == OPERATOR and c.engine_table.holding()


@asynccontextmanager
async def restarted_sidecar(c: Controller,
                            clock: Callable[[], float] = time.time) -> AsyncIterator[Controller]:
    """A new sidecar on the first one's checkpoint (the first is never ticked again: killed)."""
    s = c.settings
    async with EngineClient(s.engine_url, s.admin_url, s.token(), s.timeout_s, s.retry_attempts,
                            max_wait_s=0.05, max_body_bytes=s.max_metrics_bytes) as client:
        yield Controller(s, c.profile, client, clock)


@pytest.mark.parametrize("hold_s", [0.0, 300.0])
async def test_a_restart_does_not_adopt_a_table_it_was_replacing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, hold_s: float) -> None:
    """Issue #39.4: killed while someone else's table was in force (before its reassert
    arrived), the sidecar restarted on its checkpoint treats that table as foreign, not as its
    baseline: reasserted at once with foreign_hold_s=0, after the hold otherwise."""
    caplog.set_level(logging.INFO, "sidecar")
    clock = Clock()
    path = tmp_path / "estimator.json"
    async with controller_for(FakeEngine(), tmp_path, checkpoint=path, clock=clock,
                              foreign_hold_s=hold_s) as (c, fake):
        assert (await rebuild_once(c, fake)).outcome == "pushed" and fake.table == TUNED
        saved = checkpoint.saved_table(path, c.profile_sha256)
        assert saved is not None and saved.table.to_list() == TUNED and saved.version == 2
        fake.operator_put(OPERATOR)  # v3; the sidecar dies before it reasserts
        async with restarted_sidecar(c, clock) as again:
            await again.tick()
            (event,) = events(caplog, "foreign_table")
            assert event.foreign_table["table"] == OPERATOR and event.foreign_table["ours"] == TUNED
            if hold_s == 0:
                assert fake.table == TUNED  # reasserted on the first tick
                return
            assert fake.table == OPERATOR and again.engine_table.holding()
            clock.now += hold_s
            await again.tick()
            fake.run(150)
            assert (await again.tick()).outcome == "pushed" and fake.table == TUNED


async def test_a_restart_after_the_engine_restarted_pushes_its_table_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    path = tmp_path / "estimator.json"
    async with controller_for(FakeEngine(), tmp_path, checkpoint=path) as (c, fake):
        await rebuild_once(c, fake)
        fake.restart()  # the engine's startup table, versions from 1 again
        assert fake.table != TUNED
        async with restarted_sidecar(c) as again:
            await again.tick()
            assert fake.table == TUNED and events(caplog, "foreign_table") == []


async def test_dry_run_reports_a_foreign_table_and_holds_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(), tmp_path, dry_run=True) as (c, fake):
        await c.tick()
        fake.operator_put(OPERATOR)
        await c.tick()
        (event,) = events(caplog, "foreign_table")
        assert "dry-run" in event.foreign_table["action"] and not c.engine_table.holding()
        assert state_of(c)["engine_table"] == OPERATOR


# --- --model-name is vLLM's served name (issue #15.6) -------------------------------------

DEMO = {"model": "tiny-llama-s0", "served_model_name": "tiny"}  # what the demo's profile holds


# a path: vLLM started with --model PATH and no --served-model-name serves the path as its name
@pytest.mark.parametrize("model_name", ["tiny", "tiny-llama-s0", "/models/cache/tiny-llama-s0"])
def test_model_name_matches_the_served_name_or_the_models_name(tmp_path: Path,
                                                               model_name: str) -> None:
    profile = load(write_profile(tmp_path / "p.json", **DEMO))
    assert profile_fit.mismatches(profile, None, None, model_name) == []
    (diff,) = profile_fit.mismatches(profile, None, None, "other")
    assert diff == "model: profile has 'tiny-llama-s0' (served as 'tiny'), --model-name is 'other'"


async def test_the_demo_profile_runs_with_model_name_tiny(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(), tmp_path, profile=DEMO, model_name="tiny") as (c, fake):
        assert (await rebuild_once(c, fake)).outcome == "pushed"


async def test_a_model_name_the_engine_does_not_serve_is_refused_at_start(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(), tmp_path, profile=DEMO,
                              model_name="tiny-llama-s0") as (c, fake):
        with pytest.raises(InvalidInput) as refused:
            await c.tick()
        assert str(refused.value) == ("--model-name 'tiny-llama-s0' but the engine serves 'tiny' "
                                      "(its /metrics label model_name); pass --model-name tiny")
        assert fake.metrics_gets == 0 and fake.policy_puts == []


# --- the counters from the plugin's own /v1/stats (issue #37 items 1, 3) ----------------------

async def test_with_the_plugins_counters_the_sidecar_never_reads_vllms_metrics(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Where /v1/stats carries the counters, a tick is one read of it: the same decision as
    from /metrics, vLLM's API server never asked; a restart is told by the plugin's start time."""
    caplog.set_level(logging.INFO, "sidecar")
    async with controller_for(FakeEngine(stats_counters_on=True), tmp_path) as (c, fake):
        decision = await rebuild_once(c, fake)
        assert decision is not None and decision.outcome == "pushed" and fake.table == TUNED
        assert decision.drafted == [600.0] * 3 and decision.accepted == [540.0, 480.0, 420.0]
        assert decision.source == "plugin" and c.observer.road == "plugin"
        fake.restart()
        fake.run(400)
        assert await c.tick() is None
        (restart,) = restarts(caplog)
        assert "start time changed" in restart.reason and fake.table == TUNED
        fake.admin_down = True  # the plugin's endpoint is the road now: down is a failed read
        fake.run(100)
        assert await c.tick() is None and c.conditions.states["scrape"] == "unavailable"
        assert fake.metrics_gets == 0


async def test_a_profile_whose_grid_stops_below_max_num_seqs_is_a_condition(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Above the grid's last B the profile's step times are held, not measured (the 3B EAGLE-3
    profile timed B <= 128 of 256, and k=3 cost 5-8x that past the graph limit): the sidecar
    says so at start, in its log and /v1/state's conditions."""
    async with controller_for(FakeEngine(max_num_seqs=32), tmp_path,
                              profile={"max_num_seqs": 32}) as (c, _):
        assert c.conditions.states["profile_grid"] == "short"
        assert "the grid ends at B=16 but the engine runs up to max_num_seqs=32" in caplog.text
    async with controller_for(FakeEngine(), tmp_path) as (c, _):
        assert "profile_grid" not in c.conditions.states


async def test_steps_under_tables_the_sidecar_did_not_see_run_are_not_learned_from(
        tmp_path: Path) -> None:
    """The field and do-no-harm benches freeze one sidecar between its runs while other arms
    run other tables, then put its table back: its first read after a thaw took in their steps
    (the H100's 3B run: its k=3 cells at B=256 grew by the tuned arm's ~27 steps at a time). A
    table version that moved past the one the sidecar knows skips that interval, counters and
    ring alike; an operator's write is the same case."""
    fake = FakeEngine()
    ms = {k: 10.0 + k for k in range(4)}
    rates = {k: 1000.0 * (1 + k) for k in range(4)}
    async with controller_for(fake, tmp_path, decide_by="measured",
                              rebuild_every_steps=100_000) as (c, fake):
        for _ in range(2):   # a baseline, then the ring from its newest step
            assert await c.tick() is None
        fake.serve(50, 12, rates, ms)
        assert await c.tick() is None
        cells, served = dict(c.belief.live_T.steps), dict(c.belief.goodput.served)
        assert cells and served == {16: 50}
        ours = [list(r) for r in fake.table]
        fake.operator_put([[1, 16, 0]])     # another arm's table, its steps, then ours again
        fake.serve(80, 12, rates, ms)
        fake.operator_put(ours)
        assert await c.tick() is None
        assert c.belief.live_T.steps == cells and c.belief.goodput.served == served
        assert c.belief.goodput.last_seq == len(fake.ring)
        assert c.engine_table.version == fake.version and c.stats.foreign_tables == 0  # the same table
        fake.serve(20, 12, rates, ms)          # under its own table again: learned
        assert await c.tick() is None
        assert c.belief.goodput.served == {16: 70} and c.belief.live_T.steps != cells
