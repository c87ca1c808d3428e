"""`tabletune`: one console command, a small function per subcommand."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from tuner.errors import TableTuneError

Command = Callable[[argparse.Namespace], int]


def _model(args: argparse.Namespace) -> int:
    from tuner.engine_defaults import cache_dir
    from tuner.tiny_model import build

    paths = build(Path(args.out) if args.out else cache_dir() / "models", seed=args.seed,
                  force=args.force)
    print(json.dumps({"target": str(paths.target), "drafter": str(paths.drafter)}, indent=1))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from tuner.serve import serve_forever

    return asyncio.run(serve_forever(args))


def _sidecar(args: argparse.Namespace) -> int:
    from sidecar.app import run
    from sidecar.settings import from_args

    return run(from_args(args))


def _demo(args: argparse.Namespace) -> int:
    from tuner.demo import run

    return run(Path(args.out), seconds=args.seconds, load=args.load)


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="model path (default: the embedded tiny Llama)")
    p.add_argument("--method", default="ngram", choices=["ngram", "draft_model"])
    p.add_argument("--num-speculative-tokens", "-K", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--port", type=int, default=None, help="vLLM port (default: a free one)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tabletune", description=(
        "Measured, self-correcting draft-length tables for vLLM Dynamic Speculative Decoding."))
    ap.add_argument("-v", "--verbose", action="store_true")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("model", help="build the embedded tiny model and drafter (cached)")
    p.add_argument("--out", help="folder (default: $TABLETUNE_CACHE/models)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="rebuild even if present")
    p.set_defaults(func=_model)

    p = sub.add_parser("serve", help="start vLLM with the TableTune plugin and a DSD table")
    _add_engine_args(p)
    p.add_argument("--table", default=None, help="DSD table as JSON, e.g. '[[1,8,3],[9,32,1]]'")
    p.add_argument("--admin-port", type=int, default=None, help="plugin admin port (off if unset)")
    p.add_argument("--reject-all", action="store_true", help="timing mode: reject every draft")
    p.add_argument("--emulate", default=None, help="acceptance emulator rates, e.g. 0.7,0.5,0.3")
    p.add_argument("--smoke", action="store_true", help="send a few completions, print, and stop")
    p.set_defaults(func=_serve)

    p = sub.add_parser("demo", help="the whole loop on the tiny model: tune, serve, sidecar, traffic shift")
    p.add_argument("--out", default="runs/demo", help="profile, report, logs (the profile is reused)")
    p.add_argument("--seconds", type=float, default=40.0, help="length of each traffic phase")
    p.add_argument("--load", type=int, default=8, help="open requests")
    p.set_defaults(func=_demo)

    from tuner.commands import add_parsers

    add_parsers(sub)

    from benchmarks.cli import add_parser as add_bench

    add_bench(sub)

    from sidecar.settings import add_arguments

    p = sub.add_parser("sidecar", help="follow live acceptance and keep the engine's table optimal",
                       description="Scrape vLLM's /metrics, estimate acceptance, rebuild the table "
                                   "with the profile's step times, push it (or only recommend).")
    add_arguments(p)
    p.set_defaults(func=_sidecar)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    func: Command = args.func
    try:
        return func(args)
    except TableTuneError as exc:
        print(f"tabletune {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tabletune {args.command}: interrupted; everything started was stopped",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
