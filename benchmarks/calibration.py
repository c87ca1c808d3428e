"""The bench's analysis on simulated runs: its family-wise false-verdict rate, power, coverage.

    python -m benchmarks.calibration --trials 4000 --out benchmarks/results/calibration/calibration.json

A simulated run has the shape of a real one (`RUN`: cpu-tiny-ci's loads, table policies, A/A,
non-table policies in their own paired blocks, head-to-head pairs). A window's log tokens/s is
load level + block drift (large: it must cancel) + the policy's true effect + noise with the
window CV `cv` (log-normal; `heavy` draws Student-t noise with 3 df of the same spread). Every
trial runs benchmarks/stats.load_family / chained / decide, the code `analyze` runs on a real
cells.csv, vectorized over trials (tests/benchmarks/test_calibration.py checks that `analyze`
gives the same verdicts on one simulated run written as windows).

Null: every policy the same: any "better" or "worse" is false. Power: `tuned` truly `effect`
faster than every other policy at every load; power is the share of (trial, load) where it is
called better than the reference; a claim anywhere else (or "worse" for tuned) is false.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.design import blocks_needed, family_size, sd_log_ratio
from benchmarks.inference import LogRatio, estimate, interval
from benchmarks.stats import Key, chained, decide, load_family


@dataclass(frozen=True, slots=True)
class RunShape:
    loads: tuple[int, ...] = (1, 4, 16, 32)
    tables: tuple[str, ...] = ("fixed-k0", "fixed-k1", "fixed-k2", "fixed-k3", "documented",
                               "quarter", "tuned", "aa:fixed-k3")
    paired: tuple[str, ...] = ("nospec", "sidecar-from-quarter")
    pair_ref: str = "fixed-k3"
    head_to_head: tuple[tuple[str, str], ...] = (("tuned", "documented"), ("tuned", "quarter"))
    improved: str = "tuned"      # the policy given the true effect in a power run

    @property
    def family(self) -> int:
        return family_size(len(self.loads), [*self.tables, *self.paired], len(self.head_to_head))


RUN = RunShape()


@dataclass(frozen=True, slots=True)
class Outcome:
    codes: np.ndarray     # [trials, m]: +1 better, -1 worse, 0 none
    truth: np.ndarray     # [m]: the claim that would be right (+1 / 0)
    keys: list[Key] = field(default_factory=list)

    @property
    def family_false_rate(self) -> float:
        wrong = (self.codes != 0) & (self.codes != self.truth[None])
        return float(wrong.any(axis=1).mean())

    @property
    def power(self) -> float:
        hit = self.truth > 0
        return float((self.codes[:, hit] == 1).mean()) if hit.any() else float("nan")


def _noise(rng: np.random.Generator, shape: tuple[int, ...], sigma: float, heavy: bool) -> np.ndarray:
    if not heavy:
        return rng.normal(0.0, sigma, shape)
    return rng.standard_t(3, shape) * sigma / math.sqrt(3.0)   # t(3) has variance 3


def draw(rng: np.random.Generator, trials: int, blocks: int, cv: float, effect: float = 0.0,
         shape: RunShape = RUN, heavy: bool = False
         ) -> tuple[dict[int, np.ndarray], dict[tuple[str, int], np.ndarray]]:
    """Log tokens/s of simulated runs: per load [trials, blocks, tables], and per (non-table
    policy, load) [trials, blocks, 2] of (policy, pair reference) in its own blocks."""
    sigma = math.sqrt(math.log1p(cv * cv))
    lift = {p: math.log1p(effect) if p == shape.improved else 0.0 for p in (*shape.tables, *shape.paired)}
    tables, paired = {}, {}
    for n in shape.loads:
        level = math.log(100.0 * n)
        tables[n] = (level + rng.normal(0, 0.2, (trials, blocks, 1))
                     + np.array([lift[p] for p in shape.tables])
                     + _noise(rng, (trials, blocks, len(shape.tables)), sigma, heavy))
        for p in shape.paired:
            paired[(p, n)] = (level + rng.normal(0, 0.2, (trials, blocks, 1)) + np.array([lift[p], 0.0])
                              + _noise(rng, (trials, blocks, 2), sigma, heavy))
    return tables, paired


def verdicts(tables: dict[int, np.ndarray], paired: dict[tuple[str, int], np.ndarray],
             shape: RunShape = RUN, threshold: float = 0.01,
             alpha: float = 0.05) -> tuple[np.ndarray, list[Key]]:
    """The analysis's codes [trials, m] (+1 better, -1 worse, 0 none) and the m keys."""
    raw: dict[Key, LogRatio] = {}
    is_ref: dict[Key, np.ndarray] = {}
    for n, Y in tables.items():
        per_load, mine = load_family(Y, list(shape.tables), n, shape.head_to_head)
        raw |= per_load
        is_ref |= mine
        for p in shape.paired:
            raw[("ref", p, n)] = chained(paired[(p, n)], raw[("ref", shape.pair_ref, n)])
    trials = next(iter(tables.values())).shape[0]
    keys = list(raw)
    est = LogRatio(*(np.stack([raw[k][j] * np.ones(trials) for k in keys], axis=-1) for j in range(4)))
    ref = np.stack([is_ref.get(k, np.zeros(trials, dtype=bool)) * np.ones(trials, dtype=bool)
                    for k in keys], axis=-1)
    codes, _, _ = decide(est, ref, threshold, alpha)
    return codes, keys


def simulate(rng: np.random.Generator, trials: int, blocks: int, cv: float, effect: float = 0.0,
             threshold: float = 0.01, alpha: float = 0.05, shape: RunShape = RUN,
             heavy: bool = False) -> Outcome:
    """Verdicts of `trials` simulated runs of `shape` with `blocks` blocks per load."""
    codes, keys = verdicts(*draw(rng, trials, blocks, cv, effect, shape, heavy), shape, threshold, alpha)
    truth = np.array([1.0 if effect > threshold and shape.improved == k[1].split("\t")[0]
                      and k[0] in ("ref", "vs") else 0.0 for k in keys])
    return Outcome(codes, truth, keys)


def coverage(rng: np.random.Generator, trials: int, blocks: int, cv: float, heavy: bool,
             confidence: float = 0.95) -> float:
    """Share of A/A t-intervals (on block log ratios) that cover 1."""
    sigma = math.sqrt(math.log1p(cv * cv))
    d = _noise(rng, (trials, blocks), sigma, heavy) - _noise(rng, (trials, blocks), sigma, heavy)
    _, low, high = interval(estimate(d), 1 - confidence)
    return float(((low <= 1) & (1 <= high)).mean())


def design_blocks(cv: float, effect: float, shape: RunShape = RUN, threshold: float = 0.01,
                  alpha: float = 0.05, target: float = 0.8) -> int:
    """What benchmarks/design.py plans for this noise and effect (the bench's default rule)."""
    return blocks_needed(sd_log_ratio(cv), effect, threshold, alpha, shape.family, target)


def calibrate(trials: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"run_shape": {"loads": RUN.loads, "tables": RUN.tables, "paired": RUN.paired,
                                         "head_to_head": RUN.head_to_head, "family_size": RUN.family},
                           "threshold": 0.01, "family_wise_level": 0.05, "method": "holm",
                           "null": [], "power": [], "coverage": []}
    for cv in (0.05, 0.10, 0.15):
        for blocks in sorted({6, 10, 20, design_blocks(cv, 0.05)}):
            for heavy in (False, True):
                o = simulate(rng, trials, blocks, cv, heavy=heavy)
                out["null"].append({"cv": cv, "blocks": blocks, "noise": "t3" if heavy else "normal",
                                    "family_false_rate": round(o.family_false_rate, 4), "trials": trials})
        blocks = design_blocks(cv, 0.05)
        o = simulate(rng, trials, blocks, cv, effect=0.05)
        out["power"].append({"cv": cv, "effect": 0.05, "blocks": blocks, "power": round(o.power, 4),
                             "family_false_rate": round(o.family_false_rate, 4), "trials": trials})
    for blocks in (4, 6, 8, 12, 20):
        for heavy in (False, True):
            out["coverage"].append({"cv": 0.10, "blocks": blocks, "noise": "t3" if heavy else "normal",
                                    "confidence": 0.95, "trials": trials,
                                    "coverage": round(coverage(rng, trials, blocks, 0.10, heavy), 4)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/calibration/calibration.json")
    args = ap.parse_args(argv)
    result = {**calibrate(args.trials, args.seed),
              "command": f"python -m benchmarks.calibration --trials {args.trials} --seed {args.seed}"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
