"""A tiny real aiohttp app standing in for vLLM's /metrics and the plugin's admin API.

It exists for the faults a real engine cannot produce on demand: 500s, truncated bodies,
garbage, hangs, missing series, counter resets, 4xx/5xx from the admin API. The happy path
is tested against the real engine in test_end_to_end.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web

from sidecar.settings import SidecarSettings
from tuner.core.profile import AcceptanceMeasurement, Cell, EngineInfo, Profile

TOKEN = "fake-secret-token-987"
STARTUP = [[1, 4, 3], [5, 16, 1]]
# k=3 wins for B <= 8 and k=1 above, given high acceptance (a = 0.9, 0.8, 0.7)
GRID = [1, 8, 9, 16]
STEP_MS = {1: [10, 12, 16, 18], 8: [10, 12, 16, 18], 9: [10, 12, 24, 30], 16: [10, 12, 24, 30]}
TUNED = [[1, 8, 3], [9, 16, 1]]


def make_profile(K: int = 3, max_num_seqs: int = 16, a: tuple[float, ...] = (0.9, 0.8, 0.7),
                 model: str = "tiny", served_model_name: str | None = None,
                 step_ms: dict[int, list[float]] | None = None) -> Profile:
    """A profile with the step times ``step_ms`` (B -> [T(B, 0), ..., T(B, K)]; default
    STEP_MS) and acceptance ``a``."""
    table = step_ms or STEP_MS
    # each cell known to ±10% (a log-sd of 5%): a profile says how noisy its cells are
    half = float(np.exp(1.959964 * 0.05))
    cells = [Cell(B=B, k=k, client_ms=float(ms[k]), engine_ms=float(ms[k]), wall_s=1.0,
                  ci_low_ms=float(ms[k]) / half, ci_high_ms=float(ms[k]) * half)
             for B, ms in table.items() for k in range(K + 1)]
    return Profile(
        created_at=time.time(), grid=sorted(table), decode_tokens=32, repeats=1, cells=cells,
        engine=EngineInfo(hardware="test", vllm_version="0.32.0", model=model,
                          served_model_name=served_model_name, method="ngram",
                          num_speculative_tokens=K, max_num_seqs=max_num_seqs),
        acceptance=AcceptanceMeasurement(a=list(a), accepted=[0] * K, drafted=[0] * K,
                                         source="plugin", num_prompts=1, temperature=0.0,
                                         wall_s=1.0))


def write_profile(path: Path, **kwargs: Any) -> Path:
    make_profile(**kwargs).save(path)
    return path


def settings(profile: Path, engine_url: str, admin_url: str | None = None,
             **overrides: Any) -> SidecarSettings:
    values: dict[str, Any] = dict(
        profile=profile, engine_url=engine_url, admin_url=admin_url or engine_url,
        admin_token=TOKEN, interval_s=0.05, rebuild_every_steps=100, timeout_s=2.0,
        retry_attempts=3, listen_port=0, explore_every=12, hysteresis=1, model_name="tiny",
        # a quarter of the steps may explore, over a short horizon: the budget other tests
        # (or an earlier sidecar on the session engine) spent is gone after 1000 steps
        explore_share=0.25, explore_horizon=1000,
        # these tests are about faults and mechanics, on the model's pushes; the decisions by
        # measured goodput have their own (test_measured_decisions.py)
        decide_by="model",
        nice=0)  # main() runs in the test process: never lower pytest's priority
    values.update(overrides)
    return SidecarSettings(**values)


@dataclass
class FakeEngine:
    K: int = 3
    max_num_seqs: int = 16
    table: list[list[int]] = field(default_factory=lambda: [list(r) for r in STARTUP])
    version: int = 1
    plugin: bool = True
    # 500 | truncate | cut | garbage | hang | missing | overflow | huge
    metrics_fault: str | None = None
    admin_status: int | None = None    # force this status on admin PUTs (e.g. 422, 500)
    admin_down: bool = False           # 503 on every admin request
    url: str = ""
    table_puts: list[Any] = field(default_factory=list)
    policy_puts: list[Any] = field(default_factory=list)
    auth_headers: list[str] = field(default_factory=list)
    metrics_gets: int = 0
    served_model_name: str = "tiny"  # vLLM's --served-model-name (its model_name label)
    hanging: asyncio.Event = field(default_factory=asyncio.Event)  # a /metrics hang began
    hang_over: asyncio.Event = field(default_factory=asyncio.Event)  # ... and answered
    # the plugin's freshness gauges (None: a plugin that predates them)
    started_at: float | None = 1_795_950_000.0
    stats_age_s: float | None = 0.0
    stalled: list[str] | None = None  # plugin lines served while its stats fetch fails
    ring: list[tuple[int, int, int, int, float, int, int, float]] = field(default_factory=list)
    policy: dict[str, Any] = field(default_factory=dict)  # the last PUT /v1/policy body
    lose_reply: bool = False  # the next PUT /v1/table is applied but answered 503
    # /v1/stats carries the counters (the sidecar reads them there, not on /metrics); off: a
    # plugin that answers with the ring only, so /metrics is the road and its faults apply
    stats_counters_on: bool = False

    def __post_init__(self) -> None:
        table = self.table
        self.restart()
        self.table = table

    # -- simulated traffic ------------------------------------------------------------------
    def restart(self) -> None:
        """A new engine run: counters from zero, the startup table, version 1."""
        self.accepted = [0.0] * self.K
        self.drafted = [0.0] * self.K
        self.stock_accepted = [0.0] * self.K
        self.num_drafts = 0.0
        self.engine_steps: dict[int, float] = {}
        self.request_steps: dict[int, float] = {}
        self.resume_accepted = [0.0] * self.K
        self.resume_drafted = [0.0] * self.K
        self.finished = [0.0, 0.0]  # request-steps with a proposal, first draft kept
        self.step_time: dict[tuple[int, int], list[float]] = {}
        self.table, self.version = [list(r) for r in STARTUP], 1
        if self.started_at is not None:  # a new start time (the plugin's gauge)
            self.started_at += 1000.0

    def operator_put(self, table: list[list[int]]) -> None:
        """Someone else writes the table (an operator's PUT /v1/table)."""
        self.table, self.version = [list(r) for r in table], self.version + 1

    def stall(self, age_s: float) -> None:
        """The plugin's collector serves its last good values, ``age_s`` old (its fetch fails)."""
        self.stats_age_s = age_s
        self.stalled = self._plugin_lines(self._labels())

    def unstall(self) -> None:
        self.stalled, self.stats_age_s = None, 0.0

    def run(self, steps: int, a: tuple[float, ...] = (0.9, 0.8, 0.7), B: int = 4,
            step_ms: float | None = None, k: int | None = None, resume: bool = False) -> None:
        """``steps`` engine steps at batch size B and k (default K), accepting prefix i with
        rate a_i; ``resume``: request-steps right after a K=0 stretch (counted apart too)."""
        k = self.K if k is None else k
        n = steps * B
        if k:
            self.num_drafts += n
            # the requests' lives close as they run (the plugin adds them when they finish)
            self.finished[0] += n
            self.finished[1] += round(n * a[0])
        for i in range(k):
            self.drafted[i] += n
            self.accepted[i] += round(n * a[i])
            self.stock_accepted[i] += round(n * a[i] * 0.95)  # vLLM's lags slightly
            if resume:
                self.resume_drafted[i] += n
                self.resume_accepted[i] += round(n * a[i])
        self.engine_steps[k] = self.engine_steps.get(k, 0.0) + steps
        self.request_steps[k] = self.request_steps.get(k, 0.0) + n
        if step_ms is not None:
            cell = self.step_time.setdefault((B, k), [0.0, 0.0])
            cell[0] += steps * step_ms / 1000
            cell[1] += steps

    def serve(self, steps: int, B: int, rates: dict[int, float], step_ms: dict[int, float],
              a: tuple[float, ...] = (0.9, 0.8, 0.7), noise: float = 0.03, seed: int = 0) -> None:
        """``steps`` engine steps at batch size B, each at the table's k or the k a duel asks for
        (the plugin's own DuelClock), into the step ring and the counters: a step at k takes
        step_ms[k] and emits rates[k] tokens per second of it (realized goodput), both with
        ``noise`` (log sd)."""
        import numpy as np

        from tuner.core.table import Table
        from vllm_patch.duel import DuelClock

        rng = np.random.default_rng(seed + len(self.ring))
        if not hasattr(self, "_duel_clock"):
            self._duel_clock, self._duel_policy = DuelClock(), None
        duels = tuple((lo, hi, tuple(ks)) for lo, hi, ks in self.policy.get("duels", []))
        if duels != self._duel_policy:
            self._duel_clock.reset()
            self._duel_policy = duels
        run = self.policy.get("duel_run", 16)
        share = self.policy.get("duel_share", 0.02)
        horizon = self.policy.get("duel_horizon", 10_000)
        for _ in range(steps):
            seq = len(self.ring) + 1
            table_k = Table.from_list(self.table).k_at(B, self.K)
            k = self._duel_clock.k_for_step(duels, B, table_k, seq, run, share, horizon)
            k = table_k if k is None else k
            prev = self.ring[-1][3] if self.ring else k
            seconds = step_ms[k] / 1000 * float(np.exp(rng.normal(0, noise)))
            emitted = int(round(rates[k] * seconds * float(np.exp(rng.normal(0, noise)))))
            self.ring.append((seq, B, prev, k, seconds, B, emitted, seconds * 1.02))
            self.run(1, a, B, step_ms[k], k)

    # -- exposition ----------------------------------------------------------------------------
    def _labels(self) -> str:
        return f'engine="0",model_name="{self.served_model_name}"'

    def metrics_text(self) -> str:
        base = self._labels()
        lines = [
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            f"vllm:spec_decode_num_drafts_total{{{base}}} {self.num_drafts}",
            f"vllm:spec_decode_num_draft_tokens_total{{{base}}} {sum(self.drafted)}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{base}}} {sum(self.stock_accepted)}",
        ]
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{base},position="{i}"}} '
                  f"{v}" for i, v in enumerate(self.stock_accepted)]
        if self.plugin:
            lines += self.stalled if self.stalled is not None else self._plugin_lines(base)
        return "\n".join(lines) + "\n"

    def _plugin_lines(self, base: str) -> list[str]:
        lines = [f'vllm:spec_decode_num_draft_tokens_per_pos_total{{{base},position="{i}"}} {v}'
                 for i, v in enumerate(self.drafted)]
        lines += [f'tabletune_accepted_tokens_per_pos_total{{{base},position="{i}"}} {v}'
                  for i, v in enumerate(self.accepted)]
        lines += [f'tabletune_engine_steps_total{{{base},k="{k}"}} {v}'
                  for k, v in self.engine_steps.items()]
        lines += [f'tabletune_request_steps_total{{{base},k="{k}"}} {v}'
                  for k, v in self.request_steps.items()]
        for (B, k), (seconds, count) in self.step_time.items():
            lines.append(f'tabletune_step_seconds_total{{{base},batch_size="{B}",k="{k}"}} '
                         f"{seconds}")
            lines.append(f'tabletune_steps_timed_total{{{base},batch_size="{B}",k="{k}"}} '
                         f"{count}")
        lines += [f'tabletune_resume_draft_tokens_per_pos_total{{{base},position="{i}"}} {v}'
                  for i, v in enumerate(self.resume_drafted)]
        lines += [f'tabletune_resume_accepted_tokens_per_pos_total{{{base},position="{i}"}} {v}'
                  for i, v in enumerate(self.resume_accepted)]
        lines.append(f"tabletune_finished_proposed_total{{{base}}} {self.finished[0]}")
        lines.append(f"tabletune_finished_accepted_total{{{base}}} {self.finished[1]}")
        lines.append(f"tabletune_explore_steps_total{{{base}}} 0")
        lines.append(f"tabletune_table_version{{{base}}} {self.version}")
        if self.started_at is not None:
            lines.append(f"tabletune_engine_started_at_seconds{{{base}}} {self.started_at}")
        if self.stats_age_s is not None:
            lines.append(f"tabletune_stats_age_seconds{{{base}}} {self.stats_age_s}")
        return lines

    # -- handlers ----------------------------------------------------------------------------
    async def metrics(self, request: web.Request) -> web.StreamResponse:
        self.metrics_gets += 1
        fault, text = self.metrics_fault, self.metrics_text()
        if fault == "500":
            return web.Response(status=500, text="Internal Server Error")
        if fault == "hang":
            self.hanging.set()
            await asyncio.sleep(60)
            self.hang_over.set()
        if fault == "garbage":
            return web.Response(body=b"\x00\xff<html>502 Bad Gateway</html> {{{\n")
        if fault == "missing":
            text = "\n".join(line for line in text.splitlines()
                             if "accepted_tokens_per_pos" not in line) + "\n"
        if fault == "overflow":  # two versions that once summed to inf (int(inf) crashed)
            text += "".join(f'tabletune_table_version{{engine="{e}"}} 1.7e308\n' for e in (1, 2))
        if fault == "huge":  # larger than any vLLM body: refused before it is parsed
            text += "# padding\n" * 10_000
        if fault == "cut":  # a body cut mid-line but delivered completely
            text = text[: len(text) // 2]
        if fault == "truncate":  # the connection dies mid-body
            response = web.StreamResponse(headers={"Content-Length": str(len(text) + 100)})
            await response.prepare(request)
            await response.write(text[:50].encode())
            assert request.transport is not None
            request.transport.close()
            return response
        return web.Response(text=text)

    def _table_reply(self) -> dict[str, Any]:
        return {"table": self.table, "num_speculative_tokens": self.K,
                "max_num_seqs": self.max_num_seqs, "startup_k": sorted({r[2] for r in STARTUP}),
                "version": self.version, "swapped_at": None, "restrict_k": False,
                "swap_latency_s": None}

    async def get_table(self, request: web.Request) -> web.Response:
        if self.admin_down:
            return web.json_response({"error": "down"}, status=503)
        return web.json_response(self._table_reply())

    async def put_table(self, request: web.Request) -> web.Response:
        self.auth_headers.append(request.headers.get("Authorization", ""))
        body = await request.json()
        self.table_puts.append(body)
        if self.admin_down or self.admin_status is not None:
            status = 503 if self.admin_down or self.admin_status is None else self.admin_status
            return web.json_response({"error": "table: K=3 is not allowed here",
                                      "field": "table"}, status=status)
        if body.get("if_version") not in (None, self.version):  # the plugin's conditional PUT
            return web.json_response({"error": f"if_version={body['if_version']}: the table is "
                                      f"at version {self.version} now", "field": "if_version"},
                                     status=409)
        self.table, self.version = body["table"], self.version + 1
        if self.lose_reply:  # applied, but the reply is lost: the client retries the same PUT
            self.lose_reply = False
            return web.json_response({"error": "reply lost"}, status=503)
        return web.json_response(self._table_reply())

    async def get_stats(self, request: web.Request) -> web.Response:
        if self.admin_down:
            return web.json_response({"error": "down"}, status=503)
        since = int(request.query.get("since", 0))
        counters = self.counters_reply() if self.stats_counters_on else {
            "model_name": self.served_model_name, "started_at": 0.0,
            "num_speculative_tokens": self.K, "max_num_seqs": self.max_num_seqs}
        return web.json_response({**counters,
                                  "recent_steps": [s for s in self.ring if s[0] > since]})

    def counters_reply(self) -> dict[str, Any]:
        """The plugin's counters as its /v1/stats carries them: the values /metrics shows."""
        return {"model_name": self.served_model_name, "started_at": self.started_at or 0.0,
                "num_speculative_tokens": self.K, "max_num_seqs": self.max_num_seqs,
                "table_version": self.version,
                "drafted_per_pos": [int(v) for v in self.drafted],
                "accepted_per_pos": [int(v) for v in self.accepted],
                "engine_steps_per_k": {str(k): int(v) for k, v in self.engine_steps.items()},
                "request_steps_per_k": {str(k): int(v) for k, v in self.request_steps.items()},
                "step_times": [[B, k, sec, int(n)] for (B, k), (sec, n) in self.step_time.items()],
                "resume_drafted_per_pos": [int(v) for v in self.resume_drafted],
                "resume_accepted_per_pos": [int(v) for v in self.resume_accepted],
                "finished_proposed": int(self.finished[0]),
                "finished_accepted": int(self.finished[1])}

    async def put_policy(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.policy_puts.append(body)
        if self.admin_down:
            return web.json_response({"error": "down"}, status=503)
        self.policy = {**self.policy, **body}
        return web.json_response({"explore_every": body.get("explore_every", 0),
                                  "hysteresis": body.get("hysteresis", 0)})


@asynccontextmanager
async def running(engine: FakeEngine | None = None) -> AsyncIterator[FakeEngine]:
    """Serve a FakeEngine on a free loopback port; ``engine.url`` is its base URL."""
    engine = engine or FakeEngine()
    app = web.Application()
    app.router.add_get("/metrics", engine.metrics)
    app.router.add_get("/v1/table", engine.get_table)
    app.router.add_put("/v1/table", engine.put_table)
    app.router.add_put("/v1/policy", engine.put_policy)
    app.router.add_get("/v1/stats", engine.get_stats)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    engine.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield engine
    finally:
        await runner.cleanup()


def closed_port_url() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
