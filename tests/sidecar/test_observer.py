"""Reading the plugin's step ring (sidecar/observer.py): where the first read starts, a new
engine run, and a ring that cannot be read."""

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
    ring.steps.append(Step(51, 4, 3, 3, 0.01, 4, 8, 0.011))
    later = await o.ring(last_seq=50)
    assert later is not None and later.restart_since is None and [s.seq for s in later.steps] == [51]
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
