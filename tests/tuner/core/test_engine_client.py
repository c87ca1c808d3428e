"""The one client of vLLM and the plugin: replies are read whole, however they arrive."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from tuner.core.engine_client import EngineClient, ReplyTooLarge


async def serve_ring(steps: int) -> tuple[web.AppRunner, str]:
    body = json.dumps({"recent_steps": [[i, 128, 3, 3, 0.08, 512, 300, 0.085]
                                        for i in range(1, steps + 1)]}).encode()

    async def stats(request: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse()
        await reply.prepare(request)
        for i in range(0, len(body), 4096):  # in pieces, as a busy server sends a large reply
            await reply.write(body[i:i + 4096])
        await reply.write_eof()
        return reply
    app = web.Application()
    app.router.add_get("/v1/stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_a_large_reply_is_read_to_its_end() -> None:
    """The plugin's whole step ring is ~0.5 MB; one read() returned ~128 kB of it."""
    runner, url = await serve_ring(8192)
    try:
        async with EngineClient(admin_url=url) as client:
            stats = await client.get_stats(since=0)
        assert len(stats.recent_steps) == 8192 and stats.recent_steps[-1][0] == 8192
        async with EngineClient(admin_url=url, max_body_bytes=100_000) as client:
            with pytest.raises(ReplyTooLarge):
                await client.get_stats(since=0)
    finally:
        await runner.cleanup()
