"""Does the sidecar keep its 1-s control loop while its own HTTP server is hammered? (issue #39)

The sidecar runs in this process against an engine; a separate process opens `--connections`
clients that poll /metrics, /v1/state, /healthz and /readyz back to back for `--seconds`. The
control loop's period is read from its successful ticks (p50, p99, max); beside it the requests
per second served. `--cache-s 0` renders /v1/state and /metrics per request (the sidecar before
sidecar/server.py cached them). `--fake` serves the sidecar the tests' fake engine
(tests/sidecar/fake_engine.py): the loop's timing under HTTP load does not depend on what the
engine is, and a fake leaves the box's cores to the sidecar and its clients.

    python -m benchmarks.sidecar_http_load --fake --connections 0,200 --out DIR
    python -m benchmarks.sidecar_http_load --fake --connections 200 --cache-s 0 --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from pydantic import BaseModel, ConfigDict

from sidecar import server
from sidecar.app import main as sidecar_main
from sidecar.controller import Controller
from sidecar.settings import SidecarSettings

PATHS = ("/metrics", "/v1/state", "/healthz", "/readyz")


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Served(_Record):
    """The clients polling the sidecar, its body cache, the requests per second it served."""

    connections: int
    cache_s: float
    requests_per_s: float


class Periods(_Record):
    """The gaps between successful ticks (seconds; None: fewer than two ticks)."""

    ticks: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None


class LoadRun(Periods, Served):
    """One line of runs.jsonl: what was served, the control loop's period, the command."""

    command: str


async def _client(session: aiohttp.ClientSession, url: str, until: float) -> int:
    n = 0
    while time.monotonic() < until:
        try:
            async with session.get(url) as r:
                await r.read()
                n += 1
        except aiohttp.ClientError:
            await asyncio.sleep(0.01)
    return n


async def clients(port: int, connections: int, seconds: float) -> float:
    """`connections` clients polling the sidecar's routes in turn; requests per second."""
    until = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        done = await asyncio.gather(*[_client(s, f"http://127.0.0.1:{port}{PATHS[i % 4]}", until)
                                      for i in range(connections)])
    return sum(done) / seconds


def periods(ticks: list[float]) -> Periods:
    """p50, p99 and max of the gaps between successful ticks (seconds). Pure."""
    gaps = np.diff(np.asarray(ticks))
    if not gaps.size:
        return Periods(ticks=0, p50_s=None, p99_s=None, max_s=None)
    return Periods(ticks=int(gaps.size), p50_s=round(float(np.median(gaps)), 3),
                   p99_s=round(float(np.quantile(gaps, 0.99)), 3),
                   max_s=round(float(gaps.max()), 3))


@asynccontextmanager
async def engine(args: argparse.Namespace, tmp: Path) -> AsyncIterator[dict[str, Any]]:
    """The sidecar's settings fields for the engine: the fake, or the URLs given."""
    if not args.fake:
        yield {"profile": Path(args.profile), "engine_url": args.engine_url,
               "admin_url": args.admin_url, "model_name": args.model_name}
        return
    from tests.sidecar.fake_engine import TOKEN, FakeEngine, running, write_profile
    async with running(FakeEngine()) as fake:
        yield {"profile": write_profile(tmp / "profile.json"), "engine_url": fake.url,
               "admin_url": fake.url, "admin_token": TOKEN, "model_name": "tiny"}


async def one(args: argparse.Namespace, connections: int, tmp: Path, command: str) -> LoadRun:
    ticks: list[float] = []
    original = Controller.tick_succeeded

    def timed(self: Controller) -> None:
        ticks.append(time.monotonic())
        original(self)

    Controller.tick_succeeded = timed  # type: ignore[method-assign]
    server.CACHE_S = args.cache_s
    try:
        async with engine(args, tmp) as fields:
            s = SidecarSettings(**fields, interval_s=1.0, listen_port=0, checkpoint=None,
                                dry_run=True)
            stop, bound = asyncio.Event(), asyncio.get_running_loop().create_future()
            task = asyncio.create_task(sidecar_main(s, stop, bound.set_result, handle_signals=False))
            port = await asyncio.wait_for(bound, 60)
            await asyncio.sleep(3.0)  # its first ticks connect and warm
            first = len(ticks)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "benchmarks.sidecar_http_load", "--clients-only", str(port),
                str(connections), str(args.seconds), stdout=asyncio.subprocess.PIPE)
            out, _ = await proc.communicate()
            stop.set()
            await task
    finally:
        Controller.tick_succeeded = original  # type: ignore[method-assign]
    return LoadRun(connections=connections, cache_s=args.cache_s,
                   requests_per_s=round(float(out.decode().strip() or 0), 1),
                   **dict(periods(ticks[first:])), command=command)


async def run(args: argparse.Namespace, command: str) -> list[LoadRun]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.connections.split(",")):
            rows.append(await one(args, n, Path(tmp), command))
            print(rows[-1].model_dump_json(exclude={"command"}), file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--clients-only"]:  # the client process
        port, connections, seconds = int(argv[1]), int(argv[2]), float(argv[3])
        if not connections:  # the loop alone, as long
            time.sleep(seconds)
        print(asyncio.run(clients(port, connections, seconds)) if connections else 0.0)
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fake", action="store_true", help="the tests' fake engine")
    ap.add_argument("--profile", help="without --fake: the engine's profile")
    ap.add_argument("--engine-url", default="http://127.0.0.1:8000")
    ap.add_argument("--admin-url", default="http://127.0.0.1:8500")
    ap.add_argument("--model-name")
    ap.add_argument("--connections", default="0,200")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--cache-s", type=float, default=server.CACHE_S)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if not args.fake and not args.profile:
        print("error: --profile: required without --fake (the engine's profile)", file=sys.stderr)
        return 2
    rows = asyncio.run(run(args, "python -m benchmarks.sidecar_http_load " + shlex.join(argv)))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with (args.out / "runs.jsonl").open("a") as f:
            f.writelines(json.dumps(r.model_dump(mode="json")) + "\n" for r in rows)
    print(json.dumps([r.model_dump(mode="json", exclude={"command"}) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
