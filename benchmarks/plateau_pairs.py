"""How many pairs a burst's plateau gives a duel, by duel run length (issue #34 item 6).

Simulated bursts of 64 through the plugin's own DuelClock (which k each step runs) and the
sidecar's own ``pairs_in`` (which runs pair), so the count follows the deployed rules
(benchmarks/results/calibration/README.md says what GPU run it explains).

A burst: ``REQUESTS`` requests join ``RAMP`` a step (a prefill ramp), each wanting
U(OUT_LO, OUT_HI) tokens; a step advances each by τ(k) (emulated acceptance 0.75/0.55/0.40).
The table is the quarter table (k=3 to B 16, 1 to 32, 0 above). The duel asks k=3 at
B 57–64 at the urgent share. A step's seconds: a linear T(B, k) with 2% noise. Runs are at
least 2·run apart plus a jitter of up to run − 1, and a run starts only after a run's length
of the table's k (vllm_patch/duel.py), so a plateau of ~100 steps holds one 16-step run with
its references; the next falls into the drain, where B leaves the band.
A model of a burst, not a measurement: it says what the rules allow, not what a GPU does.

    python -m benchmarks.plateau_pairs --bursts 200 --runs 16,8 \\
        --out benchmarks/results/calibration/plateau_pairs.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.json_out import emit
from sidecar.measured import pairs_in
from tuner.core.admin_api import Step
from vllm_patch.duel import DuelClock

REQUESTS, RAMP, OUT_LO, OUT_HI = 64, 8, 96, 288
TAU = (1.0, 1.75, 2.3, 2.7)     # 1 + Σ a_i at 0.75/0.55/0.40
DUEL = ((57, 64, (3,)),)        # the plateau's duel: k=3 against the quarter table's k=0
SHARE, HORIZON = 0.25, 10_000   # the sidecar's urgent share, the plugin's horizon
IDLE_SEQ = 5                    # seq numbers skipped between bursts (no pair across an idle gap)


def table_k(B: int) -> int:
    return 3 if B <= 16 else (1 if B <= 32 else 0)


def seconds(B: int, k: int) -> float:
    return 0.004 * (1 + 0.01 * B) * (1 + 0.15 * k)


def burst(rng: np.random.Generator, clock: DuelClock, seq: int, run: int) -> list[Step]:
    """One burst's steps, from the first prefill to the last request's end."""
    left = rng.uniform(OUT_LO, OUT_HI, REQUESTS)
    joined, prev = 0, 0
    steps: list[Step] = []
    while True:
        joined = min(REQUESTS, joined + RAMP)
        active = np.flatnonzero(left[:joined] > 0)
        B = int(active.size)
        if B == 0:
            return steps
        table = table_k(B)
        duel = clock.k_for_step(DUEL, B, table, seq, run, SHARE, HORIZON)
        k = table if duel is None else duel
        left[active] -= TAU[k]
        t = seconds(B, k) * (1 + 0.02 * rng.standard_normal())
        steps.append(Step(seq, B, prev, k, t, B * (1 + k), round(B * TAU[k])))
        prev, seq = k, seq + 1


def pairs_per_burst(run: int, bursts: int, seed: int) -> dict[str, Any]:
    """Pairs and duel runs at B > 32 over ``bursts`` bursts, one DuelClock throughout."""
    rng, clock, seq = np.random.default_rng(seed), DuelClock(), 1
    steps: list[Step] = []
    for _ in range(bursts):
        steps += burst(rng, clock, seq, run)
        seq = steps[-1].seq + IDLE_SEQ
    dense = [0] + [table_k(B) for B in range(1, 257)]
    pairs = pairs_in(steps, set(), dense)
    runs = sum(1 for a, b in zip(steps, steps[1:])
               if b.k_drafted != a.k_drafted and b.k_drafted != table_k(b.batch_size))
    logs = np.array([p.log_ratio for p in pairs])
    return {"duel_run": run, "bursts": bursts, "runs": runs, "pairs": len(pairs),
            "pairs_per_burst": round(len(pairs) / bursts, 3),
            "bursts_to_4_pairs": round(4 * bursts / max(len(pairs), 1), 2),
            "log_ratio_mean": round(float(logs.mean()), 4) if logs.size else None,
            "log_ratio_sd": round(float(logs.std(ddof=1)), 4) if logs.size > 1 else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.plateau_pairs",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--bursts", type=int, default=200)
    ap.add_argument("--runs", default="16,8", help="duel run lengths, comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    try:
        runs = [int(r) for r in args.runs.split(",")]
    except ValueError:
        print(f"error: --runs {args.runs!r}: comma-separated integers, e.g. 16,8", file=sys.stderr)
        return 2
    if args.bursts < 1 or any(r < 4 for r in runs):
        print("error: --bursts must be >= 1 and every --runs value >= 4 (MIN_RUN_STEPS)",
              file=sys.stderr)
        return 2
    emit({"command": "python -m benchmarks.plateau_pairs " + " ".join(argv or sys.argv[1:]),
          "model": "simulated bursts of 64 (not a measurement)",
          "by_run": [pairs_per_burst(r, args.bursts, args.seed) for r in runs]}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
