"""The stationary load against a tiny real aiohttp app standing in for vLLM's completions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from tuner.load import Request, StationaryLoad


@dataclass
class Fake:
    in_flight: int = 0
    peak: int = 0
    asked: list[int] = field(default_factory=list)
    fail_after: int | None = None


@asynccontextmanager
async def fake_vllm(fake: Fake) -> AsyncIterator[str]:
    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        fake.asked.append(body["max_tokens"])
        if fake.fail_after is not None and len(fake.asked) > fake.fail_after:
            return web.json_response({"error": "boom"}, status=500)
        fake.in_flight += 1
        fake.peak = max(fake.peak, fake.in_flight)
        try:
            await asyncio.sleep(body["max_tokens"] * 0.001)  # 1 ms a token
        finally:
            fake.in_flight -= 1
        return web.json_response({"usage": {"completion_tokens": body["max_tokens"]}})

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=f"vllm:num_requests_running {fake.in_flight}\n")

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_clients_stay_in_flight_with_staggered_first_requests() -> None:
    fake = Fake()
    pool = [Request([1, 2, 3], 40), Request([4, 5], 60)]
    async with fake_vllm(fake) as url:
        async with StationaryLoad(url, pool, 6, seed=1) as load:
            deadline = asyncio.get_running_loop().time() + 30.0  # catches a hang, times nothing
            while len(load.completions) < 20:
                assert asyncio.get_running_loop().time() < deadline, load.completions
                await asyncio.sleep(0.05)
            load.check()
            done, tokens = load.completed_between(0.0, float("inf"))
        assert fake.in_flight == 0  # stopped: every client cancelled
    # six clients, all in flight together, never more (a replaced request is sent at once)
    assert fake.peak == 6
    first, later = fake.asked[:6], fake.asked[6:]
    assert len(set(first)) > 1 and all(1 <= n <= 60 for n in first)  # residual lives, spread
    assert set(later) <= {40, 60} and done >= 20 and tokens >= 20 * 40


async def test_a_failed_request_is_raised_by_check() -> None:
    fake = Fake(fail_after=3)
    async with fake_vllm(fake) as url:
        async with StationaryLoad(url, [Request([1], 5)], 2) as load:
            await asyncio.sleep(0.2)
            with pytest.raises(RuntimeError, match=r"load N=2: a client failed: completion failed \(500\)"):
                load.check()


def test_a_load_needs_clients_and_requests() -> None:
    with pytest.raises(ValueError, match="concurrency=0"):
        StationaryLoad("http://x", [Request([1], 5)], 0)
    with pytest.raises(ValueError, match="requests: empty"):
        StationaryLoad("http://x", [], 1)


def test_clients_start_as_a_stationary_load_holds_them() -> None:
    import random

    from tuner.load import in_flight

    pool = [Request("short", 10), Request("long", 90)]
    held = in_flight(pool, 2000, random.Random(0))
    share_long = sum(r.prompt == "long" for r in held) / len(held)
    assert 0.87 < share_long < 0.93  # in proportion to length: 90 / (10 + 90)
    assert all(1 <= r.max_tokens <= (90 if r.prompt == "long" else 10) for r in held)


async def test_each_load_starts_its_cycle_at_a_random_place() -> None:
    fake = Fake()
    pool = [Request([i], 5 + i) for i in range(50)]
    firsts = []
    async with fake_vllm(fake) as url:
        for seed in (1, 2, 3):
            fake.asked.clear()
            async with StationaryLoad(url, pool, 1, seed=seed) as load:
                while len(fake.asked) < 3:
                    await asyncio.sleep(0.01)
                load.check()
            firsts.append(fake.asked[1])  # the first full request after the residual one
    assert len(set(firsts)) == 3
