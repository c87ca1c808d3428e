"""Traffic for a running vLLM: one completion, a closed loop of N requests kept in flight for
one window (`closed_loop`), and a stationary load that runs until stopped (`StationaryLoad`).

Closed loop: a finished request is replaced at once.

Throughput is read from the engine's own `vllm:generation_tokens_total` over a steady-state window
after a warm-up, so requests straddling the window edges are counted exactly (only the tokens
generated inside it). Each worker's first request is cut short by a different amount, so the
N requests do not start and finish in lock-step: with equal lengths (ignore_eos) they would
prefill and complete in waves, and a short window would catch one wave or two by chance.
Requests still in flight at the end are cancelled and the engine is left idle before the next
cell.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tuner.core.admin_api import StatsReply
from tuner.step_clock import StepLoad, step_load

GEN_TOKENS = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"


@dataclass(frozen=True, slots=True)
class LoadResult:
    concurrency: int
    tokens_per_s: float
    completed: int
    window_s: float
    steps: StepLoad | None = None  # what the engine's steps carried (with a `probe`)


Probe = Callable[[], Awaitable[StatsReply | None]]  # the plugin's /v1/stats, or None


def fresh_connections() -> aiohttp.TCPConnector:
    """No keep-alive: uvicorn closes idle connections after 5 s, and a request racing that close
    fails with ServerDisconnectedError (seen between tuner cells on the GPU)."""
    return aiohttp.TCPConnector(limit=0, force_close=True)


def first_lengths(concurrency: int, max_tokens: int) -> list[int]:
    """Lengths of the workers' first requests, spread evenly over 1..max_tokens: after one request
    lifetime the phases of the N workers are uniform, i.e. the load is in steady state."""
    return [max(1, round((i + 1) / concurrency * max_tokens)) for i in range(concurrency)]


async def complete(session: aiohttp.ClientSession, url: str, prompt: Any, max_tokens: int,
                   temperature: float = 0.0, model: str = "tiny") -> dict[str, Any]:
    """One /v1/completions request with ignore_eos (so it makes exactly max_tokens tokens)."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": temperature, "ignore_eos": True}
    async with session.post(url + "/v1/completions", json=body) as r:
        reply: dict[str, Any] = await r.json(content_type=None)
        if r.status != 200:
            raise RuntimeError(f"completion failed ({r.status}): {reply}")
        return reply


async def _sample(s: aiohttp.ClientSession, url: str, name: str) -> float:
    async with s.get(url + "/metrics") as r:
        text = await r.text()
    return sum(smp.value for fam in text_string_to_metric_families(text)
               for smp in fam.samples if smp.name == name)


async def _worker(s: aiohttp.ClientSession, url: str, prompts: itertools.cycle[Any],
                  max_tokens: int, temperature: float, model: str, done: list[float],
                  first_max_tokens: int) -> None:
    length = first_max_tokens
    while True:
        body = {"model": model, "prompt": next(prompts), "max_tokens": length,
                "temperature": temperature, "ignore_eos": True}
        length = max_tokens
        async with s.post(url + "/v1/completions", json=body) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"completion failed ({r.status})")
        done.append(time.monotonic())


async def wait_idle(s: aiohttp.ClientSession, url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and await _sample(s, url, RUNNING) > 0:
        await asyncio.sleep(0.2)


async def _total(s: aiohttp.ClientSession, urls: list[str], name: str) -> float:
    return sum([await _sample(s, u, name) for u in urls])


async def closed_loop(url: str | list[str], prompts: list[Any], concurrency: int, max_tokens: int,
                      warmup_s: float, window_s: float, temperature: float = 0.0,
                      model: str = "tiny", probe: Probe | None = None) -> LoadResult:
    """`url` may list several replicas: worker i talks to replica i mod n (round robin, as a
    gateway does for equal replicas) and throughput is summed over them. `probe` (one engine's
    plugin stats) is read at both ends of the window: step time, requests and tokens per step."""
    urls = [url] if isinstance(url, str) else list(url)
    cycle = itertools.cycle(prompts)
    done: list[float] = []
    timeout = aiohttp.ClientTimeout(total=warmup_s + window_s + 300)
    async with aiohttp.ClientSession(timeout=timeout,
                                     connector=fresh_connections()) as s:
        workers = [asyncio.create_task(_worker(s, urls[i % len(urls)], cycle, max_tokens,
                                               temperature, model, done, first))
                   for i, first in enumerate(first_lengths(concurrency, max_tokens))]
        try:
            await asyncio.sleep(warmup_s)
            p0 = await probe() if probe else None
            t0, g0 = time.monotonic(), await _total(s, urls, GEN_TOKENS)
            await asyncio.sleep(window_s)
            t1, g1 = time.monotonic(), await _total(s, urls, GEN_TOKENS)
            p1 = await probe() if probe else None
            for w in workers:
                if w.done() and w.exception() is not None:
                    raise w.exception()  # type: ignore[misc]
        finally:
            for w in workers:
                w.cancel()
            for w in workers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await w
            for u in urls:
                await wait_idle(s, u)
    completed = sum(1 for t in done if t0 <= t <= t1)
    steps = step_load(p0, p1) if p0 is not None and p1 is not None else None
    return LoadResult(concurrency, (g1 - g0) / (t1 - t0), completed, t1 - t0, steps)


@dataclass(frozen=True, slots=True)
class Request:
    prompt: Any
    max_tokens: int


def in_flight(pool: Sequence[Request], n: int, rng: random.Random) -> list[Request]:
    """What n clients of a stationary closed loop hold at a random moment: requests drawn in
    proportion to their length (a long one is in flight more of the time), each cut to a uniform
    share of it (what is left of it)."""
    drawn = rng.choices(pool, weights=[r.max_tokens for r in pool], k=n)
    return [Request(r.prompt, rng.randint(1, r.max_tokens)) for r in drawn]


class StationaryLoad:
    """`concurrency` closed-loop clients on one server, running until stopped (the bench).

    Each client takes the next request of a shared cycle of `requests` (lengths drawn from a
    distribution: benchmarks/workload.py) and replaces it at once when it finishes. The cycle
    starts at a random place (`seed`): started at the same place, every load would serve the
    same run of requests in its first seconds, the same lengths at the same offsets, which made
    a window's throughput depend on its place after the start. The clients start in the state a
    stationary load is in at a random moment: each holds a request drawn in proportion to its
    length (a long request is in flight more of the time) and cut to a uniform share of it (its
    residual life), so no cohort starts or ends together. Completions are kept (time, output
    tokens) as the client's cross-check of the engine's counters.

        async with StationaryLoad(url, requests, 16) as load:
            ...                    # windows; load.check() raises a client's error
    """

    def __init__(self, url: str, requests: Sequence[Request], concurrency: int,
                 temperature: float = 0.0, model: str = "tiny", seed: int = 0,
                 request_timeout_s: float = 600.0) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency}: a load needs at least one client")
        if not requests:
            raise ValueError("requests: empty; give the load at least one request to cycle")
        self.url, self.concurrency, self.temperature, self.model = url, concurrency, temperature, model
        self._rng = random.Random(seed)
        start = self._rng.randrange(len(requests))
        self._requests = itertools.cycle([*requests[start:], *requests[:start]])
        self._pool = list(requests)
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._workers: list[asyncio.Task[None]] = []
        self.completions: list[tuple[float, int]] = []  # (monotonic time, output tokens)

    async def __aenter__(self) -> StationaryLoad:
        self._session = aiohttp.ClientSession(timeout=self._timeout, connector=fresh_connections())
        for first in in_flight(self._pool, self.concurrency, self._rng):
            self._workers.append(asyncio.create_task(self._client(first)))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _client(self, request: Request) -> None:
        assert self._session is not None
        while True:
            body = {"model": self.model, "prompt": request.prompt, "max_tokens": request.max_tokens,
                    "temperature": self.temperature, "ignore_eos": True}
            async with self._session.post(self.url + "/v1/completions", json=body) as r:
                raw = await r.read()
                if r.status != 200:
                    raise RuntimeError(f"completion failed ({r.status}): {raw[:200]!r}")
            self.completions.append((time.monotonic(), request.max_tokens))
            request = next(self._requests)

    def check(self) -> None:
        """Raise the first client's error (a failed request ends its client)."""
        for w in self._workers:
            if w.done() and not w.cancelled() and w.exception() is not None:
                raise RuntimeError(f"load N={self.concurrency}: a client failed: "
                                   f"{w.exception()}") from w.exception()

    def completed_between(self, t0: float, t1: float) -> tuple[int, int]:
        """Requests, and their output tokens, that finished inside [t0, t1] (monotonic)."""
        done = [n for t, n in self.completions if t0 <= t <= t1]
        return len(done), sum(done)

    async def stop(self) -> None:
        """Cancel every client (vLLM aborts their requests) and wait until the engine is idle."""
        for w in self._workers:
            w.cancel()
        for w in self._workers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await w
        self._workers = []
        if self._session is not None:
            await wait_idle(self._session, self.url)
            await self._session.close()
            self._session = None
