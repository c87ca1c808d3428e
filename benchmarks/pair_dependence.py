"""How alike neighbouring duel pairs are, from real sidecar logs (issue #36 item 1).

The sidecar's confidence sequence (sidecar/measured.py, eq. CS) assumes independent pairs.
Every pair it finds is a `pair` event in its log: the run's first seq, band, k, reference k,
log ratio and steps. Per comparison (band and the two k's, the ratio turned to the larger k
over the smaller), in seq order: the lag-1 autocorrelation r of the log ratios, the long-run
variance factor an AR(1) with that r implies, (1 + r)/(1 - r) (1 when independent, 3 at
r = 0.5), and the batch-means factor b·var(means of b consecutive pairs)/var(pairs), which
needs no model but sees only the dependence inside b pairs (2.2 of AR(1) ρ = 0.5's 3 at
b = 5); pooled over comparisons on the pairs centred per comparison.

    python -m benchmarks.pair_dependence runs/noharm/sidecar-part0.log.gz [LOG...] [--out F]

`--simulate` instead prints the null error rate and power of the sequence with and without an
inflation (the figures docs/sidecar.md quotes; seeded, a few minutes).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sidecar.measured import RHO

Key = tuple[int, int, int]  # (band, smaller k, larger k)
BATCH = 5


def pairs_from(lines: Iterable[str]) -> dict[Key, list[tuple[int, float]]]:
    """(seq, log ratio larger-k over smaller-k) per comparison, from JSON log lines. Pure."""
    out: dict[Key, list[tuple[int, float]]] = {}
    for line in lines:
        if '"pair"' not in line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        p = event.get("pair") if event.get("event") == "pair" else None
        if not isinstance(p, dict):
            continue
        lo, hi = sorted((int(p["k"]), int(p["ref"])))
        sign = 1.0 if int(p["k"]) == hi else -1.0
        out.setdefault((int(p["bucket"]), lo, hi), []).append((int(p["seq"]), sign * float(p["log_ratio"])))
    return {k: sorted(v) for k, v in out.items()}


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
    lines: list[str] = []
    for p in paths:
        raw = p.read_bytes()
        lines += (gzip.decompress(raw) if p.suffix == ".gz" else raw).decode().splitlines()
    found = pairs_from(lines)
    per = [{"band": b, "k": [lo, hi], **dependence([[v for _, v in s]])}
           for (b, lo, hi), s in sorted(found.items())]
    return {"logs": [p.name for p in paths], "pooled": dependence(
        [[v for _, v in s] for s in found.values()]), "comparisons": per}


def _half(n: int, alpha: float) -> float:
    return math.sqrt((n + RHO) * (math.log((n + RHO) / RHO) + 2 * math.log(2 / alpha))) / n


def _series(case: str, trials: int, n: int, rng: np.random.Generator, mu: float, sd: float) -> np.ndarray:
    e = rng.normal(0, 1, (trials, n))
    if case == "iid":
        return mu + sd * e
    rho, share = (0.5, 1.0) if case == "ar0.5" else (math.exp(-1 / 4), 0.28)  # wander: τ = 4 pairs
    w = np.empty_like(e)
    w[:, 0] = rng.normal(0, 1, trials)
    for i in range(1, n):
        w[:, i] = rho * w[:, i - 1] + math.sqrt(1 - rho * rho) * rng.normal(0, 1, trials)
    return mu + sd * (math.sqrt(share) * w + math.sqrt(1 - share) * e)


def _false_rate(x: np.ndarray, alpha: float, floor: float, gain: bool) -> float:
    """Share of trials whose sequence ever excludes 0 (gain: ever clears 0 from above)."""
    ever = np.zeros(x.shape[0], dtype=bool)
    for n in range(5, x.shape[1] + 1):
        xs = x[:, :n]
        s = np.maximum(xs.std(axis=1, ddof=1), 0.004) * math.sqrt(floor)
        m, h = xs.mean(axis=1), _half(n, alpha) * s
        ever |= (m - h > 0) if gain else (np.abs(m) > h)
    return float(ever.mean())


def simulate(trials: int = 500, seed: int = 1) -> list[dict[str, Any]]:
    """Null errors over looks 5..500 and power at 40 pairs, at the sidecar's level over three
    challengers, for the boundary as deployed (f = 1) and assuming ρ = 0.5 (f = 3)."""
    alpha, rng, rows = 0.1 / 3, np.random.default_rng(seed), []
    for f in (1.0, 3.0):
        row: dict[str, Any] = {"variance_factor": f}
        for case in ("iid", "ar0.5", "wander"):
            row[f"null_{case}"] = _false_rate(_series(case, trials, 500, rng, 0.0, 0.03), alpha, f, False)
        for sd in (0.03, 0.06):
            row[f"power_3pct_sd{sd}"] = _false_rate(
                _series("iid", trials, 40, rng, math.log(1.03), sd), alpha, f, True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="*", type=Path, help="sidecar logs (JSON lines, .gz or plain)")
    ap.add_argument("--out", type=Path, help="write the JSON here too")
    ap.add_argument("--simulate", action="store_true")
    args = ap.parse_args(argv)
    if args.simulate:
        result: Any = simulate()
    else:
        missing = [str(p) for p in args.logs if not p.is_file()]
        if not args.logs or missing:
            print(f"error: logs {missing or 'none given'}: give the sidecar's log files", file=sys.stderr)
            return 2
        result = report(args.logs)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
