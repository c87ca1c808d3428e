"""The plugin's step clock between two /v1/stats snapshots, and the staggered first requests."""

from __future__ import annotations

import pytest

from tuner.core.admin_api import StatsReply
from tuner.load import first_lengths
from tuner.step_clock import step_load


def stats(steps: dict[int, int], timed: list[tuple[int, int, float, int]], requests: int | None,
          tokens: int | None) -> StatsReply:
    return StatsReply(engine_steps_per_k=steps, step_times=timed, histogram=[],
                      scheduled_requests=requests, scheduled_tokens=tokens)


def test_step_load_from_two_plugin_snapshots() -> None:
    before = stats({1: 10}, [(256, 1, 0.10, 10)], 2560, 5120)
    after = stats({1: 30, 3: 10}, [(256, 1, 0.50, 30), (256, 3, 0.40, 10)], 12800, 30000)
    load = step_load(before, after)
    assert load is not None and load.steps == 30
    assert load.step_ms == pytest.approx(800 / 30)            # (0.9 - 0.1) s over 30 timed steps
    assert load.requests_per_step == pytest.approx(10240 / 30)
    assert load.tokens_per_step == pytest.approx(24880 / 30)
    assert step_load(before, before) is None                  # no step ran
    old = stats({1: 10}, [(256, 1, 0.10, 10)], None, None)     # a plugin before the totals
    assert step_load(old, after) is None


def test_stats_reply_parses_the_plugins_json() -> None:
    raw = ('{"engine_steps_per_k": {"0": 3, "3": 5}, "step_times": [[4, 3, 0.5, 5]], '
           '"histogram": [[3, 2, 7]], "scheduled_requests": 9, "scheduled_tokens": 30, '
           '"a_field_from_a_newer_plugin": 1}')
    s = StatsReply.model_validate_json(raw)
    assert s.engine_steps == 8 and s.engine_steps_per_k[3] == 5
    assert s.step_times == [(4, 3, 0.5, 5)] and s.histogram == [(3, 2, 7)]


def test_first_requests_are_staggered_over_one_lifetime() -> None:
    assert first_lengths(1, 128) == [128]
    lengths = first_lengths(4, 128)
    assert lengths == [32, 64, 96, 128]  # evenly spread, the last one full length
    assert min(first_lengths(256, 128)) == 1 and max(first_lengths(256, 128)) == 128


async def test_an_oversized_metrics_body_is_unreadable_not_an_engine_down() -> None:
    from aiohttp import web

    from tuner.core.engine_client import EngineClient
    from tuner.core.errors import EngineUnavailable, ScrapeError

    async def big(request: web.Request) -> web.Response:
        return web.Response(text="x" * 5000)

    app = web.Application()
    app.router.add_get("/metrics", big)
    app.router.add_get("/v1/stats", big)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with EngineClient(url, url, max_body_bytes=1000, attempts=1) as client:
            with pytest.raises(ScrapeError, match="exceeds 1000"):
                await client.get_metrics()
            with pytest.raises(EngineUnavailable, match="exceeds 1000"):
                await client.get_stats()
    finally:
        await runner.cleanup()
