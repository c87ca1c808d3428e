"""The guardrail's error rates on simulated scrapes (sidecar/guardrail.py, pure numpy).

Per trial: a full baseline of log-normal goodput samples (spread ``sd`` in log), a push, then
samples until the trial gives its verdict. ``false_rollback``: the share of trials rolled back
when the push changed nothing; ``power``: the share rolled back when it halved goodput. Both
with ``extend`` = 0 (the rule before 2026-12-04: one window decides) and the default.

    python -m benchmarks.guardrail_calibration --trials 4000 --seed 0 \\
        --out benchmarks/results/calibration/guardrail.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from sidecar.guardrail import Guardrail, Sample
from tuner.core.table import Table

OLD, NEW = Table.from_list([[1, 16, 3]]), Table.from_list([[1, 16, 2]])
SPREADS = (0.05, 0.2, 0.5)  # sd of log goodput per scrape: a quiet GPU box .. a loaded CPU box


def rolled_back_share(extend: int, sd: float, drop: float, trials: int,
                      rng: np.random.Generator, window: int = 5) -> float:
    """The share of ``trials`` whose push (goodput × (1 - drop)) the guardrail rolled back."""
    back = 0
    for _ in range(trials):
        g = Guardrail(window=window, settle=1, drop=0.05, z=3.0, extend=extend)
        for _ in range(g.longest):
            g.observe(Sample(8.0, 1000.0 * np.exp(sd * rng.standard_normal())), 0.0)
        g.start(OLD, NEW)
        verdict = None
        while verdict is None and g.trial is not None:
            verdict = g.observe(Sample(8.0, 1000.0 * (1 - drop) * np.exp(sd * rng.standard_normal())), 1.0)
        back += bool(verdict is not None and verdict.rolled_back)
    return back / trials


def calibrate(trials: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    default = Guardrail().extend
    rows = []
    for sd in SPREADS:
        for extend in (0, default):
            p0 = rolled_back_share(extend, sd, 0.0, trials, rng)
            p1 = rolled_back_share(extend, sd, 0.5, trials, rng)
            se0, se1 = (float(np.sqrt(p * (1 - p) / trials)) for p in (p0, p1))
            rows.append({"sd": sd, "extend": extend, "false_rollback": p0,
                         "false_rollback_ci": [round(max(p0 - 1.96 * se0, 0), 4), round(p0 + 1.96 * se0, 4)],
                         "power_50pct_drop": p1,
                         "power_ci": [round(max(p1 - 1.96 * se1, 0), 4), round(min(p1 + 1.96 * se1, 1), 4)]})
    return {"trials": trials, "seed": seed, "window": 5, "drop": 0.05, "z": 3.0, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.guardrail_calibration", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.trials < 1:
        print(f"python -m benchmarks.guardrail_calibration: --trials={args.trials}: must be >= 1",
              file=sys.stderr)
        return 2
    result = calibrate(args.trials, args.seed)
    text = json.dumps(result, indent=1) + "\n"
    if args.out is not None:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
