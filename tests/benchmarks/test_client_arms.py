"""A sidecar arm (benchmarks/client_arms.py) against a stand-in for the sidecar's /v1/state and
/metrics, which a real sidecar cannot time on demand: the catch-up tick ends before the arm's
runs start; what the arm reports is what happened since the last reading."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from benchmarks.arm_run import SidecarSeen
from benchmarks.client_arms import Arms, Awake
from sidecar.counters import Stats
from sidecar.metrics import SidecarCollector
from sidecar.state import RecentDecision, SidecarState
from tuner.core.table import Table


class Sidecar:
    def __init__(self, port: int, cpu: tuple[float, ...] = (0.0,)) -> None:
        self.port, self.cpu = port, list(cpu)

    def cpu_s(self) -> float:
        """Its CPU seconds at each reading in turn (the last one after)."""
        return self.cpu.pop(0) if len(self.cpu) > 1 else self.cpu[0]


@asynccontextmanager
async def awake_beside(scrapes: list[float], tmp_path: Path) -> AsyncIterator[tuple[Awake, list[int]]]:
    """Arms whose sidecar's /v1/state says each of ``scrapes`` in turn (the last one after);
    the stand-in server is closed here, whatever the test does."""
    asked: list[int] = []

    async def state(_: web.Request) -> web.Response:
        asked.append(1)
        return web.json_response({"last_scrape_ok_at": scrapes[min(len(asked), len(scrapes)) - 1]})

    app = web.Application()
    app.router.add_get("/v1/state", state)
    async with TestServer(app) as server:
        # never entered: the catch-up wait opens and closes its own session
        yield Awake(Sidecar(server.port, (1.5, 1.75))), asked  # type: ignore[arg-type]


async def test_the_arm_waits_for_a_scrape_after_the_catch_up_tick(tmp_path: Path) -> None:
    woke = time.time()
    async with awake_beside([woke - 5, woke + 0.2, woke + 1.3], tmp_path) as (arms, asked):
        await arms.caught_up(woke, deadline=time.monotonic() + 60)
        assert len(asked) == 3  # returned at the third reading, long before the deadline


async def test_a_sidecar_that_never_scrapes_again_holds_the_arm_only_until_the_deadline(
        tmp_path: Path) -> None:
    woke = time.time()
    async with awake_beside([woke - 5], tmp_path) as (arms, asked):
        t0 = time.monotonic()
        await arms.caught_up(woke, deadline=time.monotonic() + 1.0)
        assert 0.9 < time.monotonic() - t0 < 60 and len(asked) >= 2


class CountersOnly:
    """The sidecar's own counter series (sidecar/metrics.py), from a Stats record."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        yield from SidecarCollector._counters(self.stats)


async def test_a_sidecar_arm_reports_what_happened_since_the_last_reading(tmp_path: Path) -> None:
    """The counts are differences of the sidecar's own series, the decisions those newer than
    the last reading and notable, all parsed with the sidecar's published models."""
    old = RecentDecision(time=100.0, outcome="pushed", new_table=[[1, 32, 3]], reason="start")
    quiet = RecentDecision(time=200.0, outcome="unchanged", new_table=[[1, 32, 3]], reason="same")
    new = RecentDecision(time=300.0, outcome="pushed", old_table=[[1, 32, 3]],
                         new_table=[[1, 8, 3], [9, 32, 2]], reason="measured")
    readings = [(SidecarState(recent_decisions=[old], traffic_changes=1, a_hat=[0.5]),
                 Stats(pushes=1, rebuilds=Counter(unchanged=4))),
                (SidecarState(recent_decisions=[old, quiet, new], traffic_changes=3, a_hat=[0.4],
                              engine_table=[[1, 8, 3], [9, 32, 2]]),
                 Stats(pushes=3, rebuilds=Counter(unchanged=6, pushed=2)))]
    asked: list[int] = []

    async def state(_: web.Request) -> web.Response:
        asked.append(1)
        return web.json_response(readings[min(len(asked), 2) - 1][0].model_dump(mode="json"))

    async def metrics(_: web.Request) -> web.Response:
        registry = CollectorRegistry()
        registry.register(CountersOnly(readings[min(len(asked), 2) - 1][1]))
        return web.Response(body=generate_latest(registry), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/v1/state", state)
    app.router.add_get("/metrics", metrics)
    async with TestServer(app) as server:
        arms = Awake(Sidecar(server.port, (1.5, 1.75)))  # type: ignore[arg-type]
        arms.seen = await arms.read(deadline=time.monotonic() + 30)
        arms.thawed_at = arms.seen.monotonic
        seen = await arms.observe()
    assert (seen.pushes, seen.traffic_changes, seen.rollbacks) == (2, 2, 0)
    assert seen.decisions == [new]  # not the old push, not the unchanged rebuild
    assert seen.cumulative["pushes"] == 3 and seen.rebuilds == {"unchanged": 6, "pushed": 2}
    assert seen.engine_table == [[1, 8, 3], [9, 32, 2]] and seen.a_hat == [0.4]
    assert seen.cpu_s == 0.25  # its CPU between the two readings
    assert SidecarSeen.model_validate_json(seen.model_dump_json()) == seen


def test_a_process_cpu_seconds_come_from_proc_and_none_for_no_process() -> None:
    import os

    from benchmarks.proc import cpu_seconds

    c0, t0 = cpu_seconds(os.getpid()), time.process_time()
    while time.process_time() - t0 < 0.2:  # CPU seconds, whatever else the box runs
        pass
    assert cpu_seconds(os.getpid()) - c0 >= 0.15  # /proc counts in ticks (10 ms)
    assert cpu_seconds(None) == 0.0
    beyond = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    assert cpu_seconds(beyond) == 0.0  # no such process: no /proc entry


class Admin:
    """The plugin's table, as much as a table arm reads and writes of it."""

    def __init__(self) -> None:
        self.table, self.puts = Table.from_list([[1, 32, 3]]), 0

    async def get_table(self) -> Any:
        return SimpleNamespace(parsed_table=lambda: self.table)

    async def put_table(self, table: Table) -> None:
        self.table, self.puts = table, self.puts + 1


class Asleep:
    """An Awake that records its freezes and thaws (a real one signals a process)."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log, self.is_thawed = name, log, False

    async def freeze(self) -> None:
        if self.is_thawed:
            self.log.append(f"freeze {self.name}")
        self.is_thawed = False

    async def thaw(self) -> None:
        self.log.append(f"thaw {self.name}")
        self.is_thawed = True


async def test_an_arm_thaws_only_its_own_sidecar_and_a_table_arm_freezes_every_one(
        tmp_path: Path) -> None:
    log: list[str] = []
    admin = Admin()
    # no client session: switching arms talks to the plugin's admin API only
    arms = Arms("http://127.0.0.1:1", admin, admin, {}, {"tuned": Table.from_list([[1, 32, 2]])},  # type: ignore[arg-type]
                tmp_path, "m", tmp_path, 0.0)
    arms.sidecars = {p: Asleep(p, log) for p in ("sidecar-from-tuned", "watch-from-tuned")}  # type: ignore[misc]
    assert await arms.enter("watch-from-tuned") is arms.sidecars["watch-from-tuned"]
    await arms.enter("sidecar-from-tuned")
    assert log == ["thaw watch-from-tuned", "freeze watch-from-tuned", "thaw sidecar-from-tuned"]
    assert await arms.enter("tuned") is None and log[-1] == "freeze sidecar-from-tuned"
    assert admin.table == Table.from_list([[1, 32, 2]]) and admin.puts == 1
    await arms.enter("tuned")
    assert admin.puts == 1 and len(log) == 4  # the engine ran it already; nobody was awake
