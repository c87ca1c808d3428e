"""`tabletune bench`: the paper's main comparison on a real engine (argparse wiring)."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path

from tuner import flags
from tuner.engine_defaults import resolve_model, vocab_size
from tuner.errors import InvalidInput, TableTuneError
from tuner.profile import load
from tuner.prompts import random_tokens, repetitive
from tuner.workload import Workload

DEFAULT_POLICIES = ("nospec,fixed-k*,documented,tuned,quarter,turbospec-style,nightjar-style,"
                    "sidecar-from-quarter,sidecar-from-documented")


def policies(raw: str, K: int) -> list[str]:
    out: list[str] = []
    for p in raw.split(","):
        out += [f"fixed-k{k}" for k in range(K + 1)] if p == "fixed-k*" else [p]
    return out


def request_shape(args: argparse.Namespace, workload: Workload | None) -> tuple[int, int]:
    """(prompt tokens, max_tokens): the flags, else the shape the profile was timed under, else
    the defaults (96 repetitive / 32 random, 64). Says so when the bench serves another shape
    than the one the tuned table was timed for."""
    default_prompt = 96 if args.prompts == "repetitive" else 32
    prompt = args.prompt_tokens or (workload.prompt_tokens if workload else default_prompt)
    output = args.max_tokens or (workload.output_tokens if workload else 64)
    if workload and (prompt, output) != (workload.prompt_tokens, workload.output_tokens):
        print(f"note: the profile's steps were timed for {workload.prompt_tokens}-token prompts and "
              f"{workload.output_tokens}-token outputs; this bench serves {prompt} and {output}, "
              "so the tuned table is measured off its workload", file=sys.stderr)
    return prompt, output


def cmd_bench(args: argparse.Namespace) -> int:
    from benchmarks.analysis import summarize
    from benchmarks.report import write
    from benchmarks.run import BenchConfig, bench

    profile = load(Path(args.profile))
    model = resolve_model(profile.engine.model, args.model)
    vocab = vocab_size(model)
    make = repetitive if args.prompts == "repetitive" else random_tokens
    prompt_tokens, max_tokens = request_shape(args, profile.workload)
    out = Path(args.out)
    try:
        cfg = BenchConfig(profile=profile, profile_path=Path(args.profile), model=model,
                          loads=[int(x) for x in args.loads.split(",")],
                          policies=policies(args.policies, profile.K), repeats=args.repeats,
                          warmup_s=args.warmup_s, window_s=args.window_s, prime_s=args.prime_s,
                          max_tokens=max_tokens, temperature=args.temperature,
                          prompts=make(64, vocab, length=prompt_tokens, seed=7),
                          converge_s=args.converge_s, out=out,
                          emulate=flags.replay(args, profile.K),
                          extra_args=tuple(args.engine_arg or ()))
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    t0 = time.time()
    rows, converge = asyncio.run(bench(cfg))
    s = summarize(rows)
    meta = {"command": "tabletune bench " + shlex.join(sys.argv[2:]), "engine": profile.engine.model_dump(),
            "profile_table": profile.table, "prompts": args.prompts, "temperature": args.temperature,
            "prompt_tokens": prompt_tokens, "max_tokens": max_tokens,
            "seconds_to_last_sidecar_change": converge, "wall_s": round(time.time() - t0)}
    write(s, out, f"TableTune bench — {profile.engine.hardware}, {profile.engine.vllm_version}", meta)
    print((out / "summary.md").read_text())
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    arguments(sub.add_parser("bench", help=HELP))


HELP = "throughput of every policy at every load (the paper's comparison)"


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks` (from a source checkout): the same as `tabletune bench`."""
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=HELP)
    arguments(p)
    args = p.parse_args(argv)
    try:
        return int(args.func(args))
    except TableTuneError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", required=True, help="profile from `tabletune tune`")
    p.add_argument("--model", help="model path (default: the profile's)")
    p.add_argument("--loads", default="1,2,4,8,16,32,64", help="open requests per cell")
    p.add_argument("--policies", default=DEFAULT_POLICIES,
                   help=f"comma list; fixed-k* expands to k=0..K (default: {DEFAULT_POLICIES})")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--prime-s", type=float, default=2.0,
                   help="before measuring, run every load this long under k=0 and k=K (one-off "
                        "JIT and allocation costs off the first policy's cells); 0 = off")
    p.add_argument("--window-s", type=float, default=6.0)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="output tokens per request (default: the profile's --workload, else 64)")
    p.add_argument("--prompt-tokens", type=int, default=None,
                   help="prompt length (default: the profile's --workload, else 96 repetitive, 32 random)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--prompts", choices=["repetitive", "random"], default="repetitive")
    p.add_argument("--converge-s", type=float, default=20.0, help="sidecar warm-up before measuring")
    flags.add_engine_flags(p)
    p.add_argument("--out", default="runs/bench")
    p.set_defaults(func=cmd_bench)
