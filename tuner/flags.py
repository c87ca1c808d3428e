"""Command-line flags shared by several commands, and the parsers that turn their text into values.

Every parser raises InvalidInput naming the flag, the value and the fix, so a command answers a
typo with one line and exit status 2 (tabletune/cli.py), never a traceback.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import ValidationError

from tuner.core.errors import InvalidInput, InvalidTable
from tuner.replay import Replay
from tuner.core.table import Table

__all__ = ["add_engine_flags", "ints", "rates", "replay", "table"]


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """--engine-arg, --emulate, --emulate-with: how the measured vLLM is started."""
    p.add_argument("--engine-arg", action="append", metavar="ARG",
                   help="extra vLLM argument, repeatable: --engine-arg=--tensor-parallel-size=2 "
                        "--engine-arg=--load-format=dummy")
    p.add_argument("--emulate", help="replay this acceptance instead of the drafter's own, e.g. "
                                     "0.75,0.55,0.4: for dummy weights")
    p.add_argument("--emulate-with", choices=["plugin", "vllm"], default="plugin",
                   help="plugin: the plugin's emulator, which can only lower acceptance (ngram on "
                        "repetitive output); vllm: vLLM's synthetic rejection sampling, which forces "
                        "it (any drafter; GPU builds only)")


def replay(args: argparse.Namespace, K: int | None = None) -> Replay | None:
    """--emulate/--emulate-with as a Replay (None without --emulate), checked against K."""
    if not getattr(args, "emulate", None):
        return None
    try:
        out = Replay.parse(args.emulate, args.emulate_with)
        if K is not None:
            out.check_k(K)
        return out
    except (ValueError, ValidationError) as exc:
        raise InvalidInput(f"--emulate={args.emulate!r}: {_reason(exc)}") from None


def rates(raw: str | None, flag: str) -> list[float] | None:
    """'0.7,0.5,0.3' -> [0.7, 0.5, 0.3]; None stays None."""
    if raw is None:
        return None
    try:
        return [float(x) for x in raw.split(",")]
    except ValueError:
        raise InvalidInput(f"{flag}={raw!r}: expected rates like 0.7,0.5,0.3") from None


def ints(raw: str, flag: str, example: str = "1,2,4,8,16") -> list[int]:
    """'1,2,4' -> [1, 2, 4], each >= 1."""
    try:
        values = [int(x) for x in raw.split(",")]
    except ValueError:
        raise InvalidInput(f"{flag}={raw!r}: expected integers like {example}") from None
    if not values or min(values) < 1:
        raise InvalidInput(f"{flag}={raw!r}: every value must be >= 1, e.g. {example}")
    return values


def table(raw: str, flag: str) -> Table:
    """A table as vLLM's JSON, e.g. '[[1,8,3],[9,32,1]]'."""
    try:
        obj: Any = json.loads(raw)
    except ValueError:
        raise InvalidInput(f"{flag}={raw!r}: not JSON; write a table as '[[1,8,3],[9,32,1]]' "
                           "([start_bs, end_bs, K] ranges)") from None
    try:
        return Table.parse_list(obj)
    except InvalidTable as exc:
        raise InvalidInput(f"{flag}={raw!r}: {exc}") from None


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
    return str(exc)
