"""`python -m benchmarks`: every policy on one engine, in paired blocks, for a planned number of blocks.

One vLLM with speculation runs every table policy (swapped through the plugin's admin API),
under a stationary load that keeps running across the swaps; `nospec` gets a second vLLM
beside it. Rounds of blocks (benchmarks/design.py) go on until the planned number ran or the
next block would overrun `--budget-s`; the data never decides when to stop, so the verdicts'
error rates hold (benchmarks/stats.py). Every window is written to cells.csv as soon as its block
ends, and the caller's `on_round` rewrites the summary after every round, so a run cut short keeps both.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from benchmarks.cells import TABLES, Window, write_windows
from benchmarks.design import LoadPlan, block_order, full_plan, pair_order
from benchmarks.policies import NIGHTJAR, NOSPEC, PAIRED, policy_tables, start_table, unknown_policies
from benchmarks.scenario import Scenario, Startup, serving
from benchmarks.stateful import FreshBandit, PausedSidecar
from benchmarks.stats import Settings, twin
from benchmarks.window import Measured, Settled, measure, swap
from tuner.core.engine_client import EngineClient
from tuner.load import StationaryLoad


class BenchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario: Scenario                        # the profile, model, drafter, engine flags, replay, out
    loads: list[int] = Field(min_length=1)
    policies: list[str] = Field(min_length=1)
    requests: list[Any] = Field(min_length=1)  # tuner.load.Request pool (benchmarks/workload.py)
    window_s: float = Field(4.0, gt=0)
    warmup_s: float = Field(2.0, ge=0)   # after a load starts, before its first swap
    prime_s: float = Field(2.0, ge=0)    # every load under k=0 and k=K once, unmeasured
    settle_steps: int = Field(8, ge=1)
    temperature: float = 0.0
    log_dir: Path = Path("runs/logs")
    budget_s: float = Field(1800.0, gt=0)
    blocks: int = Field(20, ge=2)           # planned blocks per load (benchmarks/design.py)
    design: dict[str, Any] = {}             # how `blocks` was chosen, for summary.json
    min_steps: int = Field(50, ge=1)        # engine steps a window must hold (window.measure)
    stats: Settings = Settings()
    seed: int = 0
    pair_ref: str = ""                   # the fixed k paired with non-table policies; "" = fixed-kK
    head_to_head: list[tuple[str, str]] = []
    converge_s: float = Field(20.0, ge=0)   # a sidecar's learning before its first window
    learn_s: float = Field(10.0, ge=0)      # the bandit's, before each of its windows
    sidecar_args: tuple[str, ...] = ()
    resume: list[Any] = []                  # windows of an earlier call (its cells.csv) to go on from

    @model_validator(mode="after")
    def _check(self) -> BenchConfig:
        s = self.scenario
        if s.replay is not None:
            s.replay.check_k(s.K)
        n = s.max_num_seqs
        if any(not 1 <= x <= n for x in self.loads):
            raise ValueError(f"loads={self.loads}: each must be in 1..{n} (the profile's max_num_seqs)")
        unknown = unknown_policies(s.profile, self.policies)
        if unknown:  # before any vLLM starts, not at the first block of that policy
            raise ValueError(f"policies {unknown}: not known for this profile; use fixed-k0.."
                             f"fixed-k{s.K}, documented, quarter, tuned, turbospec-style, "
                             f"tuned@tie=0.05, aa:<a table policy>, or {', '.join(PAIRED)}")
        missing = [p for p in self.policies if (b := twin(p)) is not None and b not in self.policies]
        if missing:
            raise ValueError(f"policies {missing}: an A/A needs its twin in --policies too")
        if any(p in PAIRED for p in self.policies) and self.reference not in self.policies:
            raise ValueError(f"pair reference {self.reference}: the non-table policies are paired "
                             "with it, so it must be among --policies")
        foreign = sorted({w.policy for w in self.resume} - set(self.policies))
        if foreign:
            raise ValueError(f"--resume: the earlier windows hold policies {foreign} that this run "
                             "does not measure; resume with the same --policies")
        return self

    @property
    def reference(self) -> str:
        return self.pair_ref or f"fixed-k{self.scenario.K}"

    @property
    def table_policies(self) -> list[str]:
        return [p for p in self.policies if p not in PAIRED]

    @property
    def paired_policies(self) -> list[str]:
        return [p for p in self.policies if p in PAIRED]


@dataclass(slots=True)
class RunInfo:
    rounds: int = 0
    stop_reason: str = "still running (rewritten after every round)"
    wall_s: float = 0.0
    converge_s: dict[str, float | None] = field(default_factory=dict)


OnRound = Callable[[list[Window], RunInfo], None]


class Bench:
    def __init__(self, cfg: BenchConfig, on_round: OnRound) -> None:
        self.cfg, self.on_round = cfg, on_round
        self.tables = policy_tables(cfg.scenario.profile, cfg.policies)
        self.rng = random.Random(cfg.seed)
        self.windows: list[Window] = list(cfg.resume)
        self.info = RunInfo(rounds=1 + max((w.round for w in cfg.resume), default=-1))
        self.t0 = time.monotonic()
        self.engines: dict[str, EngineClient] = {}
        self.runners: dict[str, PausedSidecar | FreshBandit] = {}
        self.admin: EngineClient | None = None
        self._load: StationaryLoad | None = None
        self._load_key: tuple[str, int] | None = None
        self._cost: dict[str, list[float]] = {}   # seconds per table window / per paired block

    async def run(self) -> RunInfo:
        async with contextlib.AsyncExitStack() as stack:
            await self._start(stack)
            stack.push_async_callback(self._stop_load)
            await self._prime()
            await self._rounds()
            self.info.converge_s = {p: r.converged_s for p, r in self.runners.items()}
        self.info.wall_s = time.monotonic() - self.t0
        self.on_round(self.windows, self.info)
        return self.info

    # -- engines -------------------------------------------------------------------------
    async def _start(self, stack: contextlib.AsyncExitStack) -> None:
        cfg = self.cfg
        up = await stack.enter_async_context(serving(cfg.scenario, log_dir=cfg.log_dir))
        self.admin, self.engines["spec"] = up.admin, up.engine
        if NOSPEC in cfg.policies:
            plain = await stack.enter_async_context(
                serving(cfg.scenario, Startup(is_speculative=False), cfg.log_dir))
            self.engines[NOSPEC] = plain.engine
        policy = await up.admin.get_policy()
        for p in cfg.paired_policies:
            runner: PausedSidecar | FreshBandit
            if p == NIGHTJAR:
                runner = FreshBandit(start_table(p, self.tables), up.admin, cfg.learn_s)
            elif p != NOSPEC:
                runner = PausedSidecar(start_table(p, self.tables), up.admin, policy,
                                       cfg.scenario.profile_path, cfg.log_dir, up.server.url, cfg.converge_s,
                                       cfg.sidecar_args)
            else:
                continue
            self.runners[p] = runner
            stack.push_async_callback(runner.close)

    async def _ensure_load(self, engine: str, n: int) -> StationaryLoad:
        if self._load is None or self._load_key != (engine, n):
            await self._stop_load()
            url = self.engines[engine].engine_url
            self._load = StationaryLoad(url, self.cfg.requests, n, self.cfg.temperature,
                                        seed=self.rng.randrange(2**31))
            await self._load.__aenter__()
            self._load_key = (engine, n)
            await asyncio.sleep(self.cfg.warmup_s)
        return self._load

    async def _stop_load(self) -> None:
        if self._load is not None:
            await self._load.stop()
        self._load, self._load_key = None, None

    async def _prime(self) -> None:
        """Every load once under k=0 and k=K (and without speculation), unmeasured: one-off costs
        (JIT for new batch shapes, allocator growth) off whichever policy would come first."""
        if self.cfg.prime_s <= 0:
            return
        assert self.admin is not None
        for n in self.cfg.loads:
            await self._ensure_load("spec", n)
            for k in sorted({0, self.cfg.scenario.K}):
                await swap(self.admin, self.tables[f"fixed-k{k}"], self.cfg.settle_steps)
                await asyncio.sleep(self.cfg.prime_s)
            if NOSPEC in self.engines:
                await self._ensure_load(NOSPEC, n)
                await asyncio.sleep(self.cfg.prime_s)

    # -- rounds --------------------------------------------------------------------------
    async def _rounds(self) -> None:
        cfg = self.cfg
        while True:
            r = self.info.rounds
            if r >= cfg.blocks:
                self.info.stop_reason = f"the {cfg.blocks} planned blocks ran"
                return
            plans = full_plan(cfg.loads, cfg.table_policies, cfg.paired_policies)
            loads = list(plans)
            self.rng.shuffle(loads)
            for n in loads:
                if not await self._load_blocks(r, n, plans[n]):
                    self.info.stop_reason = (f"--budget-s {cfg.budget_s:.0f} spent after {r} of "
                                             f"{cfg.blocks} planned blocks")
                    return
            self.info.rounds += 1
            self.info.wall_s = time.monotonic() - self.t0
            self.on_round(self.windows, self.info)

    def _fits(self, p: LoadPlan) -> bool:
        """Whether the next blocks at a load end inside the budget, at the costs seen so far."""
        def cost(key: str, guess: float) -> float:
            seen = self._cost.get(key)
            return max(seen[-5:]) if seen else guess
        w = self.cfg.window_s
        need = self.cfg.warmup_s + len(p.tables) * cost(TABLES, w + 1.0)
        need += sum(cost(g, 2 * w + 2 + self.cfg.warmup_s + self.cfg.converge_s) for g in p.paired)
        return time.monotonic() + need <= self.t0 + self.cfg.budget_s

    async def _load_blocks(self, r: int, n: int, p: LoadPlan) -> bool:
        if not self._fits(p):
            return False
        if p.tables:
            await self._table_block(r, n, p.tables)
        for g in block_order(p.paired, self.rng):
            await self._paired_block(r, n, g)
        write_windows(self.windows, self.cfg.scenario.out / "cells.csv")
        return True

    # -- blocks --------------------------------------------------------------------------
    async def _table_block(self, r: int, n: int, policies: list[str]) -> None:
        assert self.admin is not None
        load = await self._ensure_load("spec", n)
        block = self._next_block()
        for pos, p in enumerate(block_order(policies, self.rng)):
            t = time.monotonic()
            settled = await swap(self.admin, self.tables[p], self.cfg.settle_steps)
            m = await measure(self.engines["spec"], self.admin, load, self.cfg.window_s,
                              self.cfg.min_steps)
            self._record(block, r, n, TABLES, pos, p, settled, m)
            self._cost.setdefault(TABLES, []).append(time.monotonic() - t)

    async def _paired_block(self, r: int, n: int, policy: str) -> None:
        assert self.admin is not None
        t, block = time.monotonic(), self._next_block()
        for pos, p in enumerate(pair_order(policy, self.cfg.reference, r)):
            engine = NOSPEC if p == NOSPEC else "spec"
            load = await self._ensure_load(engine, n)
            if p == NOSPEC:
                settled = Settled(None, 0.0, 0)
            elif p in self.runners:
                settled = await self.runners[p].enter(self.cfg.settle_steps)
            else:
                settled = await swap(self.admin, self.tables[p], self.cfg.settle_steps)
            m = await measure(self.engines[engine], self.admin if engine == "spec" else None,
                              load, self.cfg.window_s, self.cfg.min_steps)
            if p in self.runners:
                await self.runners[p].leave()
            self._record(block, r, n, policy, pos, p, settled, m)
        self._cost.setdefault(policy, []).append(time.monotonic() - t)

    def _next_block(self) -> int:
        return 1 + max((w.block for w in self.windows), default=-1)

    def _record(self, block: int, r: int, n: int, group: str, pos: int, policy: str,
                settled: Settled, m: Measured) -> None:
        """The window, after any measured before it and discarded (with their reason)."""
        for bad, why in m.discarded:
            self._record_one(block, r, n, group, pos, policy, settled, bad, why)
        self._record_one(block, r, n, group, pos, policy, settled, m, "")

    def _record_one(self, block: int, r: int, n: int, group: str, pos: int, policy: str,
                    settled: Settled, m: Measured, dropped: str) -> None:
        st = m.steps
        self.windows.append(Window(
            block=block, round=r, load=n, group=group, position=pos, policy=policy,
            tokens_per_s=m.tokens_per_s, window_s=m.window_s,
            started_s=round(time.monotonic() - self.t0 - m.window_s, 3),
            client_completed=m.client_completed, client_tokens_per_s=m.client_tokens_per_s,
            table_version=m.table_version, table_changes=m.table_changes,
            settle_s=round(settled.seconds, 3), settle_steps=settled.steps,
            steps=st.steps if st else None, step_ms=st.step_ms if st else None,
            requests_per_step=st.requests_per_step if st else None,
            tokens_per_step=st.tokens_per_step if st else None, table=m.table, dropped=dropped))


async def bench(cfg: BenchConfig, on_round: OnRound = lambda w, i: None) -> tuple[list[Window], RunInfo]:
    b = Bench(cfg, on_round)
    info = await b.run()
    return b.windows, info
