"""The guardrail's error rates on simulated scrapes (sidecar/guardrail.py, pure numpy).

Per trial: 1-s scrapes of ``STEPS_PER_SCRAPE`` engine steps (the H200's 32B model at ~70 ms a
step), log goodput noisy with spread ``sd`` per scrape, AR(1) with correlation ``rho`` from one
scrape to the next (``case``: iid, ar0.5, ar0.8: a host's slow or fast stretch outlasts a
scrape). A full baseline, a push, then scrapes until the trial gives its verdict, the noise
running on across the push. ``false_rollback``: the share of trials rolled back when the push
changed nothing, with its one-sided bound (rate + 2 SE); ``power_50pct_drop`` and
``power_10pct_drop``: the share rolled back when the push cut goodput by that much;
``scrapes_to_rollback_50pct``: the mean scrapes after the push until a halved goodput was
rolled back. The guardrail runs with its defaults (window, settle, drop, z, extend), pooling
scrapes to its default ``min_steps`` and, at ρ = 0.8, also to ``OTHER_MIN_STEPS`` (what
pooling buys against correlated scrapes, and what it costs in time).

    python -m benchmarks.guardrail_calibration --trials 2000 --seed 0 \\
        --out benchmarks/results/calibration/guardrail.json
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.json_out import emit
from sidecar.guardrail import MIN_STEPS, Guardrail, Sample, Verdict
from tuner.core.table import Table

OLD, NEW = Table.from_list([[1, 16, 3]]), Table.from_list([[1, 16, 2]])
CASES = {"iid": 0.0, "ar0.5": 0.5, "ar0.8": 0.8}  # AR(1) correlation of neighbouring scrapes
SPREADS = (0.05, 0.2)  # sd of log goodput per 1-s scrape: a quiet GPU box .. a busy one
STEPS_PER_SCRAPE = 14.0  # a 1-s scrape at 70 ms a step
OTHER_MIN_STEPS = (50.0,)  # the first guess, at ρ = 0.8: what 100 buys


def ar1(n: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """n steps of a stationary AR(1) with unit variance: e_t = ρ e_{t-1} + √(1-ρ²) η_t."""
    eta = rng.standard_normal(n)
    e = np.empty(n)
    e[0] = eta[0]
    for i in range(1, n):
        e[i] = rho * e[i - 1] + math.sqrt(1 - rho * rho) * eta[i]
    return e


def one_trial(sd: float, drop: float, rho: float, rng: np.random.Generator,
              min_steps: float) -> tuple[Verdict | None, int]:
    """(the verdict, scrapes after the push until it) of one simulated push."""
    g = Guardrail(min_steps=min_steps)
    per_sample = math.ceil(g.min_steps / STEPS_PER_SCRAPE)
    before = g.longest * per_sample
    noise = sd * ar1(before + g.settle + g.longest * per_sample, rho, rng)
    for e in noise[:before]:
        g.observe(Sample(8.0, 1000.0 * math.exp(e), STEPS_PER_SCRAPE, 1.0), 0.0)
    g.start(OLD, NEW)
    for i, e in enumerate(noise[before:], 1):
        verdict = g.observe(Sample(8.0, 1000.0 * (1 - drop) * math.exp(e), STEPS_PER_SCRAPE, 1.0), 1.0)
        if verdict is not None or g.trial is None:
            return verdict, i
    return None, len(noise) - before


def rolled_back(sd: float, drop: float, trials: int, rng: np.random.Generator, rho: float = 0.0,
                min_steps: float = MIN_STEPS) -> tuple[float, float]:
    """(the share of ``trials`` whose push (goodput × (1 - drop)) was rolled back, the mean
    scrapes after the push to those rollbacks)."""
    back, scrapes = 0, 0
    for _ in range(trials):
        verdict, n = one_trial(sd, drop, rho, rng, min_steps)
        if verdict is not None and verdict.rolled_back:
            back, scrapes = back + 1, scrapes + n
    return back / trials, scrapes / back if back else math.nan


def _row(case: str, sd: float, trials: int, rng: np.random.Generator,
         min_steps: float = MIN_STEPS) -> dict[str, Any]:
    p0, _ = rolled_back(sd, 0.0, trials, rng, CASES[case], min_steps)
    p50, n50 = rolled_back(sd, 0.5, trials, rng, CASES[case], min_steps)
    p10, _ = rolled_back(sd, 0.1, trials, rng, CASES[case], min_steps)
    return {"case": case, "rho": CASES[case], "sd": sd, "min_steps": min_steps, "false_rollback": p0,
            "false_rollback_bound": round(p0 + 2 * math.sqrt(p0 * (1 - p0) / trials), 4),
            "power_50pct_drop": p50, "power_10pct_drop": p10,
            "scrapes_to_rollback_50pct": round(n50, 1)}


def calibrate(trials: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    g = Guardrail()
    rows = [_row(case, sd, trials, rng) for case in CASES for sd in SPREADS]
    rows += [_row("ar0.8", sd, trials, rng, m) for m in OTHER_MIN_STEPS for sd in SPREADS]
    return {"trials": trials, "seed": seed, "steps_per_scrape": STEPS_PER_SCRAPE,
            "window": g.window, "settle": g.settle, "extend": g.extend, "drop": g.drop, "z": g.z,
            "alpha_per_look": g.alpha, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.guardrail_calibration", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.trials < 1:
        print(f"python -m benchmarks.guardrail_calibration: --trials={args.trials}: must be >= 1",
              file=sys.stderr)
        return 2
    result = calibrate(args.trials, args.seed)
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
