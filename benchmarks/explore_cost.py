"""What the sidecar's exploration across k costs in throughput (issue #18.2: keep it within 1%).

One vLLM with the plugin runs one table under a stationary load; in paired blocks (alternating
order) a window with exploration off and a window with the sidecar's default exploration
(`--explore-every` 150, `--explore-run` 3: every 150 steps a run of 3 steps at another allowed
k, the k's taking turns), throughput from the engine's counters (benchmarks/window.py). Per
load: the ratio explore/off per block, median with a 95% bootstrap interval.

    python -m benchmarks.explore_cost --profile PROFILE --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.engines import TOKEN, admin_client
from benchmarks.switch import interval
from benchmarks.window import measure, settle
from tuner.engine_client import EngineClient
from tuner.engine_defaults import plugin_env, resolve_model, vocab_size
from tuner.launcher import ServerConfig, SpeculativeSpec, free_port, launch
from tuner.load import Request, StationaryLoad
from tuner.profile import load
from tuner.prompts import repetitive
from tuner.table import every_k_table


async def run(args: argparse.Namespace) -> dict[str, Any]:
    profile = load(Path(args.profile))
    model = resolve_model(profile.engine.model, None)
    table = profile.build().table
    requests = [Request(p, args.max_tokens) for p in repetitive(64, vocab_size(model), seed=11)]
    K, n = profile.K, profile.engine.max_num_seqs
    admin_port = free_port()
    cfg = ServerConfig(model=model, max_num_seqs=n, env=plugin_env(admin_port, token=TOKEN),
                       speculative=SpeculativeSpec(num_speculative_tokens=K,
                                                   table=every_k_table(K, n)))
    out: dict[str, Any] = {"table": table.to_list(), "explore_every": args.explore_every,
                           "explore_run": args.explore_run, "loads": {},
                           "command": "python -m benchmarks.explore_cost " + " ".join(sys.argv[1:])}
    async with (launch(cfg, log_dir=Path(args.out) / "logs") as server,
                admin_client(admin_port) as admin, EngineClient(engine_url=server.url) as engine):
        await admin.put_table(table)
        for load_n in args.loads:
            rows = []
            async with StationaryLoad(server.url, requests, load_n, seed=load_n) as traffic:
                await asyncio.sleep(2.0)
                for b in range(args.blocks):
                    got = {}
                    for every in ((0, args.explore_every) if b % 2 == 0 else (args.explore_every, 0)):
                        await admin.put_policy(explore_every=every, explore_run=args.explore_run)
                        s0 = await admin.get_stats()
                        await settle(admin, s0.table_version, 8, time.monotonic(), exact=False)
                        s1 = await admin.get_stats()
                        m = await measure(engine, admin, traffic, args.window_s)
                        s2 = await admin.get_stats()
                        share = ((s2.explore_steps - s1.explore_steps)
                                 / max(s2.engine_steps - s1.engine_steps, 1))
                        got[every] = (m.tokens_per_s, round(share, 4))
                    rows.append({"off_tps": got[0][0], "explore_tps": got[args.explore_every][0],
                                 "explore_share": got[args.explore_every][1]})
                    print(f"N={load_n} block {b + 1}/{args.blocks}", file=sys.stderr)
            ratios = [r["explore_tps"] / r["off_tps"] for r in rows]
            out["loads"][str(load_n)] = {"blocks": rows, "explore_over_off": interval(ratios)}
        await admin.put_policy(explore_every=0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True)
    ap.add_argument("--out", default="runs/explore-cost")
    ap.add_argument("--loads", type=lambda s: [int(x) for x in s.split(",")], default=[4, 16])
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--window-s", type=float, default=4.0)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--explore-every", type=int, default=150)
    ap.add_argument("--explore-run", type=int, default=3)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run(args))
    (out / "explore-cost.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v["explore_over_off"] for k, v in result["loads"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
