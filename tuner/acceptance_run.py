"""Measure a_i on a running engine: the largest K on sample prompts at the serving temperature.

a_i = P(first i drafts all accepted | the request-step was offered K >= i), from counter deltas.
With the plugin, offered request-steps include empty drafts (ngram no-match) as not accepted.
Without it, vLLM's stock accepted_i / num_drafts is used, and the profile says it is biased.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import numpy as np

from sidecar.scrape import parse
from tuner.acceptance import per_position, stock_estimate
from tuner.errors import EngineUnavailable
from tuner.launcher import VllmServer
from tuner.profile import AcceptanceMeasurement
from tuner.prompts import Prompt
from tuner.replay import Replay
from tuner.serve import admin_stats, complete, fresh_connections

STOCK_NOTE = ("vLLM's stock accepted_i / num_drafts: biased low when draft lengths vary (ngram "
              "no-match, DSD), because num_drafts counts drafts that never had position i")


async def _metrics(s: aiohttp.ClientSession, url: str) -> str:
    async with s.get(url + "/metrics") as r:
        return await r.text()


async def measure_acceptance(server: VllmServer, admin_url: str | None, prompts: list[Prompt],
                             K: int, temperature: float, max_tokens: int,
                             concurrency: int,
                             replay: Replay | None = None,
                             restore_reject_all: bool = False) -> AcceptanceMeasurement:
    """a_i over `prompts` on a running server. With the plugin (admin_url), reject-all is lifted
    for the run (409 = emulation off at startup: there is nothing to lift) and, with
    restore_reject_all, put back after it, for a server that goes on timing cells."""
    t0 = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600),
                                     connector=fresh_connections()) as s:
        if admin_url:  # lift the timing mode's reject-all: real (or replayed) acceptance from here
            body = {"rates": list(replay.emulator_rates()) if replay else [1.0] * K}
            async with s.put(admin_url + "/v1/emulation", json=body) as r:
                await r.read()
        stats0 = await admin_stats(s, admin_url) if admin_url else None
        m0 = parse(await _metrics(s, server.url))
        gate = asyncio.Semaphore(concurrency)

        async def one(p: Prompt) -> None:
            async with gate:
                await complete(s, server.url, p, max_tokens, temperature)

        await asyncio.gather(*[one(p) for p in prompts])
        await asyncio.sleep(0.5)  # let vLLM's stat loggers catch up
        stats1 = await admin_stats(s, admin_url) if admin_url else None
        m1 = parse(await _metrics(s, server.url))
        if admin_url and restore_reject_all:
            async with s.put(admin_url + "/v1/emulation", json={"rates": [0.0] * K}) as r:
                if r.status != 200:
                    raise EngineUnavailable(f"could not restore reject-all after measuring "
                                            f"acceptance ({r.status}): {await r.text()}")
    wall = time.monotonic() - t0
    if stats0 is not None and stats1 is not None:
        drafted = [b - a for a, b in zip(stats0["drafted_per_pos"], stats1["drafted_per_pos"])]
        accepted = [b - a for a, b in zip(stats0["accepted_per_pos"], stats1["accepted_per_pos"])]
        a = np.nan_to_num(per_position(accepted, drafted), nan=0.0)
        return AcceptanceMeasurement(a=[float(x) for x in a], accepted=accepted, drafted=drafted,
                                     source="plugin", num_prompts=len(prompts),
                                     note=replay.describe() if replay else "",
                                     temperature=temperature, wall_s=wall)
    accepted = [int(b - a) for a, b in zip(m0.accepted_per_pos, m1.accepted_per_pos)]
    drafts = int(m1.num_drafts - m0.num_drafts)
    a = np.nan_to_num(stock_estimate(accepted, drafts), nan=0.0)
    return AcceptanceMeasurement(a=[float(x) for x in a], accepted=accepted, drafted=[drafts] * K,
                                 source="stock", note=STOCK_NOTE, num_prompts=len(prompts),
                                 temperature=temperature, wall_s=wall)
