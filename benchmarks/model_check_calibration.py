"""Where no duel can pair, how often the model switches a bucket it should not (pure numpy).

The arbiter (sidecar/arbiter.py) lets the model decide a bucket the load only passes through
once pairs elsewhere have checked its ratios, and then beyond the error those checks bound
(sidecar/model_error.ratio_error). Per trial: the incumbent k=3 at B 1-16; pairable buckets
B 2, 3-4 and 5-8, and one not (B 9-16); each k's model goodput off the truth by
N(0, ``true_error``/√2) per bucket, so a ratio G(c)/G(3) is off by sd ``true_error`` and the
challengers at one bucket share the incumbent's error; ``checks`` comparisons at the pairable buckets
with PAIRS pairs each (sd PAIR_SD) measuring the truth; the live level error small (0.02) so
the checks are what bound the model. ``false_switch``: the share of trials whose unpaired
bucket switched when every k is truly equal, with its one-sided bound (rate + 2 SE);
``switch_at_gain``: the share that switched it to k=2 when k=2 is truly ``gain`` better in log
(at every bucket: the switch is right).

    python -m benchmarks.model_check_calibration --trials 2000 --seed 0 \\
        --out benchmarks/results/calibration/model_check.json
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from sidecar.arbiter import arbitrate
from sidecar.measured import MeasuredGoodput
from sidecar.model_error import CHECK_LEVEL
from sidecar.settings import SidecarSettings

PAIRS, PAIR_SD = 8, 0.03
TRUE_ERRORS = (0.05, 0.10, 0.20)   # the model's true error on ratios: as assumed .. 4x it
CHECKS = (1, 2, 4, 8)
GAINS = (0.1, 0.3)                 # log gain of k=2 over the incumbent, for the power rows
PAIRABLE = (2, 4, 8)               # buckets named by their largest B
CHECKED = [(b, k) for k in (2, 1, 0) for b in PAIRABLE]   # comparisons with the incumbent
ROWS = {1: slice(0, 1), 2: slice(1, 2), 4: slice(2, 4), 8: slice(4, 8), 16: slice(8, 16)}


def trial(rng: np.random.Generator, true_error: float, checks: int, gain: float = 0.0) -> str | None:
    """The k the unpaired bucket switched to, or None."""
    s = SidecarSettings.model_construct()
    truth = np.array([0.0, 0.0, gain, 0.0])
    G = np.ones((200, 16, 4))
    for b, rows in ROWS.items():
        # each k's goodput off by sd true_error/sqrt(2): a ratio off by sd true_error, and the
        # challengers at one bucket alike through the incumbent's own error (correlation 0.5)
        bias = rng.normal(0.0, true_error / math.sqrt(2), 4)
        G[:, rows, :] = np.exp(truth + bias)[None, None, :]
    G *= np.exp(rng.normal(0.0, 0.01, G.shape))   # the model's own draws
    measured = MeasuredGoodput()
    for b, k in CHECKED[:checks]:
        measured.pairs[(b, k, 3)] = collections.deque(
            (float(v), 15, j) for j, v in enumerate(rng.normal(truth[k], PAIR_SD, PAIRS)))
    served = {b: 100 for b in (*PAIRABLE, 16)}
    v = arbitrate(np.full(16, 3), G, measured, served, None, tie=s.tie,
                  confidence=s.confidence, model_error=s.model_error, min_served=s.min_served,
                  max_pairs=s.max_pairs, duel_width=s.duel_width,
                  live_error={b: 0.02 for b in ROWS}, can_duel=True,
                  pairable=frozenset(PAIRABLE))
    switched = [c.k for c in v.switches() if c.bucket == 16]
    return str(switched[0]) if switched else None


def rate(hits: int, trials: int) -> tuple[float, float]:
    p = hits / trials
    return round(p, 4), round(p + 2 * math.sqrt(max(p * (1 - p), 1e-12) / trials), 4)


def calibrate(trials: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    null, power = [], []
    for true_error in TRUE_ERRORS:
        for checks in CHECKS:
            hits = sum(trial(rng, true_error, checks) is not None for _ in range(trials))
            p, bound = rate(hits, trials)
            null.append({"true_error": true_error, "checks": checks, "false_switch": p,
                         "bound": bound, "trials": trials})
    for true_error in TRUE_ERRORS[:2]:
        for gain in GAINS:
            for checks in CHECKS:
                hits = sum(trial(rng, true_error, checks, gain) == "2" for _ in range(trials))
                power.append({"true_error": true_error, "gain": gain, "checks": checks,
                              "switch_at_gain": round(hits / trials, 4), "trials": trials})
    return {"check_level": CHECK_LEVEL, "pairs": PAIRS, "pair_sd": PAIR_SD, "null": null,
            "power": power}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/calibration/model_check.json")
    args = ap.parse_args(argv)
    result = {**calibrate(args.trials, args.seed),
              "command": f"python -m benchmarks.model_check_calibration --trials {args.trials} "
                         f"--seed {args.seed}"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for row in result["null"]:
        print(f"true error {row['true_error']}, {row['checks']} checks: false switch "
              f"{row['false_switch']} (bound {row['bound']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
