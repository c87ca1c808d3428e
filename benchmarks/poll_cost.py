"""What reading the engine costs the engine: vLLM's /metrics against the plugin's /v1/stats
(issue #34 item 5: the sidecar's price where the table is right; #37 item 3: one road).

One vLLM with the plugin serves the profile's table. Block after block, the same requests (the
client's seed, new each block) run once in each arm, in an order rotating with the block:

- `none`: nothing reads the engine;
- `metrics`: GET vLLM's /metrics every --every-s, what the sidecar does without the plugin's
  counters on /v1/stats (the API server renders its exposition and fetches the plugin's
  counters from EngineCore's admin thread);
- `stats`: GET the plugin's /v1/stats?since=<last seq> every --every-s, what the sidecar does
  with them (counters and step ring in one reply from EngineCore's admin thread).

Per arm against `none`, paired by block: the ratio of the client's output throughput and of the
engine's own step time, geometric means with 95% t-intervals (summary.json; two readers, each
interval at its own 95%, not corrected together), and the runs of fewer than MIN_STEPS engine
steps, kept and named; runs.json keeps every run, the unmeasured
warmup block's too (benchmarks/arm_run.py).

    python -m benchmarks.poll_cost --profile P --out DIR --concurrency 16 --blocks 12
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import shlex
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from benchmarks.arm_run import ArmRun
from benchmarks.client_arms import Arms
from benchmarks.client_bench import bench_parser, printer, run_main
from benchmarks.noharm_summary import MIN_STEPS, arm_throughput, ratio_interval
from benchmarks.policies import engine_args
from benchmarks.scenario import scenario_of, serving
from benchmarks.traffic import Sizes, shapes
from tuner import flags
from tuner.core.engine_client import EngineClient
from tuner.core.errors import InvalidInput
from tuner.launcher import ServerConfig

ARMS = ("none", "metrics", "stats")
SERVED_NAME = ServerConfig.model_fields["served_model_name"].default
say = printer("poll_cost")


@contextlib.asynccontextmanager
async def polling(arm: str, engine: EngineClient, admin: EngineClient,
                  every_s: float) -> AsyncIterator[list[int]]:
    """Reads the engine as the arm says until the block's run ends; yields the reads made."""
    reads: list[int] = []

    async def loop() -> None:
        seq = (await admin.get_stats()).engine_steps
        while True:
            t = time.monotonic()
            if arm == "metrics":
                await engine.get_metrics()
            else:
                seq = max([s.seq for s in (await admin.get_stats(since=seq)).recent_steps],
                          default=seq)
            reads.append(1)
            await asyncio.sleep(max(0.0, every_s - (time.monotonic() - t)))

    task = asyncio.create_task(loop()) if arm != "none" else None
    try:
        yield reads
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class ReaderCost(BaseModel):
    """One reader against none, paired by block: throughput and engine step time ratios with
    their 95% intervals ([None, None] below two blocks), blocks paired, mean run seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    throughput_ratio: float | None
    throughput_ci: list[float | None]
    step_ms_ratio: float | None
    step_ms_ci: list[float | None]
    blocks: int
    run_s: float


class ShortRun(BaseModel):
    """A run with fewer engine steps than the 50-step rule asks."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    block: int
    arm: str
    steps: int


class PollSummary(BaseModel):
    """summary.json: each reader against none."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    arms: dict[str, ReaderCost]
    blocks: int
    every_s: float
    ci_level: float = 0.95
    statistic: str = ("geometric mean of per-block ratios arm / none; 95% Student's t-interval "
                      "on their logs, per reader")
    short_runs: list[ShortRun]


def summarize(runs: list[ArmRun], blocks: list[int], every_s: float) -> PollSummary:
    """Per arm against `none`, paired by block: throughput and engine step time ratios."""
    by: dict[tuple[int, str], ArmRun] = {(b, r.arm): r for b, r in zip(blocks, runs, strict=True)}
    arms: dict[str, ReaderCost] = {}
    for arm in ARMS[1:]:
        pairs = [(by[(b, "none")], by[(b, arm)]) for b in sorted(set(blocks))
                 if (b, "none") in by and (b, arm) in by]
        tput = ratio_interval(pairs, arm_throughput)
        step = ratio_interval(pairs, _step_ms)
        run_s = [sum(p.client.duration for p in r.phases) for _, r in pairs]
        arms[arm] = ReaderCost(throughput_ratio=tput.ratio, throughput_ci=tput.ci,
                               step_ms_ratio=step.ratio, step_ms_ci=step.ci, blocks=tput.n,
                               run_s=round(sum(run_s) / max(len(run_s), 1), 2))
    short = [ShortRun(block=b, arm=r.arm, steps=n) for b, r in zip(blocks, runs, strict=True)
             if (n := sum(p.engine.steps or 0 for p in r.phases)) < MIN_STEPS]
    return PollSummary(arms=arms, blocks=len(set(blocks)), every_s=every_s, short_runs=short)


def _step_ms(run: ArmRun) -> float:
    steps = [(p.engine.step_ms, p.engine.steps) for p in run.phases
             if p.engine.step_ms is not None and p.engine.steps]
    n = sum(s for _, s in steps)
    return sum(m * s for m, s in steps) / n if n else math.nan


async def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    if args.blocks < 2:
        raise InvalidInput(f"--blocks={args.blocks}: give at least 2 (an interval needs two)")
    if args.every_s <= 0:
        raise InvalidInput(f"--every-s={args.every_s:g}: give a positive interval in seconds, e.g. 1")
    s = scenario_of(args, engine_args(()))
    concurrency = flags.ints(args.concurrency, "--concurrency", "16")
    (shape, *_) = shapes(["burst"], Sizes(concurrency=tuple(concurrency), waves=args.waves))
    table = s.profile.build().table
    record: dict[str, Any] = {"command": "python -m benchmarks.poll_cost " + shlex.join(argv),
                              "table": table.to_list(), "shape": shape.name,
                              "every_s": args.every_s, "runs": [], "blocks": [], "warmup": []}
    runs: list[ArmRun] = []
    async with serving(s) as up:
        await up.admin.put_table(table)
        arms = Arms(up.server.url, up.engine, up.admin, {}, dict.fromkeys(ARMS, table),
                    s.model, SERVED_NAME, s.out, args.idle_s)
        for block in range(-1, args.blocks):  # block -1: the engine's one-off costs, unkept
            order = ARMS[max(block, 0) % 3:] + ARMS[:max(block, 0) % 3]
            for arm in order:
                async with polling(arm, up.engine, up.admin, args.every_s) as reads:
                    got = await arms.run(shape, arm, args.seed + block + 1, f"b{block}-{arm}")
                say(f"block {block} {arm:>7}: {arm_throughput(got):8.1f} tok/s, "
                    f"{len(reads)} reads")
                if block < 0:
                    record["warmup"].append(got.model_dump(mode="json"))
                    continue
                runs.append(got)
                record["blocks"].append(block)
                record["runs"].append(got.model_dump(mode="json"))
    summary = summarize(runs, record["blocks"], args.every_s)
    record["summary"] = summary.model_dump(mode="json")
    s.out.mkdir(parents=True, exist_ok=True)
    (s.out / "runs.json").write_text(json.dumps(record, indent=1))
    (s.out / "summary.json").write_text(summary.model_dump_json(indent=1))
    return record


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, "runs/poll-cost")
    ap.add_argument("--concurrency", default="16", help="the burst's --max-concurrency")
    ap.add_argument("--waves", type=int, default=4, help="a burst sends WAVES x its concurrency")
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--every-s", type=float, default=1.0, help="the poll interval (the sidecar's)")
    ap.add_argument("--idle-s", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    rc, record = run_main(sys.argv[1:] if argv is None else argv, ap, run)
    if rc == 0:
        print(json.dumps(record["summary"], indent=1))
    return rc


if __name__ == "__main__":
    sys.exit(main())
