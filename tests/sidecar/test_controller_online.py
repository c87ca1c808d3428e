"""The controller's online loop against the fake engine: a change of traffic rebuilds at once,
a push that makes live goodput drop is rolled back and held out (tests/sidecar/fake_engine.py).
The same on the real engine: tests/sidecar/test_online_engine.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.sidecar.fake_engine import STARTUP, TUNED, FakeEngine
from tests.sidecar.test_controller import controller_for
from tuner.core.table import Table


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


# the change test's windows in these tests: 2 scrapes each, and 4 windows of reference before
# them (sidecar/acceptance_change.py), so a switch shows 3-4 scrapes after ~8 steady ones
WINDOWS = {"change_window": 2, "change_window_s": 0.0}


async def test_a_change_of_acceptance_rebuilds_at_once_from_the_recent_counts(tmp_path: Path) -> None:
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100_000,
                              guard_window=0, **WINDOWS) as (c, fake):
        assert await c.tick() is None
        for _ in range(10):  # steady high acceptance: no change, no rebuild
            fake.run(100, a=(0.9, 0.8, 0.7))
            clock.now += 1
            assert await c.tick() is None
        decision, ticks = None, 0
        while decision is None and ticks < 6:  # the traffic switches to low acceptance
            fake.run(100, a=(0.2, 0.1, 0.05))
            clock.now += 1
            ticks += 1
            decision = await c.tick()
        assert decision is not None and decision.trigger == "change", decision
        assert 3 <= ticks <= 4  # both windows, the older one may straddle the switch
        assert c.stats.changes == 1 and decision.prior_weight <= 50
        assert decision.a_hat[0] < 0.35  # the estimate follows the new traffic at once
        assert c.belief.acceptance.prior[0] < 0.35    # ... and so does the prior: the old one is stale
        # then only a few drafts a rebuild (the table drafts little, exploration a few): live
        # counts halve at every rebuild, yet the estimate must not drift back to 0.9
        c.settings = c.settings.model_copy(update={"rebuild_every_steps": 100})
        for _ in range(12):
            fake.run(100, a=(0.2, 0.1, 0.05), k=0)
            fake.run(1, a=(0.2, 0.1, 0.05))
            clock.now += 1
            await c.tick()
        assert c.belief.acceptance.w <= 50 and float(c.belief.acceptance.drafted[0]) < 200
        assert c.last_decision is not None and c.last_decision.a_hat[0] < 0.35


async def test_a_dip_that_goes_back_within_a_window_is_no_change(tmp_path: Path) -> None:
    """A burst of fresh requests whose first drafts miss: one scrape low, then back (issue 34.1)."""
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100_000,
                              guard_window=0, **WINDOWS) as (c, fake):
        await c.tick()
        for i in range(40):
            fake.run(100, a=(0.1, 0.05, 0.0) if i % 10 == 9 else (0.9, 0.8, 0.7))
            clock.now += 1
            assert await c.tick() is None
        assert c.stats.changes == 0


async def test_a_push_starts_the_change_tests_reference_again(tmp_path: Path) -> None:
    """A push moves which steps of a request's life propose (under bursts B follows request
    age), so acceptance read over them may sit elsewhere with the traffic unchanged (a CPU run
    from k=0 read a change 100 s after its push: cpu-tiny-noharm/earn-from-k0). The reference
    starts again from the push: a level the test above calls a change within 4 scrapes is,
    right after a push, the new reference."""
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100_000,
                              guard_window=0, **WINDOWS) as (c, fake):
        assert await c.tick() is None
        for _ in range(10):
            fake.run(100, a=(0.9, 0.8, 0.7))
            clock.now += 1
            assert await c.tick() is None
        assert (await c.rebuild()).outcome == "pushed" and fake.table == TUNED
        for _ in range(16):
            fake.run(100, a=(0.5, 0.3, 0.1))
            clock.now += 1
            assert await c.tick() is None
        assert c.stats.changes == 0
        decision, ticks = None, 0
        while decision is None and ticks < 6:  # a change after the push is still found
            fake.run(100, a=(0.1, 0.05, 0.0))
            clock.now += 1
            ticks += 1
            decision = await c.tick()
        assert decision is not None and decision.trigger == "change", decision


async def test_a_push_that_drops_live_goodput_is_rolled_back_and_held_out(tmp_path: Path) -> None:
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100_000,
                              guard_window=3, guard_hold_s=600, guard_min_steps=50,
                              change_window=50) as (c, fake):
        assert await c.tick() is None
        for steps in (100, 102, 98, 101):  # ~100 steps a second at B=4 before the push
            fake.run(steps)
            clock.now += 1
            assert await c.tick() is None
        # each scrape fills a sample of >= 50 steps; its goodput is tokens over its seconds
        baseline = c.watch.guard.baseline
        assert [(s.steps, s.seconds) for s in baseline] == [(100, 1), (102, 1), (98, 1), (101, 1)]
        pushed = await c.rebuild()
        assert pushed.outcome == "pushed" and fake.table == TUNED
        decision = None
        for steps in (60, 50, 51, 49, 50):  # after it: half the goodput (49 + 50: one sample)
            fake.run(steps)
            clock.now += 1
            decision = decision or await c.tick()
        assert decision is not None and decision.outcome == "rolled_back", decision
        assert decision.trigger == "rollback" and "guardrail" in decision.reason
        assert fake.table == STARTUP and c.stats.rollbacks == 1
        # the next rebuild would choose the same table: held out, the engine keeps STARTUP
        again = await c.rebuild()
        assert again.outcome == "unchanged" and "held out" in again.reason and fake.table == STARTUP


async def test_a_rollback_ends_the_duels_where_it_changed_the_k(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A duel at a bucket the rollback changed duels the old incumbent (here k=1 at B 5-8,
    planned against the pushed table's k=3, is the k the rollback puts back): it ends at once,
    and the duels elsewhere run on (the next rebuild plans from what is served again)."""
    import dataclasses

    import sidecar.controller as controller_module
    real_choose = controller_module.choose
    plan = ((5, 8, (1,)), (9, 16, (2,)))

    def choose(*args: Any) -> Any:  # after the push: a duel at B 5-8 and one at B 9-16
        old = args[3]
        duels = plan if old is not None and old.k_at(6, 3) == 3 else ()
        return dataclasses.replace(real_choose(*args), duels=duels)

    monkeypatch.setattr(controller_module, "choose", choose)
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100_000,
                              guard_window=3, guard_hold_s=600, guard_min_steps=50,
                              change_window=50) as (c, fake):
        assert await c.tick() is None
        for steps in (100, 102, 98, 101):
            fake.run(steps)
            clock.now += 1
            await c.tick()
        assert (await c.rebuild()).outcome == "pushed" and fake.table == TUNED
        assert (await c.rebuild()).outcome == "unchanged"  # plans both duels on TUNED
        assert fake.policy["duels"] == [[5, 8, [1]], [9, 16, [2]]]
        decision = None
        for steps in (60, 50, 51, 49, 50):
            fake.run(steps)
            clock.now += 1
            decision = decision or await c.tick()
        assert decision is not None and decision.outcome == "rolled_back", decision
        assert fake.table == STARTUP
        assert fake.policy["duels"] == [[9, 16, [2]]]
        assert c.engine_table.duels == ((9, 16, (2,)),)


async def test_acceptance_that_drops_after_k0_stretches_is_a_condition(tmp_path: Path) -> None:
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100_000,
                              guard_window=0) as (c, fake):
        assert await c.tick() is None
        for _ in range(3):  # steady drafting at 0.9, and right after K=0 stretches at 0.5
            fake.run(100, a=(0.9, 0.8, 0.7))
            fake.run(20, a=(0.5, 0.3, 0.1), resume=True)
            clock.now += 1
            await c.tick()
        assert c.conditions.states["resume"] == "low"
        details = c.conditions.details["resume"]
        assert "--min-k 1" in details["message"]


async def test_min_k_is_a_floor_on_every_table(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(), tmp_path, min_k=2, allowed_k="all") as (c, fake):
        assert await c.tick() is None
        fake.run(150, a=(0.1, 0.01, 0.0))  # low acceptance: without the floor, k=0 or 1
        clock_free = await c.rebuild()
        assert all(k >= 2 for _, _, k in clock_free.new_table), clock_free.new_table
        assert c.allowed_k == {2, 3}


async def test_a_change_of_traffic_is_never_judged_as_the_tables_fault(tmp_path: Path) -> None:
    """Goodput falls when acceptance falls, whatever the table: a push made right after a
    switch of traffic is not rolled back for it, and no hold outlives the switch."""
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100_000,
                              guard_window=3, guard_min_steps=50, **WINDOWS) as (c, fake):
        assert await c.tick() is None
        for steps in (100, 102, 98, 101, 99, 100, 101, 99, 100, 102):  # high: the baseline
            fake.run(steps, a=(0.9, 0.8, 0.7))
            clock.now += 1
            await c.tick()
        assert len(c.watch.guard.baseline) == 10  # up to window · (1 + extend) = 12 kept
        c.watch.guard.held[tuple(Table.from_list([[1, 16, 0]]).ranges)] = clock.now + 600
        decisions = []
        for steps in (100, 99, 101, 100, 100, 98, 100):  # low acceptance: fewer tokens a step
            fake.run(steps, a=(0.1, 0.05, 0.0))
            clock.now += 1
            if (d := await c.tick()) is not None:
                decisions.append(d)
        assert any(d.trigger == "change" for d in decisions), decisions
        assert not any(d.outcome == "rolled_back" for d in decisions), decisions
        assert c.stats.rollbacks == 0 and not c.watch.guard.held


async def test_min_k_above_every_allowed_k_is_refused_at_connect(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.sidecar import fake_engine
    from tuner.core.errors import ProfileMismatch

    async with controller_for(FakeEngine(), tmp_path, min_k=2) as (c, _):
        await c.tick()
        assert c.allowed_k == {3}  # the startup table's k are 1 and 3
    # a startup table of k = 0 and 1 leaves nothing at --min-k 2: refused, not a tick error
    monkeypatch.setattr(fake_engine, "STARTUP", [[1, 8, 1], [9, 16, 0]])
    async with controller_for(FakeEngine(), tmp_path, min_k=2) as (c, _):
        with pytest.raises(ProfileMismatch, match="--min-k=2 leaves no k"):
            await c.tick()


async def test_someone_elses_table_ends_the_guardrails_trial(tmp_path: Path) -> None:
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100_000,
                              guard_window=3, foreign_hold_s=60) as (c, fake):
        assert await c.tick() is None
        for steps in (100, 102, 98, 101):
            fake.run(steps)
            clock.now += 1
            await c.tick()
        assert (await c.rebuild()).outcome == "pushed" and c.watch.guard.trial is not None
        fake.operator_put([[1, 16, 0]])  # an operator's PUT /v1/table
        fake.run(50)
        clock.now += 1
        await c.tick()
        assert c.watch.guard.trial is None and c.stats.foreign_tables == 1


async def test_a_change_seen_mid_switch_settles_the_prior_on_the_new_traffic(tmp_path: Path) -> None:
    """A switch inside one scrape: the estimate restarts from the newer window alone (the older
    may straddle it), and the prior stays on the new traffic as the counts halve (the CPU
    switch bench once took a prior of 0.40 from a mixed window, then pushed k=3 at ~0.1)."""
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100,
                              guard_window=0, **WINDOWS) as (c, fake):
        await c.tick()
        for _ in range(10):
            fake.run(100, a=(0.9, 0.8, 0.7))
            clock.now += 1
            await c.tick()
        fake.run(60, a=(0.9, 0.8, 0.7))       # the switch, inside one scrape
        fake.run(40, a=(0.1, 0.05, 0.02))
        clock.now += 1
        await c.tick()
        for _ in range(4):                    # the new traffic
            fake.run(100, a=(0.1, 0.05, 0.02))
            clock.now += 1
            await c.tick()
        assert c.stats.changes == 1 and c.belief.acceptance.prior[0] < 0.2
        for _ in range(10):                   # then few drafts a rebuild
            fake.run(100, a=(0.1, 0.05, 0.02), k=0)
            fake.run(1, a=(0.1, 0.05, 0.02))
            clock.now += 1
            await c.tick()
        assert c.last_decision is not None and c.last_decision.a_hat[0] < 0.2


async def test_a_rebase_gives_an_undrafted_position_the_one_before_it(tmp_path: Path) -> None:
    """The table drafts 2 (position 3 never drafted) when acceptance jumps: the rebased prior
    of position 3 is position 2's, not the profile's stale value, and its first drafts (a duel
    at k=3) are not called a change."""
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100_000,
                              guard_window=0, profile={"a": (0.6, 0.33, 0.19)}, **WINDOWS) as (c, fake):
        assert await c.tick() is None
        for _ in range(10):
            fake.run(100, a=(0.6, 0.33, 0.19), k=2)
            clock.now += 1
            assert await c.tick() is None
        decision = None
        for _ in range(4):
            fake.run(100, a=(0.95, 0.93, 0.9), k=2)
            clock.now += 1
            decision = decision or await c.tick()
        assert decision is not None and decision.trigger == "change"
        assert c.belief.acceptance.prior[2] == c.belief.acceptance.prior[1] > 0.85
        changes = c.stats.changes
        for _ in range(6):  # now k=3 drafts position 3 at 0.9: a first measurement
            fake.run(100, a=(0.95, 0.93, 0.9), k=3)
            clock.now += 1
            await c.tick()
        assert c.stats.changes == changes


async def test_a_step_time_transient_is_one_change_and_its_cell_gets_its_level_back(
        tmp_path: Path) -> None:
    """Steps 2x slower for 40 s, then back (2-s scrapes): one traffic change, whose cell keeps
    the slow level while it lasts, then taken back to the older level, with no second change
    (the stationary CPU run: a transient found going and again coming back)."""
    clock = Clock()
    async with controller_for(FakeEngine(), tmp_path, clock=clock, rebuild_every_steps=100_000,
                              guard_window=0, interval_s=2.0) as (c, fake):
        assert await c.tick() is None
        seen = []
        for i in range(120):  # 80 s at 20 ms a step, 40 s at 40 ms, 120 s at 20 ms
            slow = 40 <= i < 60
            fake.run(50 if slow else 100, step_ms=40.0 if slow else 20.0)
            clock.now += 2
            await c.tick()
            seen.append(c.belief.live_T.live_ms((4, 3)))
        assert c.stats.changes == 1, c.stats.changes
        assert max(x or 0.0 for x in seen[40:80]) > 35.0   # the change: the slow level kept
        assert seen[-1] is not None and abs(seen[-1] - 20.0) < 0.5  # taken back, not mixed
