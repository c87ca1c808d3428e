"""The tuner's subcommands: tune, table, compare, report (argparse wiring stays in cli.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tuner import flags
from tuner.engine_defaults import default_model, vocab_size
from tuner.errors import InvalidInput
from tuner.goodput import interpolate_step_times, predicted_loss
from tuner.profile import Profile, Workload, load
from tuner.prompts import load_file, repetitive
from tuner.sweep import default_grid
from tuner.table import Table

if TYPE_CHECKING:
    from tuner.tune import TuneConfig


def _grid(raw: str | None, max_num_seqs: int) -> list[int]:
    if not raw:
        return default_grid(max_num_seqs)
    try:
        return [int(x) for x in raw.split(",")]
    except ValueError:
        raise InvalidInput(f"--grid={raw!r}: expected batch sizes like 1,2,4,8,16") from None


def tune_config(args: argparse.Namespace) -> "TuneConfig":
    from tuner.tune import TuneConfig

    if args.num_speculative_tokens < 1:
        raise InvalidInput(f"--num-speculative-tokens={args.num_speculative_tokens}: K must be >= 1 "
                           "(K=0 is no speculation; nothing to tune)")
    if getattr(args, "preflight", False) and args.workload:
        raise InvalidInput("--preflight times pure decode steps without speculation, which a "
                           "--workload profile cannot be compared with; run it without --workload")
    paths = default_model()
    model = Path(args.model) if args.model else paths.target
    drafter = Path(args.drafter) if args.drafter else (
        paths.drafter if args.method == "draft_model" and not args.model else None)
    if args.prompts:
        prompts = load_file(Path(args.prompts))
    else:
        vocab = vocab_size(model)
        prompts = repetitive(args.num_prompts, vocab, seed=42)
    try:
        return TuneConfig(model=model, method=args.method, drafter=drafter,
                          num_speculative_tokens=args.num_speculative_tokens,
                          max_num_seqs=args.max_num_seqs, grid=_grid(args.grid, args.max_num_seqs),
                          repeats=args.repeats, max_repeats=args.max_repeats,
                          noise_tol=args.noise_tol, decode_tokens=args.decode_tokens,
                          temperature=args.temperature, acceptance_prompts=prompts[:args.num_prompts],
                          out=Path(args.out), fresh=args.fresh, tie=args.tie,
                          extra_args=tuple(args.engine_arg or ()),
                          emulate=flags.replay(args, args.num_speculative_tokens),
                          one_server=args.one_server, refine=args.refine,
                          workload=Workload.parse(args.workload) if args.workload else None)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


def cmd_tune(args: argparse.Namespace) -> int:
    from tuner import tune
    from tuner.report import write_report

    cfg = tune_config(args)
    profile = tune.run(cfg, with_preflight=args.preflight)
    md, png = write_report(profile, cfg.out.with_suffix(""))
    print(json.dumps(tune.summary(profile), indent=1))
    print(f"profile: {cfg.out}\nreport:  {md}\nplot:    {png}")
    return 0


def _acceptance(raw: str | None) -> list[float] | None:
    if raw is None:
        return None
    try:
        return [float(x) for x in raw.split(",")]
    except ValueError:
        raise InvalidInput(f"--acceptance={raw!r}: expected rates like 0.7,0.5,0.3") from None


def cmd_table(args: argparse.Namespace) -> int:
    profile = load(Path(args.profile))
    choice = profile.build(_acceptance(args.acceptance))
    print(json.dumps({"num_speculative_tokens_per_batch_size": choice.table.to_list(),
                      "speculative_config": profile.speculative_config(choice.table)}, indent=1))
    return 0


def losses(profile: Profile, table: Table, a: list[float] | None = None) -> np.ndarray:
    acc = a if a is not None else profile.acceptance.a if profile.acceptance else None
    if acc is None:
        raise InvalidInput("profile has no acceptance; pass --acceptance")
    T = interpolate_step_times(profile.grid, profile.step_time_matrix(), profile.engine.max_num_seqs)
    return predicted_loss(table, T, acc, profile.K)


def cmd_compare(args: argparse.Namespace) -> int:
    profile = load(Path(args.profile))
    a = _acceptance(args.acceptance)
    tables = [Table.parse_list(json.loads(raw)) for raw in args.tables]
    rows = {raw: losses(profile, t, a) for raw, t in zip(args.tables, tables)}
    print("predicted goodput loss vs the best k at each B")
    print("B     " + "  ".join(f"{raw[:28]:>28}" for raw in rows))
    for B in profile.grid:
        print(f"{B:<5} " + "  ".join(f"{rows[raw][B - 1] * 100:27.1f}%" for raw in rows))
    print("worst " + "  ".join(f"{loss.max() * 100:27.1f}%" for loss in rows.values()))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from tuner.report import write_report

    md, png = write_report(load(Path(args.profile)), Path(args.profile).with_suffix(""))
    print(f"report: {md}\nplot:   {png}")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("tune", help="measure T(B,k) and acceptance on vLLM, build the table")
    p.add_argument("--model", help="model path (default: the embedded tiny Llama)")
    p.add_argument("--method", default="ngram", choices=["ngram", "draft_model", "eagle", "eagle3"])
    p.add_argument("--drafter", help="drafter path for draft_model/eagle/eagle3 (default for "
                                     "draft_model on the embedded model: the tiny drafter)")
    p.add_argument("--num-speculative-tokens", "-K", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--grid", help="batch sizes, e.g. 1,2,4,8,16 (default: every B to 16, then every 8)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per cell (median)")
    p.add_argument("--max-repeats", type=int, default=None,
                   help="take more repeats, up to this many, where a cell's repeats disagree by "
                        "more than --noise-tol (default: --repeats + 2)")
    p.add_argument("--noise-tol", type=float, default=0.10,
                   help="(max - min) / median of a cell's repeats above which one more is taken")
    p.add_argument("--decode-tokens", type=int, default=65, help="tokens of the long run (paper: 65)")
    p.add_argument("--temperature", type=float, default=0.0, help="serving temperature")
    p.add_argument("--prompts", help="JSONL ({'prompt': ...}) or text file for acceptance")
    p.add_argument("--num-prompts", type=int, default=160)
    p.add_argument("--tie", type=float, default=0.005, help="keep the previous k unless this much better")
    p.add_argument("--out", default="runs/profile.json", help="profile path (resumes if present)")
    p.add_argument("--fresh", action="store_true", help="ignore an existing profile at --out")
    flags.add_engine_flags(p)
    p.add_argument("--one-server", action="store_true",
                   help="one vLLM for all k, tables swapped through the plugin; it starts with a "
                        "table holding every k, so the V2 runner captures graphs for each; "
                        "saves K server starts")
    p.add_argument("--refine", type=int, default=None, metavar="ROUNDS",
                   help="bisect grid intervals where T(B,k) jumps x1.5 under a table edge, this many "
                        "rounds (default: 2 with --one-server, 0 otherwise: each round restarts K+1 "
                        "vLLMs without it)")
    p.add_argument("--workload", metavar="PROMPT:OUTPUT",
                   help="mean prompt and output tokens of the served requests, e.g. 96:128: steps "
                        "are timed in steady serving of that shape, each carrying the prefill it "
                        "brings (default: pure decode steps, the paper's method)")
    p.add_argument("--preflight", action="store_true",
                   help="also time vLLM without speculation and warn where k=0 or any table loses")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("table", help="rebuild the table from a profile, offline")
    p.add_argument("profile")
    p.add_argument("--acceptance", help="override a_1..a_K, e.g. 0.7,0.5,0.3")
    p.set_defaults(func=cmd_table)

    p = sub.add_parser("compare", help="predicted goodput loss of tables against the best k per B")
    p.add_argument("profile")
    p.add_argument("tables", nargs="+", help="tables as JSON, e.g. '[[1,64,3],[65,128,1],[129,512,0]]'")
    p.add_argument("--acceptance", help="override a_1..a_K")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("report", help="write the Markdown + PNG report of a profile")
    p.add_argument("profile")
    p.set_defaults(func=cmd_report)
