"""Reading the engine (sidecar/observer.py): the plugin's step ring (where the first read starts, a
new engine run, a ring that cannot be read) and which road the counters take."""

from __future__ import annotations

import logging
from typing import Any

from sidecar.counters import Stats
from sidecar.logs import Conditions
from sidecar.observer import Observer
from tuner.core.admin_api import StatsReply, Step
from tuner.core.errors import EngineUnavailable


class Ring:
    """A plugin's /v1/stats: steps 1..n of one engine run, or down."""

    def __init__(self, n: int, started_at: float = 1.0) -> None:
        self.steps = [Step(s, 4, 3, 3, 0.01, 4, 8, 0.011) for s in range(1, n + 1)]
        self.started_at, self.down = started_at, False
        self.asked: list[int | None] = []

    async def get_stats(self, since: int | None = None) -> StatsReply:
        self.asked.append(since)
        if self.down:
            raise EngineUnavailable("GET /v1/stats: connection refused")
        n = len(self.steps)
        return StatsReply(started_at=self.started_at, engine_steps_per_k={3: n},
                          recent_steps=[s for s in self.steps if since is None or s.seq > since])


def observer(ring: Ring) -> Observer:
    client: Any = ring
    return Observer(client, None, None, 1.0, Conditions(logging.getLogger("test")),  # type: ignore[arg-type]
                    Stats(), lambda: 0.0)


async def test_the_first_read_starts_at_the_newest_step_and_a_new_run_from_zero() -> None:
    ring = Ring(50)
    o = observer(ring)
    first = await o.ring(last_seq=0)
    assert first is not None and first.restart_since == 50 and first.steps == []
    assert (await o.ring(last_seq=0)) == first  # not taken yet: read again from the newest
    o.took(first)
    ring.steps.append(Step(51, 4, 3, 3, 0.01, 4, 8, 0.011))
    later = await o.ring(last_seq=50)
    assert later is not None and later.restart_since is None and [s.seq for s in later.steps] == [51]
    o.took(later)
    ring.steps, ring.started_at = ring.steps[:5], 2.0   # the engine restarted: seqs from 1 again
    again = await o.ring(last_seq=51)
    assert again is not None and again.restart_since == 0 and len(again.steps) == 5


async def test_an_unreadable_ring_says_so_and_keeps_its_place() -> None:
    ring = Ring(10)
    o = observer(ring)
    ring.down = True
    assert await o.ring(last_seq=0) is None
    assert o.conditions.states["ring"] == "unreadable" and o.ring_started_at is None
    ring.down = False
    back = await o.ring(last_seq=0)
    assert back is not None and back.restart_since == 10 and o.conditions.states["ring"] == "ok"


class Plugin(Ring):
    """A plugin whose /v1/stats carries its counters; vLLM's /metrics must not be read."""

    def __init__(self, n: int, counters: bool = True) -> None:
        super().__init__(n)
        self.counters, self.metrics_gets = counters, 0

    async def get_stats(self, since: int | None = None) -> StatsReply:
        reply = await super().get_stats(since)
        if not self.counters:
            return reply
        n = len(self.steps)
        return reply.model_copy(update={
            "num_speculative_tokens": 3, "drafted_per_pos": [4 * n] * 3,
            "accepted_per_pos": [3 * n, 2 * n, n], "request_steps_per_k": {3: 4 * n}})

    async def get_metrics(self) -> str:
        self.metrics_gets += 1
        raise EngineUnavailable("GET /metrics: connection refused")


def plugin_observer(plugin: Plugin) -> Observer:
    client: Any = plugin
    profile: Any = type("P", (), {"K": 3})()
    o = Observer(client, profile, None, 1.0, Conditions(logging.getLogger("test")), Stats(),
                 lambda: 0.0)
    return o


async def test_with_the_plugins_counters_one_stats_read_a_tick_brings_counters_and_ring(
        monkeypatch: Any) -> None:
    monkeypatch.setattr("sidecar.observer.profile_fit.check", lambda *a: None)
    plugin = Plugin(50)
    o = plugin_observer(plugin)
    first = await o.read(admin=True, ring_since=0)
    assert first is not None and o.road == "plugin" and plugin.metrics_gets == 0
    assert first.snapshot.accepted_per_pos == (150.0, 100.0, 50.0)
    assert first.snapshot.stats_age_s == 0.0 and first.snapshot.accepted_source == "plugin"
    assert first.ring is not None and first.ring.restart_since == 50 and first.ring.steps == []
    o.took(first.ring)
    plugin.steps.append(Step(51, 4, 3, 3, 0.01, 4, 8, 0.011))
    asked = len(plugin.asked)
    later = await o.read(admin=True, ring_since=50)
    assert later is not None and later.ring is not None and len(plugin.asked) == asked + 1
    assert [s.seq for s in later.ring.steps] == [51] and later.snapshot.drafted_per_pos == (204.0,) * 3
    plugin.steps, plugin.started_at = plugin.steps[:3], 2.0  # a new engine run: seqs from 1
    restarted = await o.read(admin=True, ring_since=51)
    assert restarted is not None and restarted.ring is not None
    assert restarted.ring.restart_since == 0 and len(restarted.ring.steps) == 3
    again = await o.read(admin=True, ring_since=51)  # not taken (the tick ended early): again
    assert again is not None and again.ring is not None and again.ring.restart_since == 0
    plugin.down = True  # the plugin's endpoint is the road: its failure is a failed read
    assert await o.read(admin=True, ring_since=51) is None
    assert o.conditions.states["scrape"] == "unavailable" and plugin.metrics_gets == 0


async def test_a_plugin_without_counters_on_its_stats_leaves_them_to_metrics() -> None:
    plugin = Plugin(5, counters=False)
    o = plugin_observer(plugin)
    assert await o.read(admin=True, ring_since=0) is None  # /metrics is down in this stand-in
    assert o.road == "metrics" and plugin.metrics_gets == 1
    assert await Observer(plugin, None, None, 1.0, Conditions(logging.getLogger("t")),  # type: ignore[arg-type]
                          Stats(), lambda: 0.0).read(admin=False, ring_since=None) is None
    assert plugin.metrics_gets == 2
