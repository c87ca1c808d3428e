"""Scenario experiments with the real sidecar: repair of a wrong table is in `bench`
(sidecar-from-quarter); this is the workload switch.

A stable workload A (the one the profile was tuned on), then a switch to workload B with very
different acceptance. Measured on one engine, same prompts, 5 s windows:
- stale:      B under A's table, no controller;
- best:       B under the table built from the profile with B's own measured acceptance;
- controller: the sidecar running through the switch (prior = A), windows after the switch.
Recovery in the first minute = (mean controller - stale) / (best - stale); time to 90% / 96%
is the end of the first window whose (controller - stale) / (best - stale) reaches it.

    python -m benchmarks.switch --profile PROFILE --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


from benchmarks.engines import TOKEN, admin_client
from benchmarks.stateful import sidecar
from tuner.acceptance import per_position
from tuner.engine_defaults import resolve_model, plugin_env, vocab_size
from tuner.launcher import ServerConfig, SpeculativeSpec, free_port, launch
from tuner.load import closed_loop
from tuner.profile import load
from tuner.prompts import repetitive
from tuner.engine_client import EngineClient
from tuner.table import Table

WINDOW_S = 5.0


async def windows(url: str, prompts: list[Any], load_n: int, temp: float, n: int) -> list[float]:
    return [(await closed_loop(url, prompts, load_n, 48, 0.5, WINDOW_S, temp)).tokens_per_s
            for _ in range(n)]


async def measure_a(url: str, admin: EngineClient, prompts: list[Any], load_n: int,
                    temp: float) -> list[float]:
    s0 = await admin.get_stats()
    await closed_loop(url, prompts, load_n, 48, 0.0, 10.0, temp)
    s1 = await admin.get_stats()
    acc = [b - a for a, b in zip(s0.accepted_per_pos, s1.accepted_per_pos)]
    dr = [b - a for a, b in zip(s0.drafted_per_pos, s1.drafted_per_pos)]
    return [float(x) for x in per_position(acc, dr)]


def reach(traj: list[float], stale: float, best: float, level: float) -> float | None:
    for i, t in enumerate(traj):
        if best > stale and (t - stale) / (best - stale) >= level:
            return (i + 1) * (WINDOW_S + 0.5)
    return None


async def run(profile_path: Path, out: Path, load_n: int, temp_a: float, temp_b: float) -> dict[str, Any]:
    profile = load(profile_path)
    model = resolve_model(profile.engine.model, None)
    vocab = vocab_size(model)
    prompts = repetitive(64, vocab, seed=11)
    K, n = profile.K, profile.engine.max_num_seqs
    admin_port = free_port()
    cfg = ServerConfig(model=model, max_num_seqs=n, env=plugin_env(admin_port, token=TOKEN),
                       speculative=SpeculativeSpec(num_speculative_tokens=K,
                                                   table=Table.from_list([[1, n, K]])))
    async with launch(cfg, log_dir=out / "logs") as server, admin_client(admin_port) as admin:
        # Each workload's own best table: the profile's step times with its measured a_i.
        a_a = await measure_a(server.url, admin, prompts, load_n, temp_a)
        a_b = await measure_a(server.url, admin, prompts, load_n, temp_b)
        table_a = profile.build([max(0.0, x) for x in a_a]).table
        table_b = profile.build([max(0.0, x) for x in a_b]).table
        await admin.put_table(table_a)
        stale = await windows(server.url, prompts, load_n, temp_b, 3)
        await admin.put_table(table_b)
        best = await windows(server.url, prompts, load_n, temp_b, 3)
        await admin.put_table(table_a)
        async with sidecar(profile_path, out / "logs", server.url, admin.admin_url,
                           ("--prior-decay", "0.5")):
            before = await windows(server.url, prompts, load_n, temp_a, 3)
            t_switch = time.monotonic()
            traj = await windows(server.url, prompts, load_n, temp_b, int(60 // (WINDOW_S + 0.5)))
            after_table = (await admin.get_table()).table
    st, bt = statistics.median(stale), statistics.median(best)
    recovery = (statistics.mean(traj) - st) / (bt - st) if bt > st else None
    return {"load": load_n, "workload_a": f"repetitive prompts, temperature {temp_a}",
            "workload_b": f"repetitive prompts, temperature {temp_b}", "a_a": a_a, "a_b": a_b,
            "table_a": table_a.to_list(), "table_b": table_b.to_list(), "table_after": after_table,
            "stale_tps": stale, "best_tps": best, "before_switch_tps": before,
            "controller_tps": traj, "stale_loss": 1 - st / bt if bt else None,
            "recovery_first_minute": recovery,
            "seconds_to_90": reach(traj, st, bt, 0.90), "seconds_to_96": reach(traj, st, bt, 0.96),
            "window_s": WINDOW_S, "measured_for_s": time.monotonic() - t_switch}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True)
    ap.add_argument("--out", default="runs/switch")
    ap.add_argument("--load", type=int, default=8)
    ap.add_argument("--temp-a", type=float, default=0.0)
    ap.add_argument("--temp-b", type=float, default=1.5)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run(Path(args.profile), out, args.load, args.temp_a, args.temp_b))
    (out / "switch.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
