"""The tuner's subcommands: tune, table, compare, report (argparse wiring stays in cli.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import ValidationError

from tuner import flags, schedules
from tuner.engine_defaults import default_model, vocab_size
from tuner.core.errors import InvalidInput
from tuner.core.goodput import interpolate_step_times, predicted_loss
from tuner.core.profile import Profile, load
from tuner.prompts import load_file, repetitive
from tuner.sweep import default_grid
from tuner.core.table import Table
from tuner.core.workload import Workload

if TYPE_CHECKING:
    from tuner.config import TuneConfig


def _grid(raw: str | None, max_num_seqs: int) -> list[int]:
    return flags.ints(raw, "--grid") if raw else default_grid(max_num_seqs)


def tune_config(args: argparse.Namespace) -> TuneConfig:
    """The flags as a TuneConfig; InvalidInput naming the flag on a bad value."""
    from tuner.config import TuneConfig

    if args.num_speculative_tokens < 1:
        raise InvalidInput(f"--num-speculative-tokens={args.num_speculative_tokens}: K must be >= 1 "
                           "(K=0 is no speculation; nothing to tune)")
    if getattr(args, "preflight", None) is True and args.workload:
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
                          ci_target=args.ci_target, confidence=args.confidence,
                          min_width=args.min_width, min_k=args.min_k,
                          decode_tokens=args.decode_tokens,
                          temperature=args.temperature, acceptance_prompts=prompts[:args.num_prompts],
                          out=Path(args.out), fresh=args.fresh, tie=args.tie,
                          extra_args=tuple(args.engine_arg or ()),
                          emulate=flags.replay(args, args.num_speculative_tokens),
                          one_server=args.one_server, refine=args.refine,
                          workload=Workload.parse(args.workload) if args.workload else None)
    except ValidationError as exc:
        raise InvalidInput(_config_error(exc)) from None


def _config_error(exc: ValidationError) -> str:
    """pydantic's first error as the flag it came from, its value and why."""
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else ""
    flag = {"num_speculative_tokens": "--num-speculative-tokens", "grid": "--grid",
            "acceptance_prompts": "--prompts"}.get(field, "--" + field.replace("_", "-"))
    msg = str(err["msg"]).removeprefix("Value error, ")
    value = "" if field in ("acceptance_prompts", "") else f"={err.get('input')!r}"
    return f"{flag}{value}: {msg}" if field else msg


def cmd_tune(args: argparse.Namespace) -> int:
    from tuner import tune
    from tuner.report import write_report

    cfg = tune_config(args)
    # the preflight backs the recommendation; pure-decode only (a workload profile's steps carry
    # prefill that no-speculation pure decode steps cannot be set against)
    preflight = args.preflight if args.preflight is not None else cfg.workload is None
    profile = tune.run(cfg, with_preflight=preflight)
    md, png = write_report(profile, cfg.out.with_suffix(""))
    print(json.dumps(tune.summary(profile), indent=1))
    print(f"profile: {cfg.out}\nreport:  {md}\nplot:    {png}")
    return 0


def _acceptance(raw: str | None) -> list[float] | None:
    a = flags.rates(raw, "--acceptance")
    if a is not None and (any(not 0 <= x <= 1 for x in a) or any(y > x for x, y in zip(a, a[1:]))):
        raise InvalidInput(f"--acceptance={raw!r}: a_i is P(first i drafts accepted), each in "
                           "[0, 1] and non-increasing, e.g. 0.7,0.5,0.3")
    return a


def _rule(profile: Profile, args: argparse.Namespace) -> Profile:
    """The profile with the table rule the flags give (--tie, --confidence, --min-width)."""
    update = {name: getattr(args, name) for name in ("tie", "confidence", "min_width", "min_k")
              if getattr(args, name, None) is not None}
    if update.get("tie", 0) < 0 or not 0.5 <= update.get("confidence", 0.9) < 1 or \
            update.get("min_width", 1) < 1 or not 0 <= update.get("min_k", 0) <= profile.K:
        raise InvalidInput(f"{update}: need --tie >= 0, --confidence in [0.5, 1), --min-width >= 1, "
                           f"--min-k in 0..{profile.K}")
    return profile.model_copy(update=update)


def cmd_table(args: argparse.Namespace) -> int:
    from tuner.findings import edge_lines, grid_warnings

    if args.save is not None and args.acceptance is not None:
        # the saved profile would hold a table its own measured acceptance does not give
        raise InvalidInput(f"--save {args.save} with --acceptance {args.acceptance}: a saved profile "
                           "keeps its measured acceptance; drop --acceptance to save, or --save "
                           "to try the override")
    profile = _rule(load(Path(args.profile)), args)
    choice = profile.build(_acceptance(args.acceptance))
    out = schedules.write(args.format, choice.table, profile.speculative_config(choice.table),
                          profile.engine.max_num_seqs)
    rule = {"tie": profile.tie, "confidence": profile.confidence, "min_width": profile.min_width,
            "min_k": profile.min_k}
    warnings = grid_warnings(profile)
    print(json.dumps({**out, "rule": rule, "evidence": edge_lines(choice), "warnings": warnings},
                     indent=1))
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.save is not None:
        old = profile.table
        profile.table = choice.table.to_list()
        profile.save(Path(args.save))
        print(f"saved {args.save}: table {old} -> {profile.table}", file=sys.stderr)
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
    tables = [flags.table(raw, "TABLE") for raw in args.tables]
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


def _rule_flags(p: argparse.ArgumentParser, defaults: bool) -> None:
    """The table rule: where a table may split. Without defaults: the profile's own rule."""
    p.add_argument("--tie", type=float, default=0.005 if defaults else None,
                   help="keep the previous k unless another is this much better (0.005: 0.5%%)")
    p.add_argument("--confidence", type=float, default=0.9 if defaults else None,
                   help="... at this one-sided confidence (lower bound of the gain, by resampling "
                        "the measured step times and acceptance)")
    p.add_argument("--min-k", type=int, default=0 if defaults else None,
                   help="never schedule fewer drafts than this: an EAGLE-style drafter whose state "
                        "goes stale during K=0 steps can lose acceptance when drafting resumes")
    p.add_argument("--min-width", type=int, default=4 if defaults else None,
                   help="narrowest range in batch sizes (or 1/8 of its start, if more) that a table "
                        "keeps without a measured step-time cliff at its edge")


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
                   help="take more repeats, up to this many, while a cell's interval is wider "
                        "than --ci-target (default: --repeats + 2)")
    p.add_argument("--ci-target", type=float, default=0.02,
                   help="another repeat while a cell's interval is wider than this share of its "
                        "estimate (0.02: ±2%%), up to --max-repeats; each interval is a t interval "
                        "over the cell's repeats at 1 - 0.05/L for the L looks the rule can make")
    p.add_argument("--decode-tokens", type=int, default=65, help="tokens of the long run (paper: 65)")
    p.add_argument("--temperature", type=float, default=0.0, help="serving temperature")
    p.add_argument("--prompts", help="JSONL ({'prompt': ...}) or text file for acceptance")
    p.add_argument("--num-prompts", type=int, default=160)
    _rule_flags(p, defaults=True)
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
    p.add_argument("--preflight", action=argparse.BooleanOptionalAction, default=None,
                   help="also time vLLM without speculation at three batch sizes, so the "
                        "recommendation can say 'no speculation' (default: on, off with --workload)")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("table", help="rebuild the table from a profile, offline, with its evidence")
    p.add_argument("profile")
    p.add_argument("--format", choices=schedules.FORMATS, default="vllm",
                   help="vllm: num_speculative_tokens_per_batch_size; trtllm: TensorRT-LLM's "
                        "draft_len_schedule (keys are the last batch size of each range)")
    p.add_argument("--acceptance", help="override a_1..a_K, e.g. 0.7,0.5,0.3")
    p.add_argument("--save", metavar="PATH",
                   help="also write the profile, with this table and rule, to PATH (atomic): a "
                        "profile an older tuner wrote, re-tabled by this one's rule")
    _rule_flags(p, defaults=False)
    p.set_defaults(func=cmd_table)

    p = sub.add_parser("compare", help="predicted goodput loss of tables against the best k per B")
    p.add_argument("profile")
    p.add_argument("tables", nargs="+", help="tables as JSON, e.g. '[[1,64,3],[65,128,1],[129,512,0]]'")
    p.add_argument("--acceptance", help="override a_1..a_K")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("report", help="write the Markdown + PNG report of a profile")
    p.add_argument("profile")
    p.set_defaults(func=cmd_report)
