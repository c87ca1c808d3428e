"""CellTimer.wait_batch against a fake plugin: the CPU engine always fills a small batch, so the
case the H200 showed (a batch that never reaches B) is played by scripted /v1/stats answers."""

from __future__ import annotations

import asyncio
from typing import Any

from tuner.core.admin_api import StatsReply
from tuner.sweep import CellTimer


class ScriptedTimer(CellTimer):
    """Each /v1/stats answer is 4 steps later; `batch(step)` says how many requests each ran."""

    def __init__(self, batch: Any) -> None:
        super().__init__(server=None, admin_url="", prompts=lambda n, seed: [],  # type: ignore[arg-type]
                         model_name="tiny")
        self.batch, self.steps, self.requests, self.polls = batch, 0, 0.0, 0

    async def stats(self) -> StatsReply:
        self.polls += 1
        for _ in range(4):
            self.steps += 1
            self.requests += self.batch(self.steps)
        return StatsReply(step_times=[(1, 0, self.steps * 0.01, self.steps)], histogram=[],
                          engine_steps_per_k={0: self.steps},
                          scheduled_requests=int(self.requests), scheduled_tokens=int(self.requests))


def test_the_window_opens_once_the_batch_is_there() -> None:
    timer = ScriptedTimer(lambda step: min(step, 32))  # admitted one a step: full from step 32
    stats = asyncio.run(timer.wait_batch(32, 0, []))
    # the first stretch running >= 0.8 * 32 requests a step ends at step 28 (its steps: 25..28)
    assert stats.engine_steps_per_k[0] == 28


def test_a_batch_that_stops_growing_ends_the_wait_without_the_timeout() -> None:
    timer = ScriptedTimer(lambda step: min(step, 12))  # stuck at 12 of 32 from step 12 on
    stats = asyncio.run(timer.wait_batch(32, 0, [], timeout_s=3600, patience=5))
    # 8 warm-up steps, growth to 12 by the stretch ending at step 16, then five flat stretches
    assert stats.engine_steps_per_k[0] == 16 + 5 * 4
