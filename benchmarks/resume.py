"""Does a drafter lose acceptance when drafting resumes after a K=0 stretch?

Upstream reports (TensorRT-LLM PR #16888: one-engine drafters whose KV cache and hidden-state
pools are not refreshed while the schedule says 0) say an EAGLE-style drafter can. vLLM runs one
drafter forward even at K=0 (vllm-notes §1.2), so it may not. Measured from the plugin's
counters on one engine, the same traffic in both arms, alternating blocks:
- steady: the table [[1, max, K]]: every step drafts K;
- resume: the table [[1, max, 0]] with exploration runs (every `--every` steps a run of
  `--run` steps at another k): each run's first verified drafts follow a K=0 stretch
  (`tabletune_resume_*_per_pos`, stretches of >= 4 steps).
Per position i: P(first i+1 drafts accepted | offered > i), with a 95% Wilson interval.

    python -m benchmarks.resume --method draft_model --out runs/resume-draft
    python -m benchmarks.resume --method ngram --out runs/resume-ngram
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from pathlib import Path
from typing import Any

from benchmarks.scenario import Rig, Startup, serving
from tuner.core.admin_api import StatsReply
from tuner.core.engine_client import EngineClient
from tuner.engine_defaults import default_model
from tuner.load import closed_loop
from tuner.core.table import Table

Z = 1.959963984540054


def wilson(k: int, n: int) -> tuple[float, float, float]:
    """The share k/n with its 95% Wilson score interval (pure)."""
    if n == 0:
        return (float("nan"),) * 3
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return p, centre - half, centre + half


def rates(accepted: list[int], drafted: list[int]) -> list[dict[str, float]]:
    out = []
    for a, d in zip(accepted, drafted, strict=True):
        p, lo, hi = wilson(a, d)
        out.append({"rate": round(p, 4), "ci_low": round(lo, 4), "ci_high": round(hi, 4), "n": d})
    return out


async def arm(url: str, engine: EngineClient, table: Table, every: int, run: int,
              prompts: list[Any], load: int, seconds: float, resume: bool) -> tuple[list[int], list[int]]:
    """(accepted, drafted) per position over one block of this arm."""
    await engine.put_table(table)
    await engine.put_policy(explore_every=every if resume else 0, explore_run=run)
    s0 = await engine.get_stats()
    await closed_loop(url, prompts, load, 64, 1.0, seconds)
    s1 = await engine.get_stats()
    def pick(s: StatsReply) -> tuple[list[int], list[int]]:
        if resume:
            return list(s.resume_accepted_per_pos), list(s.resume_drafted_per_pos)
        return list(s.accepted_per_pos), list(s.drafted_per_pos)

    (a0, d0), (a1, d1) = pick(s0), pick(s1)
    return [y - x for x, y in zip(a0, a1)], [y - x for x, y in zip(d0, d1)]


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    paths = default_model()
    n, K = 16, 3
    rig = Rig(model=paths.target, method=args.method, K=K, max_num_seqs=n,
              drafter=paths.drafter if args.method == "draft_model" else None,
              engine_args=("--no-enable-prefix-caching",), replay=None, out=Path(args.out))
    prompts = rig.prompts(seed=9)
    totals = {name: ([0] * K, [0] * K) for name in ("steady", "resume")}
    async with serving(rig, Startup(table=Table.from_list([[1, n, K]]), token=None)) as up:
        for block in range(args.blocks):
            for name in (("steady", "resume") if block % 2 == 0 else ("resume", "steady")):
                table = Table.from_list([[1, n, K if name == "steady" else 0]])
                acc, dra = await arm(up.server.url, up.admin, table, args.every, args.run, prompts,
                                     args.load, args.seconds, name == "resume")
                for i in range(K):
                    totals[name][0][i] += acc[i]
                    totals[name][1][i] += dra[i]
                print(json.dumps({"block": block, "arm": name, "accepted": acc, "drafted": dra}),
                      flush=True)
    return {"method": args.method, "K": K, "load": args.load, "blocks": args.blocks,
            "block_s": args.seconds, "explore_every": args.every, "explore_run": args.run,
            "steady": rates(*totals["steady"]), "resume": rates(*totals["resume"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", choices=["ngram", "draft_model"], default="draft_model")
    ap.add_argument("--load", type=int, default=8)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each arm's block")
    ap.add_argument("--every", type=int, default=16, help="an exploration run every N steps")
    ap.add_argument("--run", type=int, default=4, help="steps per exploration run")
    ap.add_argument("--out", default="runs/resume")
    args = ap.parse_args(argv)
    result = asyncio.run(measure(args))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "resume.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
