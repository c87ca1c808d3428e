"""What the running sidecar costs the engine it watches, taken apart (issue #34 items 4 and 5).

One vLLM with the plugin under a steady closed loop of N clients (engine-clock throughput,
benchmarks/window.py), and two `tabletune sidecar` processes beside it, each frozen (SIGSTOP)
outside its own windows (benchmarks/stateful.PausedSidecar). Three arms take turns in every
cycle, in an order rotating with the cycle (a Latin square, so no arm always follows another):

- `off`: both sidecars frozen, the start table and the plain policy (no exploration);
- `watch`: the sidecar in `--dry-run`: its scrapes of /metrics and of the plugin's step ring,
  its estimates and rebuilds, no exploration, no push. What observing alone costs;
- `full`: the sidecar as a user starts it (its defaults): the rotation and duels on, pushes
  allowed. What observing and exploring cost together (and what a push won or lost).

Per cycle, the ratio of each arm's throughput to `off`'s; over cycles the geometric mean and
its 95% t-interval on the logs (benchmarks/inference.py). A steady load is the easy case for
the decisions but the precise one for a running cost: the do-no-harm bench
(benchmarks/noharm.py) is the realistic-traffic test. Beside throughput: the engine's mean step
time per arm, and the awake sidecar's CPU seconds per window second (from /proc).

    python -m benchmarks.sidecar_cost --profile benchmarks/results/cpu-tiny/profile.json \\
        --out runs/sidecar-cost --loads 4,16 --cycles 12 --window-s 15
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shlex
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.client_bench import bench_parser, run_main
from benchmarks.scenario import scenario_of, serving
from benchmarks.inference import log_ratio_interval
from benchmarks.policies import engine_args as bench_engine_args
from benchmarks.stateful import USER_DEFAULTS, PausedSidecar
from benchmarks.window import measure
from tuner import flags
from tuner.core.engine_client import EngineClient
from tuner.core.errors import InvalidInput
from tuner.core.table import Table
from tuner.load import StationaryLoad

ARMS = ("off", "watch", "full")
SIDECAR_ARGS = {"watch": ("--dry-run",), "full": ()}  # after the user's defaults
SETTLE_S = 2.0  # after an arm change: the thawed sidecar's first scrape, the policy in force


class CostWindow(BaseModel):
    """One arm's measured window: the engine's throughput and step time, the sidecar's CPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    load: int
    cycle: int
    arm: str
    tokens_per_s: float
    window_s: float
    step_ms: float | None            # None: the window had no plugin step counts
    requests_per_step: float | None = None
    sidecar_cpu_s: float             # the awake sidecar's user + system seconds in the window
    table_changes: int
    table: str | None = None         # the engine's table at the window's end (wire form)


class CostRecord(BaseModel):
    """cost.json: the command, the start table and every measured window, written per cycle."""

    model_config = ConfigDict(extra="forbid")
    schema_: int = Field(1, alias="schema")
    command: str
    start_table: list[list[int]]
    window_s: float
    windows: list[CostWindow] = []


def order(cycle: int) -> tuple[str, ...]:
    """The arms' order in `cycle`: a rotation, so each arm comes first, second and third."""
    i = cycle % len(ARMS)
    return ARMS[i:] + ARMS[:i]


class CostRow(BaseModel):
    """One load and arm against `off` (summary.json's `loads`): the throughput ratio over the
    cycles with both, its 95% interval (None: fewer than two cycles), the mean step time
    ratio, the awake sidecar's share of one core and the table's changes."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    load: int
    arm: str
    cycles: int
    ratio: float | None
    ci: list[float | None]
    step_ms_ratio: float | None
    sidecar_cpu_share: float | None
    table_changes: int


class CostSummary(BaseModel):
    """summary.json: a row per load and arm."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    loads: list[CostRow]


def summarize(windows: Sequence[CostWindow]) -> CostSummary:
    """Per load and arm: the ratio to `off` over cycles with both, its 95% interval, mean step
    time ratio and the sidecar's CPU share. Pure."""
    loads: list[CostRow] = []
    for n in sorted({w.load for w in windows}):
        by_cycle: dict[int, dict[str, CostWindow]] = {}
        for w in windows:
            if w.load == n:
                by_cycle.setdefault(w.cycle, {})[w.arm] = w
        for arm in ARMS[1:]:
            both = [c for c in by_cycle.values() if arm in c and "off" in c]
            logs = [math.log(c[arm].tokens_per_s / c["off"].tokens_per_s) for c in both]
            ratio, ci = log_ratio_interval(logs)
            step_logs = [math.log(a / o) for c in both
                         if (a := c[arm].step_ms) and (o := c["off"].step_ms)]
            loads.append(CostRow(
                load=n, arm=arm, cycles=len(both), ratio=ratio, ci=ci,
                step_ms_ratio=log_ratio_interval(step_logs)[0],
                sidecar_cpu_share=_mean([c[arm].sidecar_cpu_s / c[arm].window_s for c in both]),
                table_changes=sum(c[arm].table_changes for c in both)))
    return CostSummary(loads=loads)


def _mean(xs: Sequence[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


class Arms:
    """The engine's two sidecars and which of them is awake."""

    def __init__(self, sidecars: dict[str, PausedSidecar], admin: EngineClient, start: Table,
                 plain: Any) -> None:
        self.sidecars, self.admin, self.start, self.plain = sidecars, admin, start, plain
        self.awake: str | None = None

    async def enter(self, arm: str) -> None:
        if self.awake == arm:
            return
        if self.awake is not None:
            await self.sidecars[self.awake].leave()
            self.awake = None
        if (await self.admin.get_table()).parsed_table() != self.start:
            await self.admin.put_table(self.start)  # a full arm's push stays in its arm
        if arm in self.sidecars:
            await self.sidecars[arm].enter(settle_steps=0)
            self.awake = arm

    def cpu_s(self, arm: str) -> float:
        """The arm's sidecar's CPU seconds so far (0: the arm has none)."""
        s = self.sidecars.get(arm)
        return 0.0 if s is None else s.cpu_s()

    async def close(self) -> None:
        for s in self.sidecars.values():
            await s.close()


async def run(args: argparse.Namespace, argv: list[str]) -> CostRecord:
    scenario = scenario_of(args, bench_engine_args(tuple(args.engine_arg or ())))
    out, profile_path, profile = scenario.out, scenario.profile_path, scenario.profile
    out.mkdir(parents=True, exist_ok=True)
    start = flags.table(args.start_table, "--start-table") if args.start_table else profile.build().table
    pool = scenario.requests(args.prompt_tokens, args.max_tokens, args.mix)
    record = CostRecord(command="python -m benchmarks.sidecar_cost " + shlex.join(argv),
                        start_table=start.to_list(), window_s=args.window_s)
    t0 = time.monotonic()
    async with serving(scenario) as up:
        server, admin, engine = up.server, up.admin, up.engine
        await admin.put_table(start)
        plain = await admin.get_policy()
        sidecars = {arm: PausedSidecar(start, admin, plain, profile_path, out / "logs", server.url,
                                       converge_s=0.0, args=(*SIDECAR_ARGS[arm],
                                                             *(args.sidecar_arg or ())),
                                       base=USER_DEFAULTS)
                    for arm in ARMS[1:]}
        arms = Arms(sidecars, admin, start, plain)
        try:
            for n in (int(x) for x in args.loads.split(",")):
                async with StationaryLoad(server.url, pool, n, seed=n) as traffic:
                    for cycle in range(-1, args.cycles):  # cycle -1: starts and warms, unmeasured
                        if time.monotonic() - t0 > args.budget_s:
                            say(f"budget: stopping at N={n} cycle {cycle}")
                            break
                        for arm in order(max(cycle, 0)):
                            w = await window(arms, arm, engine, admin, traffic, args.window_s,
                                             n, cycle)
                            if cycle >= 0:
                                record.windows.append(w)
                            say(f"N={n} cycle {cycle} {arm:>5}: {w.tokens_per_s:8.1f} tok/s, "
                                f"step {w.step_ms} ms, sidecar CPU {w.sidecar_cpu_s} s")
                        if cycle >= 0:
                            save(out, record)
        finally:
            await arms.close()
            save(out, record)
    return record


async def window(arms: Arms, arm: str, engine: EngineClient, admin: EngineClient,
                 traffic: StationaryLoad, window_s: float, load: int, cycle: int) -> CostWindow:
    """One arm's window: enter it, settle, measure; the awake sidecar's CPU meanwhile."""
    await arms.enter(arm)
    await asyncio.sleep(SETTLE_S)
    c0 = arms.cpu_s(arm)
    m = await measure(engine, admin, traffic, window_s)
    steps = m.steps
    return CostWindow(load=load, cycle=cycle, arm=arm, tokens_per_s=round(m.tokens_per_s, 3),
                      window_s=round(m.window_s, 3),
                      step_ms=round(steps.step_ms, 4) if steps and steps.step_ms else None,
                      requests_per_step=round(steps.requests_per_step, 3) if steps else None,
                      sidecar_cpu_s=round(arms.cpu_s(arm) - c0, 3),
                      table_changes=m.table_changes, table=m.table)


def save(out: Path, record: CostRecord) -> None:
    (out / "cost.json").write_text(record.model_dump_json(by_alias=True, indent=1))
    (out / "summary.json").write_text(summarize(record.windows).model_dump_json(indent=1))


def say(text: str) -> None:
    print(f"sidecar_cost: {text}", file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    ap = bench_parser(__doc__, "runs/sidecar-cost")
    ap.add_argument("--loads", default="4,16", help="closed-loop clients, one load after another")
    ap.add_argument("--cycles", type=int, default=12, help="measured cycles per load")
    ap.add_argument("--window-s", type=float, default=15.0)
    ap.add_argument("--budget-s", type=float, default=3600.0, help="no cycle starts after this")
    ap.add_argument("--mix", choices=("steady", "chat"), default="chat",
                    help="request lengths (benchmarks/workload.py)")
    ap.add_argument("--prompt-tokens", type=int, default=96)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--start-table", help="JSON table (default: the profile's, by this tuner's rule)")
    ap.add_argument("--sidecar-arg", action="append",
                    help="a flag after both sidecars' defaults, repeatable (default: none)")
    flags.add_engine_flags(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    def start(args: argparse.Namespace, argv_: list[str]) -> Coroutine[Any, Any, CostRecord]:
        for flag, value in (("--cycles", args.cycles), ("--window-s", args.window_s)):
            if value <= 0:
                raise InvalidInput(f"{flag}={value}: must be > 0")
        flags.ints(args.loads, "--loads", "4,16")
        return run(args, argv_)

    rc, record = run_main(sys.argv[1:] if argv is None else argv, parser(), start)
    if rc:
        return rc
    print(summarize(record.windows).model_dump_json(indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
