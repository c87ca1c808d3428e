"""Measure a_i on a running engine: the largest K on sample prompts at the serving temperature.

a_i = P(first i drafts all accepted | the request-step was offered K >= i), from counter deltas.
With the plugin, offered request-steps include empty drafts (ngram no-match) as not accepted.
Without it, vLLM's stock accepted_i / num_drafts is used, and the profile says it is biased.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import numpy as np

from tuner.acceptance import per_position, stock_estimate
from tuner.core.engine_client import AdminRejected, EngineClient
from tuner.core.errors import EngineUnavailable
from tuner.launcher import VllmServer
from tuner.load import complete, fresh_connections
from tuner.core.profile import AcceptanceMeasurement
from tuner.prompts import Prompt
from tuner.replay import Replay
from tuner.core.scrape import parse

STOCK_NOTE = ("vLLM's stock accepted_i / num_drafts: biased low when draft lengths vary (ngram "
              "no-match, DSD), because num_drafts counts drafts that never had position i")


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
                                     connector=fresh_connections()) as s, \
            EngineClient(server.url, admin_url or "", timeout_s=10.0) as engine:
        if admin_url:  # lift the timing mode's reject-all: real (or replayed) acceptance from here
            rates = list(replay.emulator_rates()) if replay else [1.0] * K
            with contextlib.suppress(AdminRejected):  # 409: emulation off, nothing to lift
                await engine.put_emulation(rates)
        stats0 = await engine.get_stats() if admin_url else None
        m0 = parse(await engine.get_metrics())
        gate = asyncio.Semaphore(concurrency)

        async def one(p: Prompt) -> None:
            async with gate:
                await complete(s, server.url, p, max_tokens, temperature,
                               model=server.cfg.served_model_name)

        await asyncio.gather(*[one(p) for p in prompts])
        await asyncio.sleep(0.5)  # let vLLM's stat loggers catch up
        stats1 = await engine.get_stats() if admin_url else None
        m1 = parse(await engine.get_metrics())
        if admin_url and restore_reject_all:
            try:
                await engine.put_emulation([0.0] * K)
            except EngineUnavailable as exc:
                raise EngineUnavailable(f"could not restore reject-all after measuring "
                                        f"acceptance: {exc}") from exc
    wall = time.monotonic() - t0
    if stats0 is not None and stats1 is not None:
        drafted = [b - a for a, b in zip(stats0.drafted_per_pos, stats1.drafted_per_pos)]
        accepted = [b - a for a, b in zip(stats0.accepted_per_pos, stats1.accepted_per_pos)]
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
