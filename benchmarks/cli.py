"""`python -m benchmarks`: the paired, interval-based bench (argparse wiring)."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from tuner import flags
from tuner.core.errors import InvalidInput, TableTuneError
from tuner.core.workload import Workload

if TYPE_CHECKING:
    from benchmarks.scenario import Scenario

HELP = "every policy on one engine in paired blocks, with family-wise corrected intervals"


def request_shape(args: argparse.Namespace, workload: Workload | None) -> tuple[int, int]:
    """(prompt tokens, max_tokens): the flags, else the shape the profile was timed under, else
    the defaults (96 repetitive / 32 random, 64). Says so when the bench serves another shape
    than the one the tuned table was timed for. For a mix they are the median (chat) or the
    mean (steady output) of the drawn lengths."""
    default_prompt = 96 if args.prompts == "repetitive" else 32
    prompt = args.prompt_tokens or (workload.prompt_tokens if workload else default_prompt)
    output = args.max_tokens or (workload.output_tokens if workload else 64)
    if workload and (prompt, output) != (workload.prompt_tokens, workload.output_tokens):
        print(f"note: the profile's steps were timed for {workload.prompt_tokens}-token prompts and "
              f"{workload.output_tokens}-token outputs; this bench serves {prompt} and {output}, "
              "so the tuned table is measured off its workload", file=sys.stderr)
    return prompt, output


def default_loads(max_num_seqs: int) -> list[int]:
    """1, 4, 16, 64, ... up to max_num_seqs, and max_num_seqs itself."""
    loads = [4 ** i for i in range(8) if 4 ** i < max_num_seqs]
    return loads + [max_num_seqs]


def head_to_head(raw: str, policies: list[str]) -> list[tuple[str, str]]:
    """--versus 'tuned:documented,...' -> pairs, keeping those whose policies both run."""
    pairs = []
    for item in (x for x in raw.split(",") if x):
        a, sep, b = item.partition(":")
        if not sep:
            raise InvalidInput(f"--versus={raw!r}: write pairs as A:B, e.g. tuned:documented")
        if a in policies and b in policies:
            pairs.append((a, b))
    return pairs


def planned_design(args: argparse.Namespace, policies: list[str], num_loads: int) -> dict[str, Any]:
    """The fixed design from the flags, before the run (benchmarks/design.py): --blocks if
    given, else the blocks that find --effect with --power at the A/A noise --noise-cv."""
    from benchmarks.design import design, family_size, sd_log_ratio
    from benchmarks.stats import is_fixed

    pairs = len(head_to_head(args.versus, policies))
    fixed = sum(is_fixed(p) for p in policies)  # "better" must beat each (stats.py)
    try:
        return design(sd_log_ratio(args.noise_cv), args.effect, args.threshold, 1 - args.confidence,
                      family_size(num_loads, policies, pairs), args.power, args.blocks,
                      references=max(fixed, 1))
    except ValueError as exc:
        raise InvalidInput(f"--effect={args.effect}: {exc}") from None


def config(args: argparse.Namespace, scenario: Scenario, shape: tuple[int, int]) -> Any:
    from benchmarks.cells import read_windows
    from benchmarks.policies import expand, with_aa
    from benchmarks.run import BenchConfig
    from benchmarks.stats import Settings

    profile = scenario.profile
    prompt_tokens, max_tokens = shape
    policies = with_aa(expand(args.policies, profile.K), profile.K)
    loads = flags.ints(args.loads, "--loads") if args.loads else default_loads(profile.engine.max_num_seqs)
    earlier = Path(args.out) / "cells.csv"
    resume = read_windows(earlier) if args.resume and earlier.exists() else []
    try:
        return BenchConfig(
            scenario=scenario, loads=loads, policies=policies,
            requests=scenario.requests(prompt_tokens, max_tokens, args.workload_mix, kind=args.prompts,
                                       prompt_seed=7, seed=args.seed),
            window_s=args.window_s, warmup_s=args.warmup_s, prime_s=args.prime_s,
            settle_steps=args.settle_steps, temperature=args.temperature,
            budget_s=args.budget_s, design=(plan := planned_design(args, policies, len(loads))),
            blocks=plan["planned_blocks"],
            min_steps=args.min_steps, stats=Settings(args.threshold, args.confidence),
            seed=args.seed, pair_ref=(args.pair_ref or "").replace("fixed-kK", f"fixed-k{profile.K}"),
            head_to_head=head_to_head(args.versus, policies), converge_s=args.converge_s,
            learn_s=args.learn_s, resume=resume)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-") + f"={err.get('input')!r}: " if err["loc"] else ""
        raise InvalidInput(flag + err["msg"].removeprefix("Value error, ")) from None
    except (ValueError, OSError) as exc:
        raise InvalidInput(str(exc)) from None


def cmd_bench(args: argparse.Namespace) -> int:
    from benchmarks.policies import engine_args
    from benchmarks.report import write
    from benchmarks.run import RunInfo, bench
    from benchmarks.scenario import scenario_of
    from benchmarks.stats import analyze

    scenario = scenario_of(args, engine_args(tuple(args.engine_arg or ())))
    profile, out = scenario.profile, scenario.out
    shape = request_shape(args, profile.workload)
    cfg = config(args, scenario, shape)
    out.mkdir(parents=True, exist_ok=True)
    title = f"TableTune bench — {profile.engine.hardware}, {profile.engine.vllm_version}"
    meta: dict[str, Any] = {
        "title": title, "command": "python -m benchmarks " + shlex.join(sys.argv[1:]),
        "engine": profile.engine.model_dump(), "profile_table": profile.table,
        "workload_mix": args.workload_mix, "prompts": args.prompts, "temperature": args.temperature,
        "prompt_tokens": shape[0], "max_tokens": shape[1], "seed": args.seed,
        "loads": cfg.loads, "policies": cfg.policies, "pair_reference": cfg.reference,
        "window_s": cfg.window_s, "min_steps": cfg.min_steps, "settle_steps": cfg.settle_steps,
        "budget_s": cfg.budget_s,
        "design": cfg.design}
    t0 = time.time()

    def on_round(windows: list[Any], info: RunInfo) -> None:
        meta.update(rounds=info.rounds, stop_reason=info.stop_reason, wall_s=round(time.time() - t0),
                    sidecar_seconds_to_last_change=info.converge_s)
        write(windows, analyze(windows, cfg.stats, cfg.head_to_head), out, title, meta)

    asyncio.run(bench(cfg, on_round))
    print((out / "summary.md").read_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks` (from a source checkout; `make bench` runs it in the CPU suite)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=HELP)
    arguments(p)
    args = p.parse_args(argv)
    try:
        return int(args.func(args))
    except TableTuneError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2


def arguments(p: argparse.ArgumentParser) -> None:
    from benchmarks.policies import DEFAULT
    from benchmarks.workload import MIXES

    p.add_argument("--profile", required=True, help="profile from `tabletune tune`")
    p.add_argument("--model", help="model path (default: the profile's)")
    p.add_argument("--drafter", help="drafter path for draft_model/EAGLE profiles (default: the profile's)")
    p.add_argument("--loads", help="open requests per load (default: 1, 4, 16, ... up to the "
                                   "profile's max_num_seqs, and max_num_seqs)")
    p.add_argument("--policies", default=DEFAULT,
                   help=f"comma list; fixed-k* is k=0..K, fixed-kK is k=K (default: {DEFAULT})")
    p.add_argument("--workload-mix", choices=MIXES, default="steady",
                   help="steady: fixed prompts, outputs uniform on 0.5-1.5x --max-tokens; chat: "
                        "lognormal prompts and outputs (medians --prompt-tokens, --max-tokens)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="output tokens per request, mean or median by mix (default: the "
                        "profile's --workload, else 64)")
    p.add_argument("--prompt-tokens", type=int, default=None,
                   help="prompt length (default: the profile's --workload, else 96 repetitive, 32 random)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--prompts", choices=["repetitive", "random"], default="repetitive")
    _measuring(p)
    flags.add_engine_flags(p)
    p.add_argument("--out", default="runs/bench")
    p.add_argument("--resume", action="store_true",
                   help="go on from the windows in OUT/cells.csv if there are any (an earlier "
                        "call's blocks stay valid pairs; its rounds count towards --blocks)")
    p.set_defaults(func=cmd_bench)


def _measuring(p: argparse.ArgumentParser) -> None:
    """Windows, blocks, statistics and the learning policies' warm-ups."""
    p.add_argument("--window-s", type=float, default=4.0, help="one measured window")
    p.add_argument("--warmup-s", type=float, default=2.0, help="after a load starts, unmeasured")
    p.add_argument("--prime-s", type=float, default=2.0,
                   help="before measuring, every load this long under k=0 and k=K; 0 = off")
    p.add_argument("--settle-steps", type=int, default=8,
                   help="engine steps on a swapped table before its window starts")
    p.add_argument("--budget-s", type=float, default=1800.0,
                   help="wall-clock budget: no block starts that would end after it")
    p.add_argument("--blocks", type=int, default=None,
                   help="blocks per load, fixed before the run (default: from --noise-cv, "
                        "--effect and --power)")
    p.add_argument("--noise-cv", type=float, default=0.05,
                   help="one window's coefficient of variation, from an earlier A/A "
                        "(summary.json aa_sd_log / 1.41); plans --blocks")
    p.add_argument("--effect", type=float, default=0.05,
                   help="smallest difference worth finding (plans --blocks)")
    p.add_argument("--power", type=float, default=0.8, help="chance to find --effect (plans --blocks)")
    p.add_argument("--min-steps", type=int, default=50,
                   help="engine steps a window must hold: it runs on past --window-s until then")
    p.add_argument("--threshold", type=float, default=0.01,
                   help="smallest difference that counts (whole interval beyond it)")
    p.add_argument("--confidence", type=float, default=0.95,
                   help="1 - the family-wise error rate of the run's verdicts (Holm)")
    p.add_argument("--seed", type=int, default=0, help="block orders and load arrivals")
    p.add_argument("--pair-ref", default=None,
                   help="the fixed k paired with non-table policies (default: fixed-kK)")
    p.add_argument("--versus", default="tuned:documented,tuned:quarter",
                   help="head-to-head pairs of table policies, A:B,...")
    p.add_argument("--converge-s", type=float, default=20.0,
                   help="a sidecar's learning before its first window")
    p.add_argument("--learn-s", type=float, default=10.0,
                   help="the nightjar-style bandit's learning before each of its windows")
