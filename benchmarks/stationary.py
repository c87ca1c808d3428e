"""False step-time changes under a stationary load (#27.3): how often the sidecar's change test
fires when nothing changes.

One vLLM CPU with the plugin, the table the profile chose, 8 closed-loop clients on the
profile's repetitive prompts at temperature 0 for ``--seconds``, the sidecar beside it as the
benchmarks run it (0.5 s scrapes: benchmarks/stateful.sidecar). Every ``traffic change`` event
in the sidecar's log is false here; the step-time ones are what the calibration bounds.

    python -m benchmarks.stationary --profile benchmarks/results/cpu-tiny/profile.json \\
        --out benchmarks/results/cpu-tiny/stationary-changes --seconds 600
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.engines import TOKEN, admin_client
from benchmarks.stateful import sidecar
from tuner.engine_defaults import plugin_env, resolve_model, vocab_size
from tuner.launcher import ServerConfig, SpeculativeSpec, free_port, launch
from tuner.load import Request, StationaryLoad
from tuner.core.profile import load
from tuner.prompts import repetitive
from tuner.core.table import Table

MAX_TOKENS = 48


def changes(log: Path) -> dict[str, Any]:
    """The sidecar log's traffic-change events, by kind."""
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    found = [e for e in events if e.get("event") == "traffic change"]
    return {"traffic_changes": len(found),
            "step_time_changes": sum(1 for e in found if e.get("step_times")),
            "acceptance_changes": sum(1 for e in found if e.get("acceptance")),
            "rebuilds": sum(1 for e in events if e.get("event") == "rebuild"),
            "events": found}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    profile = load(Path(args.profile))
    model = resolve_model(profile.engine.model, None)
    requests = [Request(p, MAX_TOKENS) for p in repetitive(64, vocab_size(model), seed=11)]
    out, admin_port = Path(args.out), free_port()
    assert profile.table is not None
    cfg = ServerConfig(model=model, max_num_seqs=profile.engine.max_num_seqs,
                       env=plugin_env(admin_port, token=TOKEN),
                       speculative=SpeculativeSpec(num_speculative_tokens=profile.K,
                                                   table=Table.from_list(profile.table)))
    async with launch(cfg, log_dir=out / "logs") as server, admin_client(admin_port) as admin:
        async with StationaryLoad(server.url, requests, args.load, 0.0, seed=1) as traffic:
            async with sidecar(Path(args.profile), out / "logs", server.url, admin.admin_url):
                t0 = time.monotonic()
                while time.monotonic() - t0 < args.seconds:
                    await asyncio.sleep(5)
                    traffic.check()
                wall = time.monotonic() - t0
    (log,) = sorted((out / "logs").glob("sidecar-*.log"))
    return {"seconds": round(wall, 1), "load": args.load, "interval_s": 0.5, **changes(log)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--load", type=int, default=8)
    args = p.parse_args()
    result = asyncio.run(run(args))
    Path(args.out, "stationary.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "events"}))


if __name__ == "__main__":
    main()
