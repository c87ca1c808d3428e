"""A thawed sidecar's catch-up tick ends before its arm's runs start (benchmarks/client_arms.py):
against a stand-in for the sidecar's /v1/state, which a real engine cannot time on demand."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestServer

from benchmarks.client_arms import Arms
from tuner.core.engine_client import EngineClient


class Sidecar:
    def __init__(self, port: int) -> None:
        self.port = port


@asynccontextmanager
async def arms_beside(scrapes: list[float], tmp_path: Path) -> AsyncIterator[tuple[Arms, list[int]]]:
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
        client = EngineClient(engine_url="http://127.0.0.1:1")
        yield Arms("http://127.0.0.1:1", client, client, Sidecar(server.port),  # type: ignore[arg-type]
                   {}, tmp_path, "m", tmp_path, 0.0), asked


async def test_the_arm_waits_for_a_scrape_after_the_catch_up_tick(tmp_path: Path) -> None:
    woke = time.time()
    async with arms_beside([woke - 5, woke + 0.2, woke + 1.3], tmp_path) as (arms, asked):
        await arms._caught_up(woke, deadline=time.monotonic() + 60)
        assert len(asked) == 3  # returned at the third reading, long before the deadline


async def test_a_sidecar_that_never_scrapes_again_holds_the_arm_only_until_the_deadline(
        tmp_path: Path) -> None:
    woke = time.time()
    async with arms_beside([woke - 5], tmp_path) as (arms, asked):
        t0 = time.monotonic()
        await arms._caught_up(woke, deadline=time.monotonic() + 1.0)
        assert 0.9 < time.monotonic() - t0 < 60 and len(asked) >= 2
