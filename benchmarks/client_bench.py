"""What the benches driven by vLLM's own client share: traffic flags, the record, the blocks.

The do-no-harm bench (benchmarks/noharm.py: the table alone against the table with the sidecar)
and the field bench (benchmarks/field.py: every policy's table) both run, block after block,
every traffic shape (benchmarks/traffic.py) once in each arm (benchmarks/client_arms.py) on the
same requests. Here: the flags that size the shapes and run the blocks, the JSON record both
write after every block (and `--resume` extends), and the loop that stops before a block that
would end past `--budget-s`.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib.util
import json
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from benchmarks.arm_run import ArmRun, BlockRun
from benchmarks.client_record import ClientRecord, Part, ShapeMeta, parse_error, whole
from benchmarks.json_out import dumped
from benchmarks.engines import max_model_len
from benchmarks.traffic import KINDS, Prompts, Shape, Sizes, check_sizes, read_prompts, shapes
from tuner import flags
from tuner.core.errors import InvalidInput, TableTuneError
from tuner.core.files import write_atomic

WARMUP_SEED = 10_000  # warmup traffic: its own requests, never a measured block's
R = TypeVar("R", bound=ClientRecord)


@dataclass(frozen=True, slots=True)
class Blocks:
    """How many blocks, within what time, and the unmeasured rounds first."""

    blocks: int
    budget_s: float
    warmup_rounds: int
    seed: int


def bench_parser(doc: str | None, out: str) -> argparse.ArgumentParser:
    """A bench's parser with the flags every bench beside an engine has."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True, help="from `tabletune tune`")
    ap.add_argument("--model", help="model path (default: the profile's)")
    ap.add_argument("--drafter", help="the drafter's folder, for a profile of a draft model or "
                    "EAGLE head (default: the profile's, found as the model is)")
    ap.add_argument("--out", default=out)
    return ap


def run_main(argv: list[str], ap: argparse.ArgumentParser,
             start: Callable[[argparse.Namespace, list[str]], Coroutine[Any, Any, Any]],
             ) -> tuple[int, Any]:
    """Parse ``argv`` and run the bench: (0, its result), or (2, None) on bad input and (1, None)
    when the engine or the sidecar went away (one line on stderr; the files hold the blocks
    before it)."""
    args = ap.parse_args(argv)
    try:
        return 0, asyncio.run(start(args, argv))
    except (InvalidInput, TableTuneError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return (2 if isinstance(exc, InvalidInput) else 1), None


def add_traffic_flags(ap: argparse.ArgumentParser, *, concurrency: str = "8",
                      rates: str = "2") -> None:
    """The flags that size the shapes (benchmarks/traffic.Sizes) and run the blocks."""
    ap.add_argument("--resume", action="store_true", help="add blocks to --out's record")
    ap.add_argument("--shapes", default=",".join(KINDS), help=f"some of {','.join(KINDS)}")
    ap.add_argument("--blocks", type=int, default=6, help="blocks in all (resumed ones count)")
    ap.add_argument("--budget-s", type=float, default=3600.0,
                    help="this call ends before a block that would end later (server start included)")
    ap.add_argument("--concurrency", default=concurrency,
                    help="burst: one shape per --max-concurrency")
    ap.add_argument("--rates", default=rates, help="poisson: one shape per rate (requests/s); "
                    "mixed runs at the first")
    ap.add_argument("--burstiness", type=float, default=0.5, help="the client's gamma shape (1: Poisson)")
    ap.add_argument("--ramp", default="1,8", help="ramp: LOW,HIGH requests/s")
    ap.add_argument("--input-len", type=int, default=96)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--range-ratio", type=float, default=0.5, help="lengths L·(1 ± r)")
    ap.add_argument("--mixed-input-len", type=int, default=384)
    ap.add_argument("--mixed-range", type=float, default=0.9)
    ap.add_argument("--run-s", type=float, default=20.0, help="arrival-driven shapes' length")
    ap.add_argument("--waves", type=int, default=4, help="a burst sends WAVES x its concurrency")
    ap.add_argument("--idle-s", type=float, default=3.0, help="quiet before each arm's runs")
    ap.add_argument("--prompts", metavar="FILE.jsonl",
                    help='your own prompts instead of random ones (vLLM\'s custom dataset: one '
                         '{"prompt": ..., "output_tokens": N} a line, output_tokens optional, '
                         'else --output-len); --input-len and the mixed shape do not apply')
    ap.add_argument("--chat-template", action="store_true",
                    help="with --prompts: wrap each in the model's chat template (else sent as written)")
    ap.add_argument("--warmup-rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)


def traffic(args: argparse.Namespace, engine_args: tuple[str, ...]) -> tuple[tuple[Shape, ...], Sizes]:
    """The shapes the flags name, checked against the engine's max_model_len: InvalidInput
    names the flag, its value and the fix."""
    ramp = flags.ints(args.ramp, "--ramp", "1,8")
    if len(ramp) != 2:
        raise InvalidInput(f"--ramp={args.ramp!r}: give LOW,HIGH requests/s, e.g. 1,8")
    sizes = Sizes(concurrency=tuple(flags.ints(args.concurrency, "--concurrency", "8,32")),
                  rates=tuple(flags.rates(args.rates, "--rates") or ()), burstiness=args.burstiness,
                  ramp=(ramp[0], ramp[1]), input_len=args.input_len, output_len=args.output_len,
                  range_ratio=args.range_ratio, mixed_input_len=args.mixed_input_len,
                  mixed_range=args.mixed_range, run_s=args.run_s, waves=args.waves,
                  prompts=prompts_of(args))
    if not sizes.rates:
        raise InvalidInput(f"--rates={args.rates!r}: give requests/s like 1,4")
    check_sizes(sizes, max_model_len(engine_args), args.shapes.split(","))
    for flag, value, low in (("--blocks", args.blocks, 1), ("--waves", args.waves, 1),
                             ("--warmup-rounds", args.warmup_rounds, 0)):
        if value < low:
            raise InvalidInput(f"{flag}={value}: must be >= {low}")
    for flag, seconds in (("--idle-s", args.idle_s), ("--run-s", args.run_s),
                          ("--budget-s", args.budget_s)):
        if seconds < 0:
            raise InvalidInput(f"{flag}={seconds}: seconds must be >= 0")
    return tuple(shapes(args.shapes.split(","), sizes)), sizes


def prompts_of(args: argparse.Namespace) -> Prompts | None:
    """--prompts read and checked (None without it); InvalidInput names the flag."""
    if args.chat_template and not args.prompts:
        raise InvalidInput("--chat-template: applies to --prompts FILE.jsonl only (random "
                           "prompts are token ids); give --prompts or drop it")
    if not args.prompts:
        return None
    if importlib.util.find_spec("pandas") is None:  # found before an engine starts, not after
        raise InvalidInput(f"--prompts={args.prompts}: vLLM's custom dataset reads the file with "
                           "pandas, which is not installed; pip install pandas")
    path = Path(args.prompts)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"--prompts={args.prompts}: cannot read it ({exc}); give a JSONL "
                           "file of prompts") from None
    return read_prompts(args.prompts, text, args.chat_template)


def blocks_of(args: argparse.Namespace) -> Blocks:
    return Blocks(args.blocks, args.budget_s, args.warmup_rounds, args.seed)


def shape_meta(shapes_: tuple[Shape, ...]) -> list[ShapeMeta]:
    return [ShapeMeta(name=s.name, runs=[r.flags() for r in s.runs]) for s in shapes_]


def record_for(path: Path, fresh: R, resume: bool, same: tuple[str, ...]) -> R:
    """A new record, or (--resume) the one at `path`, whose meta must agree on the fields
    `same` (the shapes, the arms): blocks of another design would not pair with this call's."""
    if not resume or not path.exists():
        return fresh
    try:
        old = type(fresh).model_validate_json(path.read_text())
    except ValidationError as exc:
        raise InvalidInput(f"--resume: {path} is not this bench's record ({parse_error(exc)}); "
                           "pass another --out") from None
    for key in same:
        if getattr(old.meta, key) != getattr(fresh.meta, key):
            raise InvalidInput(f"--resume: {path} ran the {key} {_names(getattr(old.meta, key))} "
                               "with other sizes or flags than this command; resume with its "
                               f"command ({old.meta.command}) or pass another --out")
    return old


def _names(value: Any) -> Any:
    """The shapes by their names (their runs are too long to print), anything else as it is."""
    if isinstance(value, list) and all(isinstance(v, ShapeMeta) for v in value):
        return [v.name for v in value]
    return value


def save(path: Path, record: R, summarize: Callable[[R], dict[str, Any]]) -> dict[str, Any]:
    """The record and its summary.json beside it, each written whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(dumped(record), indent=1))
    summary = summarize(record)
    write_atomic(path.parent / "summary.json", json.dumps(summary, indent=1))
    return summary


# (block, seed) -> its runs, each with its place in the block's order
Round = Callable[[int, int], Awaitable[list[tuple[int, ArmRun]]]]


async def run_blocks(one_round: Round, b: Blocks, record: ClientRecord, info: Part,
                     first: int, t0: float, save_all: Callable[[], dict[str, Any]],
                     say: Callable[[str], None],
                     describe: Callable[[dict[str, Any]], str] = lambda _: "",
                     reserve: Callable[[int, float], float] = lambda _n, _s: 0.0) -> None:
    """The warmup rounds (unmeasured), then blocks `first`.. until `b.blocks`, saved after
    each; a block that would end past the budget (at the longest round's pace) is not begun,
    nor one that leaves less than `reserve(blocks run with it, a block's seconds)` after it
    (the time later work needs for those blocks)."""
    block_s = 0.0
    for r in range(b.warmup_rounds):
        t = time.monotonic()
        say(f"warmup round {r + 1}/{b.warmup_rounds} (unmeasured)")
        runs = await one_round(-1 - r, b.seed + WARMUP_SEED + info.part)
        record.warmup += placed(runs, -1 - r, info.part)
        block_s = max(block_s, time.monotonic() - t)
        save_all()
    for block in range(first, b.blocks):
        if block_s and (time.monotonic() - t0 + block_s
                        + reserve(block - first + 1, block_s) > b.budget_s):
            info.stop_reason = (f"budget: block {block} would end after --budget-s "
                                f"{b.budget_s:g} (a block takes ~{block_s:.0f} s)")
            say(info.stop_reason)
            return
        t = time.monotonic()
        runs = await one_round(block, b.seed + block)
        record.runs += placed(runs, block, info.part)
        block_s = max(block_s, time.monotonic() - t)
        info.blocks = block - first + 1
        summary = save_all()
        say(f"block {block} done in {time.monotonic() - t:.0f} s; {describe(summary)}")


def placed(runs: list[tuple[int, ArmRun]], block: int, part: int) -> list[BlockRun]:
    """A round's runs as the record keeps them (every field written)."""
    return [whole(run.placed(block, position, part)) for position, run in runs]


async def recorded(blocks: Awaitable[None], info: Part, t0: float,
                   close: Callable[[], Awaitable[None]], keep: Callable[[], object]) -> None:
    """Run the blocks; whatever ends them, say why in ``info``, close the arms, then keep the
    wall time, the sidecar's log and the record (``keep``): nothing measured is lost."""
    try:
        await blocks
    except BaseException as exc:
        info.stop_reason = f"error: {type(exc).__name__}: {exc}"
        raise
    finally:
        await close()
        info.wall_s = round(time.monotonic() - t0, 1)
        keep()


def next_part(record: ClientRecord) -> tuple[Part, int]:
    """This call's entry in the record's parts, and the first block it runs."""
    first = 1 + max((r.block for r in record.runs), default=-1)
    info = Part(part=len(record.meta.parts), first_block=first, stop_reason="blocks")
    record.meta.parts.append(info)
    return info, first


def run_tag(part: int, block: int, shape: str, arm: str) -> str:
    """The name of a run's client files: a warmup round (block < 0) carries its call's part,
    since every resumed call warms up as block -1 again."""
    return f"b{block}-{shape}-{arm}" if block >= 0 else f"p{part}-b{block}-{shape}-{arm}"


def keep_log(log: Path, dest: Path) -> None:
    """A sidecar's whole log, gzipped beside the results (its decisions and changes)."""
    if log.exists():
        dest.write_bytes(gzip.compress(log.read_bytes()))


def printer(name: str) -> Callable[[str], None]:
    def say(text: str) -> None:
        print(f"{name}: {text}", file=sys.stderr, flush=True)
    return say
