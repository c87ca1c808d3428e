"""The bench's analysis on simulated runs: its family-wise false-verdict rate, power, coverage.

    python -m benchmarks.calibration --trials 2000 --out benchmarks/results/calibration/calibration.json

A simulated run has the shape of a real one (`RUN`: cpu-tiny-ci's loads, table policies, A/A,
non-table policies in their own paired blocks, head-to-head pairs). A window's log tokens/s is
load level + block drift (large: it must cancel) + the policy's true effect + noise with the
window CV `cv`. Windows run in the design's order (benchmarks/design.py): a table block's in a
fresh random order, a paired block's alternating with the round. Every trial runs
benchmarks/stats.load_family / chained / decide, the code `analyze` runs on a real cells.csv,
vectorized over trials (tests/benchmarks/test_calibration.py checks that `analyze` gives the
same verdicts on one simulated run written as windows).

Cases (`CASES`), each at the same marginal window CV:
  mid    every policy the same; log-normal windows, independent.
  edge   fixed-k0..k3 truly 0, -0.5%, -1%, +0.5%: distinct, fixed-k0 and fixed-k1 within 1%
         of the best (fixed-k3), fixed-k2 1.5% below it; every other policy equal to the best.
         A "better" for a policy equal to the best is false; stats.py claims one only when it
         beats every fixed k (an intersection-union test), so a worse cross-fitted reference
         no longer makes it (before: up to 9.4% of runs at `--threshold 0`).
  ar0.5, ar0.9  window noise AR(1) with that correlation from one window of a block to the
         next, in the order they run.
  drift  the load level a random walk of 1% a window plus a trend of -20% over the run.
  t3     Student-t noise with 3 df of the same spread.

A claim is false when it disagrees with the truth against the best fixed k: "better" where the
true ratio is not above 1 + threshold, "worse" where it is not below 1 - threshold (A/A and
head-to-head: against the twin or the other policy). Null runs: `family_false_rate`, the share
of runs with a false claim, and `bound` = rate + 2 SE (one-sided). Power: `tuned` truly
`effect` faster than the best fixed k (and so than every other policy) at every load; power is
the share of tuned's claims that should be "better" (against the reference and head to head,
at every load) that were made, at the blocks benchmarks/design.py plans.

`null_threshold_0`: mid and edge again with no band (`--threshold 0`), which the default 1%
band otherwise hides.

`sidecar` and `guardrail`: the null runs of the duels' interval (benchmarks/pair_dependence.py,
and on rings whose load moves B inside a band, benchmarks/shared_batch.py) and of the guardrail
(benchmarks/guardrail_calibration.py), read from their committed JSON in
benchmarks/results/calibration, not recomputed (``--imports-only``: only those lists are
written again, into the committed calibration.json).
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
from benchmarks.inference import estimate, interval
from benchmarks.stats import FIXED, Claim, Key, chained, decide, load_family, stack, twin
from sidecar.guardrail import MIN_STEPS


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
    def windows_per_round(self) -> int:   # a round's windows: the run's length, in windows, per block
        return len(self.loads) * (len(self.tables) + 2 * len(self.paired))

    @property
    def family(self) -> int:
        return family_size(len(self.loads), [*self.tables, *self.paired], len(self.head_to_head))


RUN = RunShape()


@dataclass(frozen=True, slots=True)
class Outcome:
    codes: np.ndarray     # [trials, m]: +1 better, -1 worse, 0 none
    truth: np.ndarray     # [m]: the claim that would be right (+1 / -1 / 0)
    keys: list[Key] = field(default_factory=list)

    @property
    def family_false_rate(self) -> float:
        wrong = (self.codes != 0) & (self.codes != self.truth[None])
        return float(wrong.any(axis=1).mean())

    @property
    def power(self) -> float:
        hit = self.truth > 0
        return float((self.codes[:, hit] == 1).mean()) if hit.any() else float("nan")


@dataclass(frozen=True, slots=True)
class Case:
    """How a simulated run departs from `mid` (module docstring)."""

    name: str
    rho: float = 0.0      # AR(1) correlation of consecutive windows of a block, in run order
    heavy: bool = False   # Student-t 3 df noise of the same spread
    walk: float = 0.0     # drift: the log load level's random-walk step, a window
    trend: float = 0.0    # drift: the log load level's change over the whole run
    fixed: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)   # true effects of the fixed k's, in order


CVS = (0.05, 0.10, 0.15)   # window CVs: a quiet box .. a busy one
EFFECT = 0.05              # the smallest effect the design plans for
MID = Case("mid")
CASES = {c.name: c for c in (MID, Case("edge", fixed=(0.0, -0.005, -0.01, 0.005)),
                             Case("ar0.5", rho=0.5), Case("ar0.9", rho=0.9),
                             Case("drift", walk=0.01, trend=-0.2), Case("t3", heavy=True))}


def lifts(case: Case, effect: float = 0.0, shape: RunShape = RUN) -> dict[str, float]:
    """True log effect of every policy: the fixed k's from the case, an A/A copy its twin's,
    `improved` the best fixed k's plus log(1 + effect), every other policy the best's."""
    fixed = [p for p in shape.tables if p.startswith(FIXED)]
    own = {p: math.log1p(e) for p, e in zip(fixed, case.fixed, strict=True)}
    best = max(own.values())
    out = {p: own.get(p, best) for p in (*shape.tables, *shape.paired)}
    out[shape.improved] = best + math.log1p(effect)
    return {p: out[twin(p) or p] for p in out}


def window_noise(rng: np.random.Generator, shape: tuple[int, ...], sigma: float, case: Case,
                 slope: float = 0.0) -> np.ndarray:
    """Window noise along the last axis in run order: marginal sd sigma (log), AR(1) rho, plus
    the drift's within-block part, `slope` a window (a block's starting level cancels in every
    ratio, so only the drift inside a block matters)."""
    if case.heavy:
        z = rng.standard_t(3, shape) * sigma / math.sqrt(3.0)   # t(3) has variance 3
    else:
        z = rng.normal(0.0, sigma, shape)
    e = z.copy()
    for i in range(1, shape[-1]):       # stationary: e_i = ρ e_(i-1) + √(1-ρ²) z_i
        e[..., i] = case.rho * e[..., i - 1] + math.sqrt(1 - case.rho ** 2) * z[..., i]
    if case.walk:
        e = e + np.cumsum(rng.normal(0.0, case.walk, shape), axis=-1)
    return e + slope * np.arange(shape[-1])


def draw(rng: np.random.Generator, trials: int, blocks: int, cv: float, effect: float = 0.0,
         shape: RunShape = RUN, case: Case = MID
         ) -> tuple[dict[int, np.ndarray], dict[tuple[str, int], np.ndarray]]:
    """Log tokens/s of simulated runs: per load [trials, blocks, tables], and per (non-table
    policy, load) [trials, blocks, 2] of (policy, pair reference) in its own blocks."""
    sigma = math.sqrt(math.log1p(cv * cv))
    lift = lifts(case, effect, shape)
    slope = case.trend / (blocks * shape.windows_per_round)
    tables, paired = {}, {}
    for n in shape.loads:
        level = math.log(100.0 * n)
        at = np.argsort(rng.random((trials, blocks, len(shape.tables))), axis=-1)  # a fresh order a block
        e = np.take_along_axis(window_noise(rng, at.shape, sigma, case, slope), at, axis=-1)
        tables[n] = (level + rng.normal(0, 0.2, (trials, blocks, 1))
                     + np.array([lift[p] for p in shape.tables]) + e)
        for p in shape.paired:
            e = window_noise(rng, (trials, blocks, 2), sigma, case, slope)
            e = np.where((np.arange(blocks) % 2 == 0)[:, None], e[..., ::-1], e)   # design.pair_order
            paired[(p, n)] = (level + rng.normal(0, 0.2, (trials, blocks, 1))
                              + np.array([lift[p], lift[shape.pair_ref]]) + e)
    return tables, paired


def verdicts(tables: dict[int, np.ndarray], paired: dict[tuple[str, int], np.ndarray],
             shape: RunShape = RUN, threshold: float = 0.01,
             alpha: float = 0.05) -> tuple[np.ndarray, list[Key]]:
    """The analysis's codes [trials, m] (+1 better, -1 worse, 0 none) and the m keys."""
    raw: dict[Key, Claim] = {}
    is_ref: dict[Key, np.ndarray] = {}
    for n, Y in tables.items():
        per_load, mine = load_family(Y, list(shape.tables), n, shape.head_to_head)
        raw |= per_load
        is_ref |= mine
        for p in shape.paired:
            raw[("ref", p, n)] = chained(paired[(p, n)], raw[("ref", shape.pair_ref, n)])
    trials = next(iter(tables.values())).shape[0]
    keys = list(raw)
    _, each = stack([raw[k] for k in keys])
    ref = np.stack([is_ref.get(k, np.zeros(trials, dtype=bool)) * np.ones(trials, dtype=bool)
                    for k in keys], axis=-1)
    codes, _, _ = decide(each, ref, threshold, alpha)
    return codes, keys


def truth(keys: list[Key], lift: dict[str, float], threshold: float = 0.01) -> np.ndarray:
    """The right claim of every key (+1 better, -1 worse, 0 none): a policy against the best
    fixed k, an A/A copy against its twin, a head-to-head pair against each other."""
    best = max(v for p, v in lift.items() if p.startswith(FIXED))

    def claim(gap: float) -> float:
        return 1.0 if gap > math.log1p(threshold) else -1.0 if gap < math.log1p(-threshold) else 0.0

    out = []
    for kind, name, _ in keys:
        a, _, b = name.partition("\t")
        other = best if kind == "ref" else lift[b] if kind == "vs" else lift[twin(a) or a]
        out.append(claim(lift[a] - other))
    return np.array(out)


def simulate(rng: np.random.Generator, trials: int, blocks: int, cv: float, effect: float = 0.0,
             threshold: float = 0.01, alpha: float = 0.05, shape: RunShape = RUN,
             case: Case = MID) -> Outcome:
    """Verdicts of `trials` simulated runs of `shape` with `blocks` blocks per load."""
    codes, keys = verdicts(*draw(rng, trials, blocks, cv, effect, shape, case), shape, threshold, alpha)
    return Outcome(codes, truth(keys, lifts(case, effect, shape), threshold), keys)


def coverage(rng: np.random.Generator, trials: int, blocks: int, cv: float, case: Case,
             confidence: float = 0.95) -> float:
    """Share of A/A t-intervals (on block log ratios) that cover 1."""
    sigma = math.sqrt(math.log1p(cv * cv))
    e = window_noise(rng, (trials, blocks, 2), sigma, case)
    _, low, high = interval(estimate(e[..., 0] - e[..., 1]), 1 - confidence)
    return float(((low <= 1) & (1 <= high)).mean())


def design_blocks(cv: float, effect: float, shape: RunShape = RUN, threshold: float = 0.01,
                  alpha: float = 0.05, target: float = 0.8) -> int:
    """What benchmarks/design.py plans for this noise and effect (the bench's default rule)."""
    fixed = sum(p.startswith(FIXED) for p in shape.tables)
    return blocks_needed(sd_log_ratio(cv), effect, threshold, alpha, shape.family, target,
                         references=fixed)


def bound(rate: float, trials: int) -> float:
    """One-sided upper bound on a rate from `trials` runs: rate + 2 SE."""
    return round(rate + 2 * math.sqrt(rate * (1 - rate) / trials), 4)


def _nulls(rng: np.random.Generator, trials: int) -> list[dict[str, Any]]:
    rows = []
    for case in CASES.values():
        for cv in CVS:
            for blocks in sorted({6, 10, 20, design_blocks(cv, EFFECT)}):
                rate = simulate(rng, trials, blocks, cv, case=case).family_false_rate
                rows.append({"case": case.name, "cv": cv, "blocks": blocks,
                             "noise": "t3" if case.heavy else "normal",
                             "family_false_rate": round(rate, 4), "bound": bound(rate, trials),
                             "trials": trials})
    return rows


def _powers(rng: np.random.Generator, trials: int) -> list[dict[str, Any]]:
    rows = []
    for case in CASES.values():
        for cv in CVS:
            blocks = design_blocks(cv, EFFECT)
            o = simulate(rng, trials, blocks, cv, effect=EFFECT, case=case)
            rows.append({"case": case.name, "cv": cv, "effect": EFFECT, "blocks": blocks,
                         "power": round(o.power, 4), "family_false_rate": round(o.family_false_rate, 4),
                         "bound": bound(o.family_false_rate, trials), "trials": trials})
    return rows


def _at_threshold_zero(rng: np.random.Generator, trials: int) -> list[dict[str, Any]]:
    """mid and edge with no band (`--threshold 0`): what the 1% band hides."""
    rows = []
    for case in (MID, CASES["edge"]):
        for cv in CVS[:2]:
            for blocks in (6, 20, design_blocks(cv, EFFECT)):
                rate = simulate(rng, trials, blocks, cv, threshold=0.0, case=case).family_false_rate
                rows.append({"case": case.name, "cv": cv, "blocks": blocks, "threshold": 0.0,
                             "family_false_rate": round(rate, 4), "bound": bound(rate, trials),
                             "trials": trials})
    return rows


def calibrate(trials: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"run_shape": {"loads": RUN.loads, "tables": RUN.tables, "paired": RUN.paired,
                                         "head_to_head": RUN.head_to_head, "family_size": RUN.family},
                           "threshold": 0.01, "family_wise_level": 0.05, "method": "holm",
                           "cases": {c.name: {"rho": c.rho, "heavy": c.heavy, "walk": c.walk,
                                              "trend": c.trend, "fixed": c.fixed} for c in CASES.values()},
                           "null": _nulls(rng, trials), "power": _powers(rng, trials), "coverage": []}
    for blocks in (4, 6, 8, 12, 20):
        for case in (MID, CASES["t3"]):
            out["coverage"].append({"cv": 0.10, "blocks": blocks, "noise": "t3" if case.heavy else "normal",
                                    "confidence": 0.95, "trials": trials,
                                    "coverage": round(coverage(rng, trials, blocks, 0.10, case), 4)})
    out["null_threshold_0"] = _at_threshold_zero(rng, trials)
    return out


def imported(pair_dependence: dict[str, Any], guardrail: dict[str, Any],
             shared_batch: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The sidecar's duel pairs and its guardrail under dependence, and its pairs on simulated
    rings whose load moves B inside a band, from their own committed calibrations
    (benchmarks/pair_dependence.py, benchmarks/guardrail_calibration.py,
    benchmarks/shared_batch.py)."""
    sidecar = [{"case": r["case"].split("_")[0], "pair_sd": r["pair_sd"], "lag1": r["lag1"],
                "false_rate": r["after"]["false_by_500"], "bound": r["after"]["bound_500"],
                "trials": pair_dependence["trials"], "required": r["required"]}
               for r in pair_dependence["null"]]
    sidecar += [{"case": r["case"], "false_rate": r["matched"]["false_rate"],
                 "bound": r["matched"]["bound"], "trials": r["trials"],
                 "comparisons": r["matched"]["comparisons"]}
                for r in (shared_batch or {}).get("rows", [])]
    guard = [{"case": r["case"], "rho": r["rho"], "sd": r["sd"], "false_rate": r["false_rollback"],
              "bound": r["false_rollback_bound"], "trials": guardrail["trials"]}
             for r in guardrail["rows"] if r["min_steps"] == MIN_STEPS]
    return {"sidecar": sidecar, "guardrail": guard}


SOURCES = Path(__file__).parent / "results" / "calibration"   # where the two commit their JSON


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/calibration/calibration.json")
    ap.add_argument("--imports-only", action="store_true",
                    help="rewrite only the sidecar and guardrail lists of --out from their sources")
    args = ap.parse_args(argv)
    sources = imported(*(json.loads((SOURCES / f).read_text())
                         for f in ("pair_dependence.json", "guardrail.json", "shared_batch.json")))
    if args.imports_only:
        result = {**json.loads(Path(args.out).read_text()), **sources}
    else:
        result = {**calibrate(args.trials, args.seed), **sources,
                  "command": f"python -m benchmarks.calibration --trials {args.trials} --seed {args.seed}"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
