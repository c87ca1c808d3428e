"""`tabletune tune`: measure T(B, k) for k = 0..K and acceptance, build the table, save the profile.

Two ways to run the engine, one way to measure (tuner/cells.py):
- one vLLM per k (the paper's): each started with the one-range table [[1, max_num_seqs, k]];
- `--one-server`: one vLLM started with a table holding every k (the GPU V2 runner captures full
  CUDA graphs only for the startup table's K values), each k's one-range table swapped in
  through the plugin, so a batch size's k's are timed in interleaved rounds.
Both use reject-all (every draft rejected after the full draft and verify work, so a batch of B
stays at B) and no prefix caching. Every finished batch size is saved at once: a rerun with
the same --out continues where it stopped, and Ctrl-C leaves no vLLM running.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from tqdm import tqdm

from tuner import findings
from tuner.acceptance_run import measure_acceptance
from tuner.core.admin_api import TableReply
from tuner.cells import measure_batch, timing_prompts, todo
from tuner.config import TuneConfig, engine_info
from tuner.core.engine_client import AdminRejected, EngineClient
from tuner.engine_defaults import plugin_env
from tuner.progress import Progress
from tuner.core.errors import EngineUnavailable
from tuner.core.graphs import grid_points
from tuner.core.honor import edge_plan
from tuner.honor_run import edge_cells, from_profile
from tuner.launcher import ServerConfig, SpeculativeSpec, VllmServer, free_port, launch
from tuner.core.profile import GraphInfo, Profile, load
from tuner.sweep import CellTimer
from tuner.core.table import Table, every_k_table

__all__ = ["run", "summary", "tune"]

log = logging.getLogger("tabletune.tune")


def start_profile(cfg: TuneConfig) -> Profile:
    """The profile at cfg.out to resume (checked to measure the same thing), or a new one."""
    info = engine_info(cfg)
    if cfg.out.exists() and not cfg.fresh:
        profile = load(cfg.out)
        profile.check_matches(info, cfg.grid, cfg.workload)
        # cells measured from here on follow this run's repeat rule; the report states the last
        profile.max_repeats, profile.ci_target = cfg.repeat_limit, cfg.ci_target
        profile.tie, profile.confidence, profile.min_width = cfg.tie, cfg.confidence, cfg.min_width
        profile.min_k = cfg.min_k
        return profile  # (the caller measures on profile.grid: it may hold refined points)
    return Profile(created_at=time.time(), engine=info, grid=cfg.grid,
                   decode_tokens=cfg.decode_tokens, repeats=cfg.repeats, tie=cfg.tie,
                   confidence=cfg.confidence, min_width=cfg.min_width, min_k=cfg.min_k,
                   workload=cfg.workload,
                   max_repeats=cfg.repeat_limit, ci_target=cfg.ci_target)


def server_for(cfg: TuneConfig, k: int | None, admin_port: int, reject_all: bool) -> ServerConfig:
    """The engine for k (one-range table [[1, max, k]]), or with k=None for every k, swapped later."""
    table = (every_k_table(cfg.num_speculative_tokens, cfg.max_num_seqs) if k is None
             else Table.from_list([[1, cfg.max_num_seqs, k]]))
    spec = SpeculativeSpec(method=cfg.method, num_speculative_tokens=cfg.num_speculative_tokens,
                           table=table, draft_model=str(cfg.drafter) if cfg.drafter else None,
                           extra=cfg.emulate.speculative_extra() if cfg.emulate else {})
    return ServerConfig(model=cfg.model, served_model_name=cfg.served_model_name,
                        max_num_seqs=cfg.max_num_seqs, speculative=spec,
                        env=plugin_env(admin_port, reject_all=reject_all),
                        extra_args=("--no-enable-prefix-caching", *cfg.extra_args))


def adopt_graphs(cfg: TuneConfig, profile: Profile, info: TableReply) -> TuneConfig:
    """Record what the engine says of its CUDA graphs and token budget, and measure both sides
    of every boundary they put inside the grid (tuner/core/graphs.py): a cliff found before it is
    interpolated over. The points join the profile as its own (like --refine's)."""
    if profile.graph is None and (info.cudagraph_capture_sizes or info.max_num_batched_tokens):
        profile.graph = GraphInfo(capture_sizes=info.cudagraph_capture_sizes or [],
                                  max_num_batched_tokens=info.max_num_batched_tokens)
    extra = sorted(set(grid_points(cfg.grid, profile.graph_boundaries(), cfg.max_num_seqs))
                   - set(cfg.grid)) if profile.graph else []
    if not extra:
        return cfg
    log.info("the engine's CUDA graphs or token budget end inside the grid: measuring B=%s too", extra)
    profile.grid = sorted({*profile.grid, *extra})
    profile.refined = sorted({*profile.refined, *extra})
    profile.save(cfg.out)
    return cfg.model_copy(update={"grid": profile.grid})


class Engine:
    """One running vLLM the tuner measures on, with its plugin: table swaps and acceptance."""

    def __init__(self, cfg: TuneConfig, profile: Profile, bar: tqdm, server: VllmServer,
                 admin: EngineClient) -> None:
        self.cfg, self.profile, self.bar, self.server, self.admin = cfg, profile, bar, server, admin

    async def swap(self, k: int) -> None:
        """Put k's one-range table into the engine (it applies at the next step)."""
        try:
            await self.admin.put_table(Table.from_list([[1, self.cfg.max_num_seqs, k]]))
        except AdminRejected as exc:
            raise EngineUnavailable(f"the plugin refused the k={k} table: {exc}") from exc

    async def keep(self, k: int) -> None:
        """The swap of an engine that only ever runs one k: nothing to do."""

    async def acceptance(self) -> None:
        """a_i at k = K on the sample prompts, reject-all lifted for it and restored after."""
        self.bar.set_description(f"k={self.cfg.num_speculative_tokens}: acceptance")
        cfg = self.cfg
        self.profile.acceptance = await measure_acceptance(
            self.server, self.admin.admin_url, cfg.acceptance_prompts, cfg.num_speculative_tokens,
            cfg.temperature, cfg.acceptance_max_tokens, concurrency=cfg.max_num_seqs,
            replay=cfg.emulate, restore_reject_all=True)
        self.profile.save(cfg.out)

    async def check_edge(self) -> None:
        """The honor check's table with an edge, below and above it (the sweep's cells ran
        one-range tables); once per profile."""
        cfg, profile = self.cfg, self.profile
        plan = edge_plan(cfg.grid, cfg.num_speculative_tokens, cfg.max_num_seqs)
        if plan is None or (profile.honor is not None and profile.honor.edge):
            return
        self.bar.set_description(f"honor: edge table {plan.table.to_list()}")
        runner = (await self.admin.get_table()).runner
        async with CellTimer(self.server, self.admin.admin_url, timing_prompts(cfg)) as timer:
            edge = await edge_cells(timer, self.admin, plan, cfg.num_speculative_tokens,
                                    cfg.decode_tokens)
        profile.honor = from_profile(profile, edge=edge, runner=runner)
        profile.save(cfg.out)

    async def measure(self, cfg: TuneConfig, ks: list[int], swap: Any) -> None:
        """Every unfinished cell of ks on cfg.grid, batch size by batch size."""
        async with CellTimer(self.server, self.admin.admin_url, timing_prompts(cfg)) as timer:
            for k in [k for k in ks if todo(cfg, self.profile, k)]:
                self.bar.set_description(f"k={k}: warm-up")
                await swap(k)
                await timer.warm_up(sorted({cfg.grid[0], cfg.grid[-1]}))
            for B in cfg.grid:
                due = [k for k in ks if B in todo(cfg, self.profile, k)]
                if due:
                    await measure_batch(cfg, self.profile, B, due, timer, swap, self.bar)


async def one_vllm_per_k(cfg: TuneConfig, profile: Profile, bar: tqdm) -> None:
    """The paper's way: a vLLM per k; acceptance on the k = K one (first under a workload:
    the timed requests' lifetimes need τ(k)). Under a workload K is measured first."""
    K = cfg.num_speculative_tokens
    ks = [K, *range(K)] if cfg.workload is not None else list(range(K + 1))
    for k in ks:
        wants_acceptance = k == K and profile.acceptance is None
        if not todo(cfg, profile, k) and not wants_acceptance:
            continue
        admin_port, t0 = free_port(), time.monotonic()
        bar.set_description(f"k={k}: starting vLLM")
        async with launch(server_for(cfg, k, admin_port, reject_all=True), log_dir=cfg.log_dir) as server, \
                EngineClient(server.url, f"http://127.0.0.1:{admin_port}", timeout_s=30.0) as admin:
            profile.timings_s[f"server_start_k{k}"] = server.ready_after_s or 0.0
            cfg = adopt_graphs(cfg, profile, await admin.get_table())
            engine = Engine(cfg, profile, bar, server, admin)
            if wants_acceptance and cfg.workload is not None:
                await engine.acceptance()
            await engine.measure(cfg, [k], engine.keep)
            if profile.acceptance is None and k == K:
                await engine.acceptance()
        profile.timings_s[f"k{k}"] = profile.timings_s.get(f"k{k}", 0.0) + time.monotonic() - t0


async def one_server(cfg: TuneConfig, profile: Profile, bar: tqdm, engine: Engine) -> None:
    """--one-server: every k on the one engine, a batch size's k's in interleaved rounds."""
    K = cfg.num_speculative_tokens
    if cfg.workload is not None and profile.acceptance is None:
        await engine.swap(K)  # first: τ(k) sets the timed requests' lifetimes
        await engine.acceptance()
    t0 = time.monotonic()
    await engine.measure(cfg, list(range(K + 1)), engine.swap)
    profile.timings_s["cells"] = profile.timings_s.get("cells", 0.0) + time.monotonic() - t0
    if profile.acceptance is None:
        await engine.swap(K)
        await engine.acceptance()


def _rebuild(profile: Profile) -> None:
    profile.table = profile.build().table.to_list()


def _pending(cfg: TuneConfig, profile: Profile) -> bool:
    return profile.acceptance is None or any(todo(cfg, profile, k)
                                             for k in range(cfg.num_speculative_tokens + 1))


async def measure_and_refine(cfg: TuneConfig, profile: Profile, bar: tqdm, measure: Any) -> None:
    """Measure cfg.grid, build the table, then bisect each step-time cliff that holds a table
    edge (up to cfg.refine_rounds times): interpolation cannot see a step between grid points.
    Points join the profile's grid only once every k has them, so a run cut mid-round leaves a
    complete profile (the rerun bisects the same interval)."""
    await measure(cfg)
    _rebuild(profile)
    while profile.refine_rounds < cfg.refine_rounds:
        extra = findings.new_refine_points(profile)
        if not extra:
            break
        log.info("a table edge lies inside a step-time cliff: measuring B=%s as well", extra)
        bar.total += len(extra) * (cfg.num_speculative_tokens + 1) * cfg.repeats
        bar.refresh()
        await measure(cfg.model_copy(update={"grid": sorted({*profile.grid, *extra})}))
        profile.grid = sorted({*profile.grid, *extra})
        profile.refined = sorted({*profile.refined, *extra})
        profile.refine_rounds += 1
        _rebuild(profile)
        profile.save(cfg.out)


async def _sweep_one_server(cfg: TuneConfig, profile: Profile, bar: tqdm) -> None:
    if not _pending(cfg, profile):
        _rebuild(profile)  # cheap; a cut run may have missed it
        if not (profile.refine_rounds < cfg.refine_rounds and findings.new_refine_points(profile)):
            return
    admin_port = free_port()
    bar.set_description("starting vLLM")
    async with launch(server_for(cfg, None, admin_port, reject_all=True), log_dir=cfg.log_dir) as server, \
            EngineClient(server.url, f"http://127.0.0.1:{admin_port}", timeout_s=30.0) as admin:
        profile.timings_s["server_start_shared"] = server.ready_after_s or 0.0
        cfg = adopt_graphs(cfg, profile, await admin.get_table())
        engine = Engine(cfg, profile, bar, server, admin)
        await measure_and_refine(cfg, profile, bar, lambda c: one_server(c, profile, bar, engine))
        await engine.check_edge()


async def tune(cfg: TuneConfig, with_preflight: bool = False) -> Profile:
    """Measure, build and save; resumes a profile at cfg.out unless cfg.fresh."""
    from tuner.preflight import preflight

    profile = start_profile(cfg)
    cfg = cfg.model_copy(update={"grid": profile.grid})  # a resumed profile may hold refined points
    if profile.finished_k():
        log.info("resuming %s: k=%s already measured", cfg.out, sorted(profile.finished_k()))
    remaining = sum(len(todo(cfg, profile, k)) for k in range(cfg.num_speculative_tokens + 1))
    t0 = time.monotonic()
    with Progress(total=remaining * cfg.repeats, unit="cell-rep", dynamic_ncols=True) as bar:
        if cfg.one_server:
            await _sweep_one_server(cfg, profile, bar)
        else:
            await measure_and_refine(cfg, profile, bar, lambda c: one_vllm_per_k(c, profile, bar))
    assert profile.acceptance is not None and profile.table is not None
    profile.honor = from_profile(profile)  # the sweep's cells, with the edge table's if measured
    if with_preflight and profile.preflight is None:
        await preflight(cfg, profile)
    profile.timings_s["total_this_run"] = time.monotonic() - t0
    profile.save(cfg.out)
    return profile


def run(cfg: TuneConfig, with_preflight: bool = False) -> Profile:
    return asyncio.run(tune(cfg, with_preflight))


def summary(profile: Profile) -> dict[str, Any]:
    """What `tabletune tune` prints at the end: the table, its evidence and its warnings."""
    assert profile.table is not None
    choice = profile.build()
    gap = findings.client_engine_gap(profile)
    honor = profile.honor
    return {"recommendation": profile.recommendation().model_dump(),
            "table": profile.table,
            "speculative_config": profile.speculative_config(Table.from_list(profile.table)),
            "acceptance": profile.acceptance.a if profile.acceptance else None,
            "evidence": findings.edge_lines(choice),
            "cells": findings.interval_line(profile),
            "client_vs_engine_median_gap": None if gap is None else round(gap, 3),
            "honor": None if honor is None else {"verified": honor.verified, "drafted": honor.drafted,
                                                 "finding": honor.finding},
            "warnings": (findings.grid_warnings(profile) + findings.cliff_lines(profile)
                         + findings.batch_warnings(profile) + findings.honor_warnings(profile)),
            "timings_s": {k: round(v, 1) for k, v in profile.timings_s.items()}}
