"""Dependent duel pairs: how alike real ones are, and what the sidecar's interval does with them
(issue #36 item 1).

The sidecar's confidence sequence (sidecar/measured.py, eq. CS) uses the pairs' long-run
variance (eq. LRV), since neighbouring pairs are not independent. Every pair it finds is a
`pair` event in its log: the run's first seq, band, k, reference k, log ratio and steps.

With logs: per log and comparison (band and the two k's, the ratio turned to the larger k over
the smaller), in seq order, the lag-1 autocorrelation r of the log ratios, the long-run variance
factor an AR(1) with that r implies, (1 + r)/(1 - r) (1 when independent, 3 at r = 0.5), and
the batch-means factor b·var(means of b consecutive pairs)/var(pairs), which needs no model but
sees only the dependence inside b pairs (2.2 of AR(1) ρ = 0.5's 3 at b = 5); pooled over
comparisons on the pairs centred per comparison.

    python -m benchmarks.pair_dependence runs/noharm/sidecar-part0.log.gz [LOG...] [--out F]

Without logs: simulated null comparisons (true ratio 1) whose pairs are independent, AR(1)
between neighbours, or wander (the ratio itself an Ornstein-Uhlenbeck process of sd 2% and time
constant 200 engine steps, a pair every 45 steps, under per-pair noise), each looked at after
every pair up to 500 by the sidecar's own `paired_interval` (eq. EARLY from EARLY_PAIRS, eq.
LRV from MIN_PAIRS) at the sidecar's level over three challengers. `false_by_N`: the share
whose interval excluded 1 at some look up to pair N, and `bound_500` that share at 500 plus 2
SE (one-sided). `before`: the same series under the interval as it was (eq. CS on the pairs'
plain sd, from pair 5). `power`: independent pairs with a real gain: the median pairs until the
interval clears the tie (0.5%) and the share that cleared it within `max_pairs` (40) and 500 pairs.

    python -m benchmarks.pair_dependence --trials 2000 \\
        --out benchmarks/results/calibration/pair_dependence.json
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.json_out import emit
from benchmarks.sidecar_log import comparisons, logged_pairs, read_lines
from sidecar.measured import (EARLY_PAIRS, MIN_PAIR_SD, MIN_PAIRS, confidence_sequence,
                              paired_interval)

BATCH = 5


def dependence(series: Sequence[Sequence[float]], batch: int = BATCH) -> dict[str, Any]:
    """Lag-1 autocorrelation (with a ±1.96/√n band) and the batch-means variance factor,
    pooled over series each centred on its own mean. Pure."""
    centred = [np.asarray(s) - np.mean(s) for s in series if len(s) >= 2]
    n = sum(len(c) for c in centred)
    if n < 3:
        return {"pairs": n, "lag1": None, "lag1_band": None, "variance_factor_ar1": None,
                "variance_factor_batches": None}
    var = sum(float(c @ c) for c in centred) / n
    lagged = sum(float(c[1:] @ c[:-1]) for c in centred)
    lags = sum(len(c) - 1 for c in centred)
    r = lagged / lags / var if var > 0 else 0.0
    means = [c[:len(c) // batch * batch].reshape(-1, batch).mean(axis=1) for c in centred
             if len(c) >= 2 * batch]
    pooled = np.concatenate(means) if means else np.asarray([])
    factor = batch * float(pooled @ pooled) / len(pooled) / var if len(pooled) >= 2 and var > 0 else None
    return {"pairs": n, "lag1": round(r, 3),
            "lag1_band": [round(r - 1.96 / math.sqrt(lags), 3), round(r + 1.96 / math.sqrt(lags), 3)],
            "variance_factor_ar1": round((1 + r) / (1 - r), 2) if r < 1 else None,
            "variance_factor_batches": round(factor, 2) if factor is not None else None,
            "batches": len(pooled)}


def report(paths: Sequence[Path]) -> dict[str, Any]:
    """Per log and comparison, and pooled: each log's series apart (seqs number one engine
    run's steps; two runs' pairs are not neighbours, and interleaving them by seq would hide
    the dependence)."""
    found: dict[tuple[str, int, int, int], list[tuple[int, float]]] = {}
    for p in paths:
        for (b, lo, hi), series in comparisons(logged_pairs(read_lines(p))).items():
            found[(p.name, b, lo, hi)] = series
    per = [{"log": name, "band": b, "k": [lo, hi], **dependence([[v for _, v in s]])}
           for (name, b, lo, hi), s in sorted(found.items())]
    return {"logs": [p.name for p in paths], "pooled": dependence(
        [[v for _, v in s] for s in found.values()]), "comparisons": per}


ALPHA = 0.1 / 3            # the sidecar's --confidence 0.9 split over three challengers
MAX_PAIRS = 40             # --max-pairs: a duel that has not settled by then is a tie
HORIZON = 500              # looks up to this many pairs
STEPS_PER_PAIR = 45        # engine steps from one pair to the next
WANDER_STEPS = 200.0       # the wandering ratio's time constant, in engine steps
WANDER_SD = 0.02
TIE = 0.005
# (name, AR(1) ρ between pairs or None for the wander, per-pair sd, in the requirement)
NULL_CASES = (("iid", 0.0, 0.03, True), ("ar0.25", 0.25, 0.03, True), ("ar0.5", 0.5, 0.03, True),
              ("ar0.8", 0.8, 0.03, False), ("wander_noise0.04", None, 0.04, True),
              ("wander_noise0.03", None, 0.03, True), ("wander_noise0.02", None, 0.02, False))
# (gain, pair sd): the third the H200's, the last two large gains that bursts leave few pairs for
# (the H100's 3B: k=3 at 2.3-2.8x of k=0, sd ~0.07)
POWER_CASES = ((0.02, 0.03), (0.03, 0.06), (0.034, 0.018), (0.1, 0.05), (1.4, 0.07))


def ar1(trials: int, n: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """Rows of a stationary AR(1) with unit variance: e_t = ρ e_{t-1} + √(1-ρ²) η_t."""
    eta = rng.standard_normal((trials, n))
    e = np.empty_like(eta)
    e[:, 0] = eta[:, 0]
    for i in range(1, n):
        e[:, i] = rho * e[:, i - 1] + math.sqrt(1 - rho * rho) * eta[:, i]
    return e


def null_series(rho: float | None, sd: float, trials: int, rng: np.random.Generator) -> np.ndarray:
    """Log ratios of null comparisons: AR(1) ρ of spread sd, or (ρ None) the wander plus noise sd."""
    if rho is not None:
        return sd * ar1(trials, HORIZON, rho, rng)
    step = math.exp(-STEPS_PER_PAIR / WANDER_STEPS)
    return WANDER_SD * ar1(trials, HORIZON, step, rng) + rng.normal(0.0, sd, (trials, HORIZON))


def lag1(rho: float | None, sd: float) -> float:
    if rho is not None:
        return rho
    return math.exp(-STEPS_PER_PAIR / WANDER_STEPS) * WANDER_SD ** 2 / (WANDER_SD ** 2 + sd ** 2)


def _bounds_before(x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the interval as it was: eq. CS on the plain sd (MIN_PAIR_SD floored)."""
    n = x.shape[1]
    half = np.maximum(x.std(axis=1, ddof=1), MIN_PAIR_SD) * confidence_sequence(0.0, 1.0, n, alpha)[1]
    mean = x.mean(axis=1)
    return mean - half, mean + half


def first_looks(x: np.ndarray, alpha: float, before: bool, tie: float | None) -> np.ndarray:
    """Per row, the first look (pair count) whose interval excludes 0 (``tie`` None) or clears
    log(1 + tie) from above; inf where none did."""
    first = np.full(x.shape[0], math.inf)
    for n in range(5 if before else EARLY_PAIRS, x.shape[1] + 1):
        if before:
            low, high = _bounds_before(x[:, :n], alpha)
        else:
            _, low, high = paired_interval(x[:, :n], alpha)
        hit = (low > 0) | (high < 0) if tie is None else low > math.log1p(tie)
        first[hit & np.isinf(first)] = n
    return first


def _null_figures(first: np.ndarray) -> dict[str, float]:
    out = {f"false_by_{n}": round(float(np.mean(first <= n)), 4) for n in (MAX_PAIRS, 100, HORIZON)}
    p = float(np.mean(first <= HORIZON))
    out["bound_500"] = round(p + 2 * math.sqrt(p * (1 - p) / len(first)), 4)
    return out


def _power_figures(first: np.ndarray) -> dict[str, float | None]:
    median = float(np.median(first))
    return {"median_pairs": median if math.isfinite(median) else None,
            f"within_{MAX_PAIRS}": round(float(np.mean(first <= MAX_PAIRS)), 4),
            f"within_{HORIZON}": round(float(np.mean(first <= HORIZON)), 4)}


def simulate(trials: int, seed: int, alpha: float = ALPHA) -> dict[str, Any]:
    """Null error rates and power, before and after eq. LRV (module docstring)."""
    rng = np.random.default_rng(seed)
    null = []
    for name, rho, sd, required in NULL_CASES:
        x = null_series(rho, sd, trials, rng)
        null.append({"case": name, "pair_sd": sd, "lag1": round(lag1(rho, sd), 3), "required": required,
                     "after": _null_figures(first_looks(x, alpha, False, None)),
                     "before": _null_figures(first_looks(x, alpha, True, None))})
    power = []
    for gain, sd in POWER_CASES:
        x = math.log1p(gain) + sd * rng.standard_normal((trials, HORIZON))
        power.append({"gain": gain, "pair_sd": sd,
                      "after": _power_figures(first_looks(x, alpha, False, TIE)),
                      "before": _power_figures(first_looks(x, alpha, True, TIE))})
    return {"trials": trials, "seed": seed, "alpha": round(alpha, 6), "min_pairs": MIN_PAIRS,
            "early_pairs": EARLY_PAIRS,
            "horizon": HORIZON, "steps_per_pair": STEPS_PER_PAIR, "wander_steps": WANDER_STEPS,
            "wander_sd": WANDER_SD, "tie": TIE, "null": null, "power": power}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.pair_dependence", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="*", type=Path,
                    help="sidecar logs (JSON lines, .gz or plain); none: simulate")
    ap.add_argument("--out", type=Path, help="write the JSON here too")
    ap.add_argument("--trials", type=int, default=2000, help="simulated comparisons per case")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.logs if not p.is_file()]
    if missing or args.trials < 2:
        what = f"logs {missing}: not files" if missing else f"--trials={args.trials}: must be >= 2"
        print(f"python -m benchmarks.pair_dependence: {what}", file=sys.stderr)
        return 2
    try:
        result = report(args.logs) if args.logs else simulate(args.trials, args.seed)
    except ValueError as exc:  # a pair event that does not parse (benchmarks/sidecar_log.py)
        print(f"python -m benchmarks.pair_dependence: logs: a pair event that is not the "
              f"sidecar's ({str(exc).splitlines()[0]}); pass the sidecar's own JSON logs", file=sys.stderr)
        return 2
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
