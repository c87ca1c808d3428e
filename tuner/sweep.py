"""Time one decode step T(B, k) on vLLM's own serving path.

Per cell (B, k), the paper's method: send B fresh prompts once with max_tokens=1 and once with
max_tokens=N; (t_N - t_1) / (N - 1) is one step. Under the plugin's reject-all mode every request
advances one token per step, so all B requests stay in the batch for the whole run. The plugin's
engine-side step clock gives the same difference without HTTP noise:
(Σ step seconds_N - Σ_1) / (steps_N - steps_1). Both are kept; the engine figure is used.

Under a workload (`--workload PROMPT:OUTPUT`) a cell is timed in steady serving instead: B
closed-loop clients whose requests live as many steps as they would at τ(k), so every step also
carries the prefill of the requests that replace finished ones (CellTimer.time_mixed).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import aiohttp

from tuner.core.admin_api import NO_STEPS, StatsReply
from tuner.core.engine_client import EngineClient
from tuner.core.errors import EngineUnavailable
from tuner.core.honor import verified_drafts
from tuner.launcher import VllmServer, log_tail
from tuner.load import complete, first_lengths, fresh_connections
from tuner.core.profile import StepSample
from tuner.core.samples import BATCH_FILL
from tuner.step_clock import engine_clock, last_seq, steady_steps, step_load
from tuner.core.workload import Workload

PromptSource = Callable[[int, int], list[Any]]  # (n, seed) -> prompts
T = TypeVar("T")


def repeat_order(items: Sequence[T], rep: int) -> list[T]:
    """What is compared (the k's of one batch size, the bench's tables at one load) in the order
    repeat `rep` runs them: forward, then backward (k = 0..K, K..0, ...), so a slow stretch of
    the host spanning a few samples lands on every item alike, and a linear drift cancels over
    each pair of repeats."""
    return list(items) if rep % 2 == 0 else list(reversed(items))


def default_grid(max_num_seqs: int) -> list[int]:
    """Every B up to 16, then every 8 (and max_num_seqs itself)."""
    grid = list(range(1, min(16, max_num_seqs) + 1))
    grid += list(range(24, max_num_seqs + 1, 8))
    if grid[-1] != max_num_seqs:
        grid.append(max_num_seqs)
    return grid


class CellTimer:
    """Times cells against one running server (one k)."""

    def __init__(self, server: VllmServer, admin_url: str, prompts: PromptSource,
                 model_name: str | None = None) -> None:
        self.server = server
        self.admin_url = admin_url
        self.prompts = prompts
        self.model_name = model_name or server.cfg.served_model_name
        self.seed = 1000
        self.session: aiohttp.ClientSession | None = None
        self.admin = EngineClient(admin_url=admin_url, timeout_s=10.0)

    async def __aenter__(self) -> CellTimer:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600),
                                             connector=fresh_connections())
        await self.admin.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.admin.__aexit__(None, None, None)
        if self.session is not None:
            await self.session.close()

    async def stats(self, since: int | None = NO_STEPS) -> StatsReply | None:
        """The plugin's counters, with the per-step samples after seq ``since`` (default: none,
        for polls that only count); None when they do not answer (the cell then has no engine
        figure, only the client's)."""
        try:
            return await self.admin.get_stats(since=since)
        except EngineUnavailable:
            return None

    async def burst(self, B: int, max_tokens: int) -> float:
        """Wall seconds for B fresh prompts (fresh: no prefix-cache hits between runs)."""
        assert self.session is not None
        self.seed += 1
        prompts = self.prompts(B, self.seed)
        t0 = time.perf_counter()
        try:
            await asyncio.gather(*[complete(self.session, self.server.url, p, max_tokens,
                                            model=self.model_name) for p in prompts])
        except (TimeoutError, aiohttp.ClientError, RuntimeError) as exc:
            if not self.server.is_running:
                raise EngineUnavailable(f"vLLM died during the sweep ({exc}); finished cells "
                                        f"are saved.\n--- log tail ---\n"
                                        f"{log_tail(self.server.log_path)}") from exc
            raise
        return time.perf_counter() - t0

    async def warm_up(self, batch_sizes: list[int]) -> None:
        for B in batch_sizes:
            await self.burst(B, 8)

    async def time_cell(self, B: int, k: int, rep: int, decode_tokens: int) -> StepSample:
        started = time.time()
        s0 = await self.stats()
        t_short = await self.burst(B, 1)
        s1 = await self.stats(since=None)
        t_long = await self.burst(B, decode_tokens)
        s2 = await self.stats(since=last_seq(s1))
        client_ms = (t_long - t_short) / (decode_tokens - 1) * 1000.0
        # the engine's own step times: the long run's decode steps at exactly B and steady k
        steps_ms = steady_steps(s2, last_seq(s1), k, batch=B, max_tokens=B * (k + 1))
        engine_ms = steps = share = None
        if s0 is not None and s1 is not None and s2 is not None:
            c0, c1, c2 = engine_clock(s0, k), engine_clock(s1, k), engine_clock(s2, k)
            d_steps = (c2.steps - c1.steps) - (c1.steps - c0.steps)
            if d_steps > 0:
                engine_ms = ((c2.seconds - c1.seconds) - (c1.seconds - c0.seconds)) / d_steps * 1e3
            steps = c2.steps - c1.steps
            rs = c2.request_steps - c1.request_steps
            share = (c2.full_drafts - c1.full_drafts) / rs if (k and rs) else None
        if steps_ms:
            engine_ms = statistics.median(steps_ms)
        # the drafts each request verified: whether the engine ran the k the table asked
        drafts = verified_drafts(s2.recent_steps, B, s2.num_speculative_tokens) if s2 else []
        return StepSample(B=B, k=k, rep=rep, client_ms=client_ms, engine_ms=engine_ms,
                          engine_steps=steps, full_draft_share=share, started=started,
                          steps_ms=[round(x, 4) for x in steps_ms] or None,
                          drafts=round(statistics.median(drafts), 4) if drafts else None,
                          drafts_steps=len(drafts) or None)

    async def wait_steps(self, since: StatsReply | None, steps: int, k: int,
                         workers: list[asyncio.Task[None]], timeout_s: float = 300.0) -> StatsReply:
        """Poll the plugin's clock until `steps` more engine steps ran; a dead worker (vLLM gone,
        a refused request) ends the wait with its error."""
        base = engine_clock(since, k).steps if since else None
        deadline = time.monotonic() + timeout_s
        while True:
            for w in workers:
                if w.done() and not w.cancelled() and w.exception() is not None:
                    raise EngineUnavailable(f"a timing request failed: {w.exception()}\n--- log tail ---\n"
                                            f"{log_tail(self.server.log_path)}")
            stats = await self.stats()
            if stats is None:
                raise EngineUnavailable(
                    "the plugin's /v1/stats did not answer during a timed cell"
                    + ("" if self.server.is_running else " (vLLM has exited)")
                    + f"\n--- log tail ---\n{log_tail(self.server.log_path)}")
            if base is None:
                base = engine_clock(stats, k).steps
            elif engine_clock(stats, k).steps - base >= steps:
                return stats
            if time.monotonic() > deadline:
                raise EngineUnavailable(f"vLLM ran fewer than {steps} steps in {timeout_s:.0f} s")
            await asyncio.sleep(0.05)

    async def wait_batch(self, B: int, k: int, workers: list[asyncio.Task[None]],
                         timeout_s: float = 30.0, patience: int = 5) -> StatsReply:
        """Stats once the engine runs the cell's batch: B requests start at once and the API server admits
        them over many steps (docs/tuner.md). Waits, in stretches of 4 steps, until one stretch ran at
        least BATCH_FILL·B requests a step. It gives up when `patience` stretches in a row set no new high
        by half a request (the batch has stopped growing: more waiting would only burn device time) or
        after timeout_s; the sample's mean_batch then says what the window got (it is retaken, see
        profile.cell_needs_another)."""
        since = await self.wait_steps(None, 8, k, workers)
        deadline, best, flat = time.monotonic() + timeout_s, 0.0, 0
        while True:
            now = await self.wait_steps(since, 4, k, workers)
            load = step_load(since, now)
            if load is None or load.requests_per_step >= BATCH_FILL * B:
                return now  # None: a plugin without the exact totals, nothing to wait on
            # a new high by half a request: slow steady growth at large B is still growth
            improved = load.requests_per_step > best + 0.5
            best, flat = (load.requests_per_step, 0) if improved else (best, flat + 1)
            if flat >= patience or time.monotonic() > deadline:
                return now
            since = now

    async def time_mixed(self, B: int, k: int, rep: int, workload: Workload, tau_k: float,
                         window_steps: int, prompts: PromptSource) -> StepSample:
        """T(B, k) in steady serving of `workload`: B closed-loop clients, each request living
        workload.steps_per_request(τ(k)) steps (reject-all: one token a step), first requests
        staggered so finishes and prefills spread evenly over steps. Engine clock over
        window_steps steps, or one lifetime if longer, once the engine runs the batch."""
        assert self.session is not None
        session, life, started = self.session, workload.steps_per_request(tau_k), time.time()

        async def client(first: int) -> None:
            n = first
            while True:
                self.seed += 1
                await complete(session, self.server.url, prompts(1, self.seed)[0], n,
                               model=self.model_name)
                n = life

        workers = [asyncio.create_task(client(n)) for n in first_lengths(B, life)]
        try:
            # staggered first requests finish at an even rate from the start; the window opens
            # once the engine holds the batch and spans at least one lifetime, so even at B=1 it
            # holds the prefill its share says
            s0 = await self.wait_batch(B, k, workers)
            cursor = last_seq(await self.stats(since=None))
            t0 = time.perf_counter()
            s1 = await self.wait_steps(s0, max(window_steps, life + 1), k, workers)
            wall = time.perf_counter() - t0
            window = await self.stats(since=cursor)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        c0, c1 = engine_clock(s0, k), engine_clock(s1, k)
        steps, rs = c1.steps - c0.steps, c1.request_steps - c0.request_steps
        load = step_load(s0, s1)
        # the window's steady steps that held the batch (prefill included, as serving brings it)
        steps_ms = [x for x in steady_steps(window, cursor, k, min_batch=BATCH_FILL * B, max_batch=B)]
        return StepSample(B=B, k=k, rep=rep, client_ms=wall / steps * 1e3,
                          engine_ms=(statistics.median(steps_ms) if steps_ms
                                     else (c1.seconds - c0.seconds) / steps * 1e3),
                          engine_steps=steps, steps_ms=[round(x, 4) for x in steps_ms] or None,
                          full_draft_share=(c1.full_drafts - c0.full_drafts) / rs if (k and rs) else None,
                          mean_batch=load.requests_per_step if load else None,
                          tokens_per_step=load.tokens_per_step if load else None, started=started)
