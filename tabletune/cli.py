"""`tabletune`: one console command, a small function per subcommand.

This is the application layer: it imports tuner/ and sidecar/, and nothing shipped imports it.
The bench is not here: it runs from a source checkout as `python -m benchmarks` (`make bench`).
Bad input ends in one line naming the argument, the value and the fix, and exit status 2 (every
TableTuneError); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from tuner.core.errors import InvalidInput, TableTuneError

Command = Callable[[argparse.Namespace], int]


def _model(args: argparse.Namespace) -> int:
    from tuner.engine_defaults import cache_dir
    from tuner.tiny_model import build

    paths = build(Path(args.out) if args.out else cache_dir() / "models", seed=args.seed,
                  force=args.force)
    print(json.dumps({"target": str(paths.target), "drafter": str(paths.drafter)}, indent=1))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from tuner.serve import serve_forever, server_config

    return asyncio.run(serve_forever(server_config(args), smoke_only=args.smoke))


def _sidecar(args: argparse.Namespace) -> int:
    from sidecar.app import run
    from sidecar.settings import from_args

    return run(from_args(args))


def _status(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from sidecar.state import SidecarState
    from tabletune.status import render
    from tuner.core.errors import EngineUnavailable

    url = args.sidecar.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise InvalidInput(f"--sidecar={args.sidecar!r}: give the sidecar's base URL, e.g. "
                           "http://127.0.0.1:9109")

    async def fetch() -> SidecarState:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=args.timeout_s)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as s, s.get(url + "/v1/state") as r:
                if r.status != 200:
                    raise EngineUnavailable(f"{url}/v1/state answered {r.status}; is this a "
                                            "TableTune sidecar (--listen-port)?")
                # the model the sidecar serves it from (sidecar/state.py)
                return SidecarState.model_validate(await r.json(content_type=None))
        except ValidationError as exc:  # a ValueError too: before the catch-all below
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"])
            raise EngineUnavailable(f"{url}/v1/state is not a TableTune sidecar's state "
                                    f"({where}: {error['msg']}); is this a TableTune sidecar "
                                    "(--listen-port)?") from None
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise EngineUnavailable(f"no sidecar answered at {url} ({exc.__class__.__name__}: "
                                    f"{exc}); is it running? pass --sidecar URL") from None

    state = asyncio.run(fetch())
    tty = sys.stdout.isatty() if args.format == "auto" else args.format == "table"
    sys.stdout.write(render(state, url, tty))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from tabletune.demo import run

    if args.load < 1:
        raise InvalidInput(f"--load={args.load}: open requests must be >= 1")
    if args.seconds <= 0:
        raise InvalidInput(f"--seconds={args.seconds}: each traffic phase needs a length > 0")
    return run(Path(args.out), seconds=args.seconds, load=args.load)


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

    from tuner.serve import add_parser as add_serve

    add_serve(sub).set_defaults(func=_serve)

    p = sub.add_parser("demo", help="the whole loop on the tiny model: tune, serve, sidecar, traffic shift")
    p.add_argument("--out", default="runs/demo", help="profile, report, logs (the profile is reused)")
    p.add_argument("--seconds", type=float, default=40.0, help="length of each traffic phase")
    p.add_argument("--load", type=int, default=8, help="open requests")
    p.set_defaults(func=_demo)

    from tuner.commands import add_parsers

    add_parsers(sub)

    from sidecar.settings import DESCRIPTION, USAGE, add_arguments

    p = sub.add_parser("status", help="one screen of what a running sidecar sees and decided")
    p.add_argument("--sidecar", default="http://127.0.0.1:9109", help="the sidecar's base URL")
    p.add_argument("--format", choices=["auto", "table", "plain"], default="auto",
                   help="auto: a table in a terminal, plain lines when piped")
    p.add_argument("--timeout-s", type=float, default=5.0)
    p.set_defaults(func=_status)

    p = sub.add_parser("sidecar", help="follow live acceptance and keep the engine's table optimal",
                       usage=USAGE, description=DESCRIPTION)
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
