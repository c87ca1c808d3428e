"""`tabletune bench`: every policy on the same engine, prompts and loads, in one run.

Table policies share one vLLM (tables swapped through the plugin); no speculation gets its own.
Sidecar policies run the real `tabletune sidecar` process next to the engine, starting from a
given table. Plain tables are interleaved: at each load every one in turn, the order alternating
with load and repeat; sidecar policies run their loads in a row (their state carries over), in
blocks whose order alternates across repeats. Warm-up is excluded from every window.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm import tqdm

from benchmarks.analysis import Row
from benchmarks.baselines import turbospec_table
from sidecar.process import sidecar_process
from tuner.admin_api import StatsReply
from tuner.engine_client import EngineClient
from tuner.engine_defaults import plugin_env, resolve_model
from tuner.errors import EngineUnavailable
from tuner.files import write_atomic
from tuner.launcher import ServerConfig, SpeculativeSpec, free_port, launch
from tuner.load import closed_loop
from tuner.profile import Profile
from tuner.replay import Replay
from tuner.sweep import repeat_order
from tuner.table import Table, documented_table, every_k_table, shrink

TOKEN = "bench-token"
SIDECAR_POLICIES = {"sidecar-from-quarter": "quarter", "sidecar-from-documented": "documented"}


class BenchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: Profile
    profile_path: Path
    model: Path
    loads: list[int]
    policies: list[str]
    repeats: int = Field(2, ge=1)
    warmup_s: float = 2.0
    # Before the first measured cell, every load under k=0 and k=K for this long, unmeasured: the
    # first batch of each shape pays one-off costs (Triton JIT of MoE kernels, allocator growth)
    # that would otherwise land on whichever policy happens to run first.
    prime_s: float = Field(2.0, ge=0)
    window_s: float = 6.0
    max_tokens: int = 64
    temperature: float = 0.0
    prompts: list[Any]
    converge_s: float = 20.0
    emulate: Replay | None = None  # replayed acceptance, see tuner/replay.py
    sidecar_args: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()
    out: Path
    log_dir: Path = Path("runs/logs")

    @model_validator(mode="after")
    def _check(self) -> BenchConfig:
        if self.emulate is not None:
            self.emulate.check_k(self.profile.K)
        known = set(policy_tables(self.profile, self.policies)) | {"nospec", *SIDECAR_POLICIES}
        unknown = [p for p in self.policies if p not in known]
        if unknown:  # before any vLLM starts, not at the first cell of that policy
            raise ValueError(f"policies {unknown}: not known for this profile; use nospec, "
                             f"{', '.join(sorted(known - {'nospec'}))}, or tuned@tie=0.05 (the "
                             "profile's table rebuilt with another --tie)")
        return self


TIE = "tuned@tie="


def engine_args(extra_args: tuple[str, ...]) -> tuple[str, ...]:
    """The bench's vLLM flags: prefix caching off unless an --engine-arg names it. The load cycles
    a fixed prompt set, so from the second round on vLLM's prefix cache would serve nearly every
    prompt and the steps would carry almost no prefill (H200, N=256, k=0: ~30 prefill tokens a
    step where 96-token prompts replacing 2 finished requests a step bring ~190); real prompts
    do not repeat like that, and the tuner times without the cache too."""
    if any(a.split("=")[0] in ("--enable-prefix-caching", "--no-enable-prefix-caching")
           for a in extra_args):
        return extra_args
    return ("--no-enable-prefix-caching", *extra_args)


def policy_tables(profile: Profile, policies: Sequence[str] = ()) -> dict[str, Table]:
    """Every table policy; `tuned@tie=X` (named in policies) is the profile rebuilt with tie X."""
    K, n = profile.K, profile.engine.max_num_seqs
    tables = {f"fixed-k{k}": Table.from_list([[1, n, k]]) for k in range(K + 1)}
    tables["documented"] = documented_table(K, n)
    tables["quarter"] = shrink(documented_table(K, n))
    if profile.table:
        tables["tuned"] = Table.from_list(profile.table)
    tables["turbospec-style"] = turbospec_table(profile)
    tables["nightjar-style"] = tables["documented"]  # unused: the plugin's bandit picks k per step
    for p in policies:
        if p.startswith(TIE) and profile.acceptance is not None:
            try:
                tie = float(p.removeprefix(TIE))
            except ValueError:
                continue  # reported as unknown by BenchConfig
            tables[p] = profile.model_copy(update={"tie": tie}).build().table
    return tables


def admin_client(admin_port: int) -> EngineClient:
    """The plugin of the bench's engine (token: TOKEN)."""
    return EngineClient(admin_url=f"http://127.0.0.1:{admin_port}", token=TOKEN, timeout_s=30.0)


async def probe_stats(admin: EngineClient) -> StatsReply | None:
    """The plugin's counters, or None (the cell then lacks its step columns, nothing else)."""
    try:
        return await admin.get_stats()
    except EngineUnavailable:
        return None


def sidecar(cfg: BenchConfig, engine_url: str, admin_url: str) -> Any:
    port = free_port()
    return sidecar_process(cfg.profile_path, engine_url, admin_url, TOKEN,
                           cfg.log_dir / f"sidecar-{port}.log",
                           ("--interval-s", "0.5", "--rebuild-every-steps", "100",
                            "--listen-port", str(port), "--allowed-k", "all", *cfg.sidecar_args))


async def converge(cfg: BenchConfig, url: str, admin: EngineClient) -> float:
    """Drive mid load until the sidecar's first rewrite settles; seconds to the last change."""
    t0, version, last_change = time.monotonic(), (await admin.get_table()).version, 0.0
    mid = cfg.loads[len(cfg.loads) // 2]
    while time.monotonic() - t0 < cfg.converge_s:
        await closed_loop(url, cfg.prompts, mid, cfg.max_tokens, 0.0, 2.0, cfg.temperature)
        v = (await admin.get_table()).version
        if v != version:
            version, last_change = v, time.monotonic() - t0
    return last_change


async def prime(cfg: BenchConfig, url: str) -> None:
    if cfg.prime_s > 0:
        for load in cfg.loads:
            await closed_loop(url, cfg.prompts, load, cfg.max_tokens, 0.0, cfg.prime_s, cfg.temperature)


async def run_table_policies(cfg: BenchConfig, rows: list[Row], bar: tqdm) -> dict[str, float]:
    tables = policy_tables(cfg.profile, cfg.policies)
    admin_port = free_port()
    K, n = cfg.profile.K, cfg.profile.engine.max_num_seqs
    spec = SpeculativeSpec(method=cfg.profile.engine.method, num_speculative_tokens=K,
                           table=every_k_table(K, n), draft_model=(str(resolve_model(cfg.profile.engine.drafter, None, "--drafter"))
                                        if cfg.profile.engine.drafter else None),
                           extra=cfg.emulate.speculative_extra() if cfg.emulate else {})
    server_cfg = ServerConfig(model=cfg.model, max_num_seqs=n, speculative=spec,
                              env=plugin_env(admin_port, token=TOKEN,
                                             emulate=cfg.emulate.emulator_rates() if cfg.emulate else None),
                              extra_args=engine_args(cfg.extra_args))
    converge_times: dict[str, float] = {}
    policies = [p for p in cfg.policies if p != "nospec"]
    async with launch(server_cfg, log_dir=cfg.log_dir) as server, admin_client(admin_port) as admin:
        for k in sorted({0, K}):
            await admin.put_table(tables[f"fixed-k{k}"])
            bar.set_description(f"priming k={k}")
            await prime(cfg, server.url)

        async def cell(policy: str, load: int, rep: int) -> None:
            bar.set_description(f"{policy} N={load} rep {rep}")
            res = await closed_loop(server.url, cfg.prompts, load, cfg.max_tokens,
                                    cfg.warmup_s, cfg.window_s, cfg.temperature, probe=lambda: probe_stats(admin))
            table = (await admin.get_table()).table
            st = res.steps
            rows.append(Row(policy, load, rep, res.tokens_per_s, res.completed, res.window_s,
                            json.dumps(table), st.step_ms if st else None,
                            st.requests_per_step if st else None,
                            st.tokens_per_step if st else None))
            write_rows(rows, cfg.out / "cells.csv")  # a cut run keeps every cell
            bar.update(1)

        async def stateful(policy: str, rep: int) -> None:
            """A policy whose state lives across loads (a sidecar, the bandit): all loads in a row."""
            await admin.put_table(tables[SIDECAR_POLICIES.get(policy, policy)])
            async with contextlib.AsyncExitStack() as stack:
                if policy == "nightjar-style":  # a fresh bandit per (policy, repeat)
                    await admin.put_policy(baseline="nightjar")
                    stack.push_async_callback(functools.partial(admin.put_policy, baseline="none"))
                if policy in SIDECAR_POLICIES:
                    await stack.enter_async_context(sidecar(cfg, server.url, admin.admin_url))
                    converge_times[f"{policy}#{rep}"] = await converge(cfg, server.url, admin)
                for load in cfg.loads:
                    await cell(policy, load, rep)

        async def swapped(rep: int) -> None:
            """Plain tables: at each load every policy in turn, the order alternating with load and
            repeat (tuner.sweep.repeat_order). One policy's whole block minutes away from
            another's let the host's drift decide: on the H200 the tuned table and fixed k=3,
            running the same k, were 25% and 75% apart at N=16 and 64."""
            for i, load in enumerate(cfg.loads):
                for policy in repeat_order(plain, rep + i):
                    await admin.put_table(tables[policy])
                    await cell(policy, load, rep)

        plain = [p for p in policies if p not in SIDECAR_POLICIES and p != "nightjar-style"]
        blocks: list[str | None] = [None] + [p for p in policies if p not in plain]  # None: plain
        for rep in range(cfg.repeats):
            for block in repeat_order(blocks, rep):
                await (swapped(rep) if block is None else stateful(block, rep))
    return converge_times


async def run_nospec(cfg: BenchConfig, rows: list[Row], bar: tqdm) -> None:
    server_cfg = ServerConfig(model=cfg.model, max_num_seqs=cfg.profile.engine.max_num_seqs,
                              extra_args=engine_args(cfg.extra_args))
    async with launch(server_cfg, log_dir=cfg.log_dir) as server:
        bar.set_description("priming nospec")
        await prime(cfg, server.url)
        for rep in range(cfg.repeats):
            for load in cfg.loads:
                bar.set_description(f"nospec N={load} rep {rep}")
                res = await closed_loop(server.url, cfg.prompts, load, cfg.max_tokens,
                                        cfg.warmup_s, cfg.window_s, cfg.temperature)
                rows.append(Row("nospec", load, rep, res.tokens_per_s, res.completed,
                                res.window_s, "[]"))
                write_rows(rows, cfg.out / "cells.csv")
                bar.update(1)


def write_rows(rows: list[Row], path: Path) -> None:
    """cells.csv, atomically: a kill mid-write leaves the previous file whole."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(asdict(rows[0]).keys()))
    w.writeheader()
    w.writerows(asdict(r) for r in rows)
    write_atomic(path, out.getvalue(), newline="")


async def bench(cfg: BenchConfig) -> tuple[list[Row], dict[str, float]]:
    rows: list[Row] = []
    total = len(cfg.policies) * len(cfg.loads) * cfg.repeats
    with tqdm(total=total, unit="cell", dynamic_ncols=True) as bar:
        converge_times = await run_table_policies(cfg, rows, bar)
        if "nospec" in cfg.policies:
            await run_nospec(cfg, rows, bar)
    write_rows(rows, cfg.out / "cells.csv")
    return rows, converge_times
