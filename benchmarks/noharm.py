"""Do no harm: the table alone against the table with the sidecar, under realistic traffic
driven by vLLM's own benchmark client (issue #34 item 5; #38 item 0 on the H200).

One vLLM with the plugin starts on the START TABLE, the one the profile's tuner chooses
(`tabletune table PROFILE`). Then, block after block, every traffic shape (benchmarks/traffic.py:
bursts, bursty Poisson arrivals, a ramp up and down, mixed lengths) runs once in each arm
(benchmarks/client_arms.py), in the order table-sidecar in even blocks and sidecar-table in
odd ones, both arms on the same requests (the client's seed; a new seed each block). The
sidecar is the real `tabletune sidecar` with the user's defaults (`--profile` and nothing
else; `--sidecar-arg` appends flags), one process for the whole call, frozen outside its own
arms (thawed, its catch-up tick ends before the arm's runs start). Before the first block,
`--warmup-rounds` rounds of every shape in both arms, unmeasured: the engine's one-off costs,
and the sidecar's first learning.

Per shape, summary.json holds the ratio sidecar / table of the client's output throughput with
its 95% interval, and the sidecar's pushes, minutes and detected changes
(benchmarks/noharm_summary.py). noharm.json holds every run: the client's fields, the engine's
counters around it, what the sidecar did; runs/ holds the client's whole result of each run.
Both are written after every block; `--budget-s` ends the call before a block that would not
fit, and `--resume` adds blocks to an existing --out (a new engine and sidecar, warmed again).

    python -m benchmarks.noharm --profile PROFILE --out DIR --shapes burst,poisson,ramp,mixed \\
        --blocks 6 --budget-s 3600
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from dataclasses import dataclass
from typing import Any

from benchmarks import client_bench
from benchmarks.arm_run import ArmRun
from benchmarks.client_bench import (Blocks, add_traffic_flags, bench_parser, blocks_of,
                                     keep_log, next_part, printer, recorded, run_blocks, run_main,
                                     run_tag, shape_meta, traffic)
from benchmarks.client_record import NoharmMeta, NoharmRecord, SizesMeta, whole
from benchmarks.design import rotated
from benchmarks.client_arms import Arms
from benchmarks.noharm_summary import ARMS, arm_throughput, summarize, summary
from benchmarks.policies import engine_args as bench_engine_args
from benchmarks.scenario import Scenario, scenario_of, serving
from benchmarks.stateful import USER_DEFAULTS, PausedSidecar
from benchmarks.traffic import Shape, Sizes
from tuner import flags
from tuner.core.errors import InvalidInput, InvalidTable
from tuner.core.table import Table, check_for_engine
from tuner.launcher import ServerConfig

SERVED_NAME = ServerConfig.model_fields["served_model_name"].default


@dataclass(frozen=True, slots=True)
class Config:
    scenario: Scenario
    shapes: tuple[Shape, ...]
    sizes: Sizes
    start: Table
    blocks: Blocks
    idle_s: float
    resume: bool
    sidecar_args: tuple[str, ...]
    command: str


def config(args: argparse.Namespace, argv: list[str]) -> Config:
    """The flags, checked: InvalidInput names the flag, its value and the fix."""
    # both arms send the same prompts: vLLM's prefix cache would favour whichever arm runs second
    extra = bench_engine_args(tuple(args.engine_arg or ()))
    scenario = scenario_of(args, extra)
    profile = scenario.profile
    shapes_, sizes = traffic(args, extra)
    start = (flags.table(args.start_table, "--start-table") if args.start_table
             else profile.build().table)
    try:
        check_for_engine(start, profile.K, profile.engine.max_num_seqs)
    except InvalidTable as exc:
        raise InvalidInput(f"--start-table={args.start_table!r}: {exc}") from None
    return Config(scenario, shapes_, sizes, start, blocks_of(args), args.idle_s, args.resume,
                  tuple(args.sidecar_arg or ()), "python -m benchmarks.noharm " + shlex.join(argv))


def meta(cfg: Config) -> NoharmMeta:
    s = cfg.scenario
    return NoharmMeta(command=cfg.command,
                      profile=str(s.profile_path), model=s.profile.engine.model,
                      served_name=SERVED_NAME, start_table=cfg.start.to_list(),
                      profile_table=s.profile.table, engine=whole(s.profile.engine),
                      shapes=shape_meta(cfg.shapes),
                      sizes=SizesMeta.model_validate(dataclasses.asdict(cfg.sizes)),
                      idle_s=cfg.idle_s, seed=cfg.blocks.seed,
                      emulate=list(s.replay.rates) if s.replay else None,
                      sidecar=["tabletune", "sidecar", "--profile", str(s.profile_path),
                               *USER_DEFAULTS, *cfg.sidecar_args],
                      engine_args=list(s.engine_args), parts=[])


def record_for(cfg: Config) -> NoharmRecord:
    """A new record, or (--resume) the one in --out, whose shapes must be this command's."""
    fresh = NoharmRecord(schema_=1, meta=meta(cfg), runs=[], warmup=[])
    return client_bench.record_for(cfg.scenario.out / "noharm.json", fresh, cfg.resume, ("shapes",))


def save(cfg: Config, record: NoharmRecord) -> dict[str, Any]:
    return client_bench.save(cfg.scenario.out / "noharm.json", record, summarize)


say = printer("noharm")


async def one_round(arms: Arms, cfg: Config, block: int, seed: int,
                    part: int) -> list[tuple[int, ArmRun]]:
    """Every shape once in each arm: shapes in an order rotating with the block, the arms
    table-sidecar in even blocks and sidecar-table in odd ones."""
    out = []
    # warmup (block < 0) runs the table first: the engine's one-off costs off the sidecar's
    # first observations
    order = ARMS if block % 2 == 0 or block < 0 else ARMS[::-1]
    for shape in rotated(cfg.shapes, max(block, 0)):
        for position, arm in enumerate(order):
            run = await arms.run(shape, arm, seed, run_tag(part, block, shape.name, arm))
            out.append((position, run))
            seen = run.sidecar
            say(f"block {block} {shape.name:>14} {arm:>7}: {arm_throughput(run):8.1f} tok/s "
                f"in {run.wall_s:.0f} s" + (f", pushes {seen.pushes}, changes "
                                             f"{seen.traffic_changes}" if seen else ""))
    return out


async def run(cfg: Config) -> NoharmRecord:
    t0 = time.monotonic()
    record = record_for(cfg)
    info, first = next_part(record)
    part = info.part
    s = cfg.scenario
    async with serving(s) as up:
        admin = up.admin
        await admin.put_table(cfg.start)
        plain = await admin.get_policy()
        sidecar = PausedSidecar(cfg.start, admin, plain, s.profile_path, s.out / "logs",
                                up.server.url, converge_s=0.0, args=cfg.sidecar_args,
                                base=USER_DEFAULTS)
        arms = Arms(up.server.url, up.engine, admin, {"sidecar": sidecar}, {"table": cfg.start},
                    s.model, SERVED_NAME, s.out, cfg.idle_s)
        info.sidecar_log = log = f"sidecar-part{part}.log.gz"

        async def round_(block: int, seed: int) -> list[tuple[int, ArmRun]]:
            return await one_round(arms, cfg, block, seed, part)

        def keep() -> dict[str, Any]:
            keep_log(sidecar.log, s.out / log)
            return save(cfg, record)

        await recorded(run_blocks(round_, cfg.blocks, record, info, first, t0,
                                  keep, say, lambda summary: "; ".join(
                                      f"{x['shape']} {x['ratio']} {x['ci']}"
                                      for x in summary["shapes"])),
                       info, t0, arms.close, keep)
    return record


def parser() -> argparse.ArgumentParser:
    ap = bench_parser(__doc__, "runs/noharm")
    add_traffic_flags(ap)
    ap.add_argument("--start-table", help="JSON table (default: the profile's, by this tuner's rule)")
    ap.add_argument("--sidecar-arg", action="append",
                    help="a flag after the sidecar's defaults, repeatable (default: none)")
    flags.add_engine_flags(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    rc, record = run_main(sys.argv[1:] if argv is None else argv, parser(),
                          lambda args, argv_: run(config(args, argv_)))
    if rc:
        return rc
    got = summary(record)
    print(json.dumps({"verdict": got.verdict, "shapes": [
        s.model_dump(include={"shape", "blocks", "ratio", "ci", "pushes", "minutes", "false_changes"})
        for s in got.shapes]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
