"""The field bench: every policy's table under realistic traffic, measured by vLLM's own client
and reported as users of `vllm bench serve` read it (issue #35).

One vLLM with the plugin serves every policy in turn (its table swapped through the admin API;
the plain policy, no exploration): every fixed k, the documented table, the profile's tuned
table, the quarter-shrunk and TurboSpec-style tables, and at most one sidecar
(`sidecar-from-quarter`, `-from-documented`, `-from-tuned`, `-from-fixed-kN`: the real sidecar with
the user's defaults, started from that table, awake only in its own runs) and one observing
sidecar (`watch-from-...`: the same with `--dry-run`, its own process, so a run can pair
observing against observing and exploring), and the plugin's Nightjar-style bandit
(`nightjar-style`: switched on fresh for each of its arms, so it learns within the arm, as the
windowed bench runs it). No speculation (`nospec`) is vLLM started again without speculation
(the same flags, no plugin) once the speculative engine's blocks are done: the same blocks'
requests again, so its runs pair by block with the others' but ran later, not interleaved
(two engines of a large model do not fit one GPU; a server start costs minutes). Block
after block, every traffic shape (benchmarks/traffic.py: closed loops at each concurrency,
bursty Poisson arrivals, a ramp up and down, mixed lengths) runs once under every policy, in an
order shuffled each block, all on the same requests (the client's seed; a new seed each block).

summary.json (benchmarks/field_summary.py) holds per shape and policy the client's output
throughput, TTFT/TPOT/ITL p50 and p99, acceptance length and request goodput under
`--goodput` SLOs, the engine's own throughput beside the client's, and paired comparisons
with 95% intervals and a word (faster / slower / same within noise). field.json holds every
run; runs/ the client's whole result of each (its `--save-result` format).

    python -m benchmarks.field --profile PROFILE --out DIR --policies fixed-k*,documented,tuned \\
        --shapes burst,poisson --concurrency 1,16,64 --blocks 6 --budget-s 3600
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shlex
import sys
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from benchmarks import client_bench
from benchmarks.arm_run import ArmRun, BlockRun
from benchmarks.client_arms import Arms
from benchmarks.client_bench import (Blocks, add_traffic_flags, bench_parser, blocks_of,
                                     keep_log, next_part, printer, recorded, run_blocks, run_main,
                                     run_tag, shape_meta, traffic)
from benchmarks.client_record import FieldMeta, FieldRecord, Part, SizesMeta, whole
from benchmarks.design import rotated
from benchmarks.field_summary import summarize, summary
from benchmarks.noharm_summary import arm_throughput
from benchmarks.policies import (NIGHTJAR, NOSPEC, SIDECAR_KINDS, SIDECAR_POLICIES, expand,
                                 policy_tables, sidecar_flags)
from benchmarks.policies import engine_args as bench_engine_args
from benchmarks.scenario import Scenario, Startup, scenario_of, serving
from benchmarks.stateful import USER_DEFAULTS, PausedSidecar
from benchmarks.traffic import Shape, Sizes
from tuner import flags
from tuner.core.errors import InvalidInput
from tuner.core.table import Table
from tuner.launcher import ServerConfig

SERVED_NAME = ServerConfig.model_fields["served_model_name"].default
RECORD = "field.json"
say = printer("field")


@dataclass(frozen=True, slots=True)
class Config:
    scenario: Scenario
    shapes: tuple[Shape, ...]
    sizes: Sizes
    policies: tuple[str, ...]
    tables: dict[str, Table]        # every table policy's table
    sidecars: tuple[str, ...]       # the sidecar policies: at most one sidecar-from, one watch-from
    sidecar_args: tuple[str, ...]   # flags after the sidecars' defaults (--sidecar-arg)
    goodput: tuple[str, ...]        # the client's --goodput SLOs, e.g. ("tpot:50",)
    blocks: Blocks
    idle_s: float
    resume: bool
    command: str


def config(args: argparse.Namespace, argv: list[str]) -> Config:
    """The flags, checked: InvalidInput names the flag, its value and the fix."""
    extra = bench_engine_args(tuple(args.engine_arg or ()))
    scenario = scenario_of(args, extra)
    profile = scenario.profile
    shapes_, sizes = traffic(args, extra)
    policies = expand(args.policies, profile.K)
    if len(policies) < 2:
        raise InvalidInput(f"--policies={args.policies!r}: give at least two, e.g. "
                           "fixed-k*,documented,tuned")
    tables = policy_tables(profile, policies)
    sidecars = [p for p in policies if p in SIDECAR_POLICIES]
    for kind in SIDECAR_KINDS.values():
        same = [p for p in sidecars if p.startswith(kind)]
        if len(same) > 1:
            raise InvalidInput(f"--policies: {','.join(same)}: one {kind}TABLE a run (one "
                               "process learns from everything it serves); keep one of them")
    for p in sidecars:
        if SIDECAR_POLICIES[p] not in tables:
            raise InvalidInput(f"--policies: {p} starts from the profile's "
                               f"{SIDECAR_POLICIES[p]} table, which it does not have")
    unknown = [p for p in policies
               if p not in tables and p not in sidecars and p not in (NIGHTJAR, NOSPEC)]
    if unknown:
        known = [*sorted(tables), *SIDECAR_POLICIES, NIGHTJAR, NOSPEC]
        raise InvalidInput(f"--policies: {','.join(unknown)} not known for this profile; use "
                           f"some of {','.join(known)}")
    if not any(p in tables for p in policies):
        raise InvalidInput(f"--policies={args.policies!r}: no table to compare against; add "
                           "some, e.g. fixed-k*,tuned")
    sidecar_args = tuple(args.sidecar_arg or ())
    if sidecar_args and not sidecars:
        raise InvalidInput(f"--sidecar-arg={sidecar_args[0]}: no sidecar policy runs; add one, "
                           "e.g. sidecar-from-tuned, to --policies")
    goodput = tuple(args.goodput.split()) if args.goodput else ()
    for slo in goodput:
        name, _, ms = slo.partition(":")
        if name not in ("ttft", "tpot", "e2el") or not _positive(ms):
            raise InvalidInput(f"--goodput={args.goodput!r}: {slo!r} is not METRIC:MS with "
                               "METRIC one of ttft, tpot, e2el, e.g. --goodput 'tpot:50 ttft:2000'")
    return Config(scenario, shapes_, sizes, tuple(policies),
                  {p: t for p, t in tables.items() if p in policies},
                  tuple(sidecars), sidecar_args, goodput, blocks_of(args), args.idle_s,
                  args.resume, "python -m benchmarks.field " + shlex.join(argv))


def _positive(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def sidecar_keys(cfg: Config) -> dict[str, str | None]:
    """Each kind of sidecar policy by its name in the record ("sidecar", "watch": its meta key
    and log's stem), and this run's policy of that kind (None: none runs)."""
    return {key: next((p for p in cfg.sidecars if p.startswith(kind)), None)
            for key, kind in SIDECAR_KINDS.items()}


def sidecar_argv(cfg: Config, policy: str | None) -> list[str] | None:
    """The command line a sidecar policy runs (None: no such policy in this run)."""
    if policy is None:
        return None
    return ["tabletune", "sidecar", "--profile", str(cfg.scenario.profile_path), *USER_DEFAULTS,
            *cfg.sidecar_args, *sidecar_flags(policy)]


def meta(cfg: Config) -> FieldMeta:
    s = cfg.scenario
    argv = {key: sidecar_argv(cfg, p) for key, p in sidecar_keys(cfg).items()}
    return FieldMeta(command=cfg.command, profile=str(s.profile_path),
                     model=s.profile.engine.model, served_name=SERVED_NAME,
                     policies=list(cfg.policies),
                     tables={p: t.to_list() for p, t in cfg.tables.items()},
                     sidecar=argv["sidecar"], watch=argv["watch"], engine=whole(s.profile.engine),
                     shapes=shape_meta(cfg.shapes),
                     sizes=SizesMeta.model_validate(dataclasses.asdict(cfg.sizes)),
                     goodput=list(cfg.goodput) or None, idle_s=cfg.idle_s, seed=cfg.blocks.seed,
                     emulate=list(s.replay.rates) if s.replay else None,
                     engine_args=list(s.engine_args), parts=[])


def record_for(cfg: Config) -> FieldRecord:
    """A new record, or (--resume) the one in --out, of the same shapes, policies and sidecar."""
    fresh = FieldRecord(schema_=1, meta=meta(cfg), runs=[], warmup=[])
    return client_bench.record_for(cfg.scenario.out / RECORD, fresh, cfg.resume,
                                   ("shapes", "policies", "tables", "goodput", "sidecar", "watch"))


def save(cfg: Config, record: FieldRecord) -> dict[str, Any]:
    return client_bench.save(cfg.scenario.out / RECORD, record, summarize)


def order(policies: tuple[str, ...], block: int, seed: int) -> list[str]:
    """The policies in this block's order: shuffled by the block's seed (warmup: as given)."""
    if block < 0:
        return list(policies)
    out = list(policies)
    random.Random(seed * 7919 + block).shuffle(out)
    return out


async def one_round(arms: Arms, cfg: Config, policies: tuple[str, ...], block: int, seed: int,
                    part: int) -> list[tuple[int, ArmRun]]:
    """Every shape (in an order rotating with the block) under every policy (shuffled)."""
    out = []
    for shape in rotated(cfg.shapes, max(block, 0)):
        for position, policy in enumerate(order(policies, block, cfg.blocks.seed)):
            run = await arms.run(shape, policy, seed, run_tag(part, block, shape.name, policy))
            out.append((position, run))
            say(f"block {block} {shape.name:>14} {policy:>22}: {arm_throughput(run):8.1f} "
                f"tok/s in {run.wall_s:.0f} s")
    return out


def _progress(summary: dict[str, Any]) -> str:
    """Per shape, the best-fixed-k verdicts so far (a word each)."""
    return "; ".join(f"{s['shape']}: " + ", ".join(
        f"{v['policy']} {v['ratio']} {v['word']}" for v in s["versus_best_fixed"])
        for s in summary["shapes"])


def name_log(part: Part, key: str, name: str) -> None:
    """The part's sidecar_log or watch_log (``key``: sidecar_keys's)."""
    if key == "sidecar":
        part.sidecar_log = name
    else:
        part.watch_log = name


def speculative(cfg: Config) -> tuple[str, ...]:
    """The policies the speculative engine serves: all but no speculation."""
    return tuple(p for p in cfg.policies if p != NOSPEC)


def next_block(record: FieldRecord, policies: tuple[str, ...]) -> int:
    """The first block none of `policies` ran yet (a resumed record's engines resume apart)."""
    return 1 + max((r.block for r in record.runs if r.arm in policies), default=-1)


def slowest_share(record: FieldRecord, policies: tuple[str, ...]) -> float:
    """The largest share of a block's time one policy took, in the newest block all of
    `policies` ran (1/len before any): what a block of no speculation, often the slowest, is
    priced at."""
    newest = next_block(record, policies) - 1
    wall = {p: sum(r.wall_s for r in record.runs if r.block == newest and r.arm == p)
            for p in policies}
    total = sum(wall.values())
    return max(wall.values()) / total if newest >= 0 and total > 0 else 1 / len(policies)


def plain_reserve(cfg: Config, record: FieldRecord, start_s: float) -> Callable[[int, float], float]:
    """The seconds the engine without speculation needs after the speculative blocks: its start,
    its warmup rounds and the blocks it owes (those already owed plus `n`), each at the slowest
    policy's share of a speculative block."""
    if NOSPEC not in cfg.policies:
        return lambda _n, _s: 0.0
    owed = next_block(record, speculative(cfg)) - next_block(record, (NOSPEC,))
    return lambda n, block_s: start_s + ((cfg.blocks.warmup_rounds + owed + n) * block_s
                                         * slowest_share(record, speculative(cfg)))


async def run(cfg: Config) -> FieldRecord:
    t0 = time.monotonic()
    record = record_for(cfg)
    info, _ = next_part(record)
    try:
        if next_block(record, speculative(cfg)) < cfg.blocks.blocks:  # else only no speculation owes
            await speculative_blocks(cfg, record, info, t0)
        if NOSPEC in cfg.policies:
            await plain_blocks(cfg, record, info, t0)
    finally:
        info.wall_s = round(time.monotonic() - t0, 1)
        save(cfg, record)
    return record


async def speculative_blocks(cfg: Config, record: FieldRecord, info: Part, t0: float) -> None:
    """Every policy but no speculation, block after block, on the speculative engine."""
    s = cfg.scenario
    policies = speculative(cfg)
    first = next_block(record, policies)
    async with serving(s) as up:
        start_s = time.monotonic() - t0
        admin = up.admin
        first_table = next(iter(cfg.tables.values()))
        await admin.put_table(first_table)
        sidecars: dict[str, PausedSidecar] = {}
        logs: dict[str, str] = {}   # a sidecar's key -> its log's name, kept in the part
        for key, policy in sidecar_keys(cfg).items():
            if policy is None:
                continue
            start = policy_tables(s.profile, cfg.policies)[SIDECAR_POLICIES[policy]]
            sidecars[policy] = PausedSidecar(start, admin, await admin.get_policy(),
                                             s.profile_path, s.out / "logs", up.server.url,
                                             converge_s=0.0,
                                             args=(*cfg.sidecar_args, *sidecar_flags(policy)),
                                             base=USER_DEFAULTS)
            logs[key] = f"{key}-part{info.part}.log.gz"
            name_log(info, key, logs[key])
        client_flags = ("--goodput", *cfg.goodput) if cfg.goodput else ()
        arms = Arms(up.server.url, up.engine, admin, sidecars, cfg.tables, s.model, SERVED_NAME,
                    s.out, cfg.idle_s, client_flags,
                    bandit=NIGHTJAR if NIGHTJAR in cfg.policies else None)

        async def round_(block: int, seed: int) -> list[tuple[int, ArmRun]]:
            return await one_round(arms, cfg, policies, block, seed, info.part)

        def keep() -> dict[str, Any]:
            for key, policy in sidecar_keys(cfg).items():
                if policy is not None:
                    keep_log(sidecars[policy].log, s.out / logs[key])
            return save(cfg, record)

        await recorded(run_blocks(round_, cfg.blocks, record, info, first, t0,
                                  keep, say, _progress, plain_reserve(cfg, record, start_s)),
                       info, t0, arms.close, keep)


async def plain_blocks(cfg: Config, record: FieldRecord, info: Part, t0: float) -> None:
    """No speculation on its own engine, over the blocks the speculative engine ran (their
    seeds: the same requests), within what is left of the budget."""
    s = cfg.scenario
    first, last = next_block(record, (NOSPEC,)), next_block(record, speculative(cfg))
    if first >= last:
        return
    say(f"no speculation: blocks {first}..{last - 1} on vLLM started without speculation")
    reason, ran = info.stop_reason, info.blocks  # the speculative engine's: the part's own
    try:
        async with serving(s, Startup(is_speculative=False)) as up:
            client_flags = ("--goodput", *cfg.goodput) if cfg.goodput else ()
            arms = Arms(up.server.url, up.engine, None, {}, {}, s.model, SERVED_NAME, s.out,
                        cfg.idle_s, client_flags)

            async def round_(block: int, seed: int) -> list[tuple[int, ArmRun]]:
                return await one_round(arms, cfg, (NOSPEC,), block, seed, info.part)

            blocks = dataclasses.replace(cfg.blocks, blocks=last)
            await recorded(run_blocks(round_, blocks, record, info, first, t0, say=say,
                                      save_all=lambda: save(cfg, record)),
                           info, t0, arms.close, lambda: save(cfg, record))
    except BaseException as exc:
        if info.stop_reason == reason:  # the engine never started: say so
            info.stop_reason = f"error: {type(exc).__name__}: {exc}"
        raise
    finally:
        info.plain_blocks = sum(r.block >= first for r in record.runs if r.arm == NOSPEC)
        if info.stop_reason != reason:
            info.stop_reason = f"{reason}; no speculation: {info.stop_reason}"
        info.blocks = ran
        record.runs = with_their_parts(record.runs)


def with_their_parts(runs: list[BlockRun]) -> list[BlockRun]:
    """No speculation's runs under the part (call) of the speculative runs of their block: a
    resumed call's owed blocks pair with the blocks an earlier call ran (summaries pair by
    part and block)."""
    part = {r.block: r.part for r in runs if r.arm != NOSPEC}
    return [r.model_copy(update={"part": part[r.block]})
            if r.arm == NOSPEC and r.block in part and r.part != part[r.block] else r for r in runs]


def parser() -> argparse.ArgumentParser:
    ap = bench_parser(__doc__, "runs/field")
    ap.add_argument("--policies", default="fixed-k*,documented,tuned",
                    help="tables (fixed-k*, documented, tuned, quarter, turbospec-style, "
                         "tuned@tie=X, tuned-of:PATH), at most one sidecar-from-TABLE and at "
                         "most one watch-from-TABLE (a --dry-run sidecar), nightjar-style "
                         "(the plugin's bandit), nospec (vLLM started again without "
                         "speculation after the other policies' blocks)")
    ap.add_argument("--sidecar-arg", action="append",
                    help="a flag after the sidecar's defaults, repeatable (default: none)")
    ap.add_argument("--goodput", help="the client's SLOs for request goodput, e.g. 'tpot:50'")
    add_traffic_flags(ap, concurrency="1,16,64")
    flags.add_engine_flags(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    rc, record = run_main(sys.argv[1:] if argv is None else argv, parser(),
                          lambda args, argv_: run(config(args, argv_)))
    if rc:
        return rc
    got = summary(record)
    print(json.dumps({"blocks": got.blocks, "shapes": [
        {"shape": s.shape, "versus_best_fixed": [v.model_dump(mode="json")
                                                  for v in s.versus_best_fixed]}
        for s in got.shapes]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
