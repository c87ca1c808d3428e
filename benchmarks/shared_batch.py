"""The duel pairs' batch-size matching, calibrated on simulated rings (issue #36: the shared-B
sequence).

A pair compares a duel run with the table's k on either side of it in the same band
(sidecar/measured.pairs_in). Inside a band, goodput per request is not flat in B (a prefill
chunk, a graph size) and the engine's time per step drifts as contexts grow, so the sidecar
takes the log ratio per batch size that both the run and its references ran, weighted by the
run's steps there. That removes the batch sizes from the ratio; it can leave drift in, since
at a batch size the run shares with only one side the references are not symmetric in time.
This module measures what the confidence sequence does with such pairs under the null.

Each trial is a ring of ``STEPS`` steady engine steps under the table's k, with a duel run of
``RUN`` steps at another k every ``EVERY`` steps. k has no effect (the null): a step's seconds
are T(B)·(1 + growth·age)·noise, with T(B) rising ``PER_REQUEST`` a request and ``JUMP`` from
B ≥ ``JUMP_AT`` up (inside the band 33-40), ``age`` the steps since the requests in flight
arrived (contexts grow; every ``TURNOVER`` steps, or at a drain's refill, they start again);
its emitted tokens B·τ plus binomial-like noise. The load:

- ``wander``: B a reflecting random walk in 33-40 (arrivals and finishes at a steady load);
- ``drain``: B falls by one every ``DRAIN_EVERY`` ± 1 steps from 40 to 25, then a burst refills
  it to 40 (contexts start short again); pairs form only where a run shares batch sizes with
  its references, at the edges of its stretch, on one side;
- ``ramp``: the mirror of the drain, B rising by one every ``DRAIN_EVERY`` ± 1 steps from 25 to 40;
  the contexts of the requests in flight do not restart at the top (a steady stream);
- ``edge``: B a random walk in 37-44, across the edge of the bands 33-40 and 41-48 (a steady
  load at a band's edge: its runs often straddle two bands; all of it above the step in T).

Pairs come from the sidecar's own ``pairs_in``; each comparison (band) is looked at after
every pair by the sidecar's own ``paired_interval`` at its level. ``false_rate``: the share of
comparisons with at least ``EARLY_PAIRS`` pairs whose interval excluded 1 at some look;
``bound``: it plus 2 SE (3/n, the rule of three, where none did). ``band_wide``: the same with
each run's log ratio taken over the whole band (its goodput per request over its references'),
no gate; ``band_wide_gated``: only the runs whose references' mean B is within 1% of the run's,
the rule the matching replaced (PAIR_LOAD_TOLERANCE, before 5a4f7f8).

The same rings, read as the sidecar reads them (``MeasuredGoodput.ingest`` every ``SCRAPE``
steps with the table), say how often the unpaired rule (UNPAIRED_RUNS runs that had their
chance to pair and did not) leaves a bucket the load holds to the model: ``unpairable`` is the
share of (ring, held band) that was not pairable at some scrape (the first HELD_TRIALS rings
of a load), and ``paired_after`` the
share of those that would have paired later in the same ring had duels gone on there (the
deployed arbiter asks no duel where a bucket is not pairable, until a push marks it): a
counterfactual, saying whether the bucket could have been measured.

    python -m benchmarks.shared_batch --trials 2000 \\
        --out benchmarks/results/calibration/shared_batch.json
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.json_out import emit
from benchmarks.pair_dependence import ALPHA
from sidecar.measured import (EARLY_PAIRS, UNPAIRED_RUNS, MeasuredGoodput, pairs_in,
                              paired_interval)
from tuner.core.admin_api import Step
from tuner.core.buckets import band

STEPS = 6400          # a trial's ring: 100 duel runs
EVERY, RUN = 64, 16   # a duel run of RUN steps every EVERY steps (the sidecar's --duel-run)
TABLE_K, DUEL_K = 3, 1
BASE_S = 0.07         # T(1), seconds
PER_REQUEST = 0.004   # T's rise per request in the batch
JUMP_AT, JUMP = 37, 0.12     # a step in T inside the band 33-40 (a prefill chunk, a graph size)
GROWTH = 0.0002       # T's rise per step of context age (1% over a run and its references)
NOISE = 0.03          # a step's seconds: lognormal sd
TAU = 2.2             # tokens a request keeps per step, at every k (the null)
DRAIN_EVERY = 6       # steps per batch size in a drain or a ramp
TURNOVER = 500        # steps until the requests in flight are new ones (not a multiple of EVERY)
LOADS = ("wander", "drain", "ramp", "edge")
SCRAPE = 64           # steps between two reads of the ring
GATE = 0.01           # the old rule's tolerance on the references' mean B
HELD_TRIALS = 500     # rings a load read as the sidecar reads them


def load_path(load: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(B, context age in steps) per step for a load of the module's list."""
    B = np.empty(n, dtype=np.int64)
    age = np.empty(n)
    if load in ("wander", "edge"):
        lo, hi = (33, 40) if load == "wander" else (37, 44)
        b = (lo + hi) // 2
        moves = rng.choice((-1, 0, 1), size=n, p=(0.3, 0.4, 0.3))
        for i in range(n):
            b = min(hi, max(lo, b + int(moves[i])))
            B[i], age[i] = b, i % TURNOVER
        return B, age
    down = load == "drain"
    levels = np.array(list(range(40, 24, -1) if down else range(25, 41)))
    i = 0
    while i < n:   # one drain (or ramp) after another, each B held DRAIN_EVERY ± 1 steps
        cycle = np.repeat(levels, rng.integers(DRAIN_EVERY - 1, DRAIN_EVERY + 2, len(levels)))
        m = min(len(cycle), n - i)
        B[i:i + m] = cycle[:m]
        age[i:i + m] = np.arange(m) if down else (np.arange(i, i + m) % TURNOVER)
        i += m
    return B, age


def ring(load: str, rng: np.random.Generator) -> list[Step]:
    """One trial's steady steps: the table's k, a duel run every EVERY steps (module)."""
    B, age = load_path(load, STEPS, rng)
    T = BASE_S * (1 + PER_REQUEST * B) * (1 + JUMP * (B >= JUMP_AT)) * (1 + GROWTH * age)
    seconds = T * np.exp(rng.normal(0.0, NOISE, STEPS))
    emitted = np.maximum(B, np.rint(B * TAU + rng.normal(0.0, 1.0, STEPS) * np.sqrt(B) * 0.8))
    duel = (np.arange(STEPS) % EVERY) >= EVERY - RUN
    return [Step(i + 1, int(B[i]), k, k, float(seconds[i]), int(B[i]), int(emitted[i]),
                 float(seconds[i]))
            for i, k in enumerate(np.where(duel, DUEL_K, TABLE_K))]


def band_wide(steps: list[Step]) -> Iterator[tuple[int, float, bool]]:
    """(band, log ratio, gated) per duel run taken over the whole band: the run's goodput per
    request over that of the RUN steps on either side of it in the same band; ``gated``: their
    mean B within GATE of the run's (the rule before the matching)."""
    def rate(xs: list[Step]) -> float:
        return sum(s.emitted or 0 for s in xs) / sum(s.seconds * s.batch_size for s in xs)
    for start in range(EVERY - RUN, len(steps) - RUN - RUN, EVERY):
        run = steps[start:start + RUN]
        if start < RUN:
            continue
        bucket = band(int(np.median([s.batch_size for s in run])))
        mine = [s for s in run if band(s.batch_size) == bucket]
        around = [s for s in (*steps[start - RUN:start], *steps[start + RUN:start + 2 * RUN])
                  if band(s.batch_size) == bucket]
        if len(mine) >= 4 and len(around) >= RUN // 2:
            mean_b = sum(s.batch_size for s in mine) / len(mine)
            ref_b = sum(s.batch_size for s in around) / len(around)
            yield bucket, math.log(rate(mine) / rate(around)), abs(ref_b / mean_b - 1) <= GATE


def unpairable(steps: list[Step]) -> list[tuple[bool, bool]]:
    """Per band the load held: (was it not pairable at some read of the ring, did it pair after
    that), reading ``steps`` as the sidecar does, every SCRAPE steps, under the table's k."""
    table_k = [TABLE_K] * (max(s.batch_size for s in steps) + 1)
    m = MeasuredGoodput()
    left: dict[int, int] = {}     # band -> pairs it had when first found not pairable
    for i in range(0, len(steps), SCRAPE):
        m.ingest(steps[i:i + SCRAPE], table_k)
        for bucket in m.held - m.pairable():
            left.setdefault(bucket, _pairs_at(m, bucket))
    return [(b in left, b in left and _pairs_at(m, b) > left[b]) for b in m.held]


def _pairs_at(m: MeasuredGoodput, bucket: int) -> int:
    return sum(len(v) for (b, _, _), v in m.pairs.items() if b == bucket)


def first_exclusion(x: np.ndarray, alpha: float) -> int | None:
    """The first look (pair count) at which the interval excludes 0; None if none did."""
    for n in range(EARLY_PAIRS, len(x) + 1):
        _, low, high = paired_interval(x[:n], alpha)
        if low > 0 or high < 0:
            return n
    return None


def null_figures(series: list[np.ndarray], alpha: float) -> dict[str, Any]:
    looked = [x for x in series if len(x) >= EARLY_PAIRS]
    hits = [first_exclusion(x, alpha) for x in looked]
    n = max(len(looked), 1)
    p = sum(h is not None for h in hits) / n
    means = [float(np.mean(x)) for x in looked]
    bound = p + 2 * math.sqrt(p * (1 - p) / n) if p > 0 else 3 / n   # none erred: the rule of three
    return {"comparisons": len(looked),
            "pairs_median": float(np.median([len(x) for x in looked])) if looked else 0.0,
            "mean_log_ratio": round(float(np.mean(means)), 5) if means else None,
            "false_rate": round(p, 4), "bound": round(bound, 4)}


def simulate(trials: int, seed: int, alpha: float) -> dict[str, Any]:
    """Per load, the deployed matching's and the band-wide ratio's null figures (module)."""
    rng = np.random.default_rng(seed)
    rows = []
    for load in LOADS:
        matched: list[np.ndarray] = []
        wide: list[np.ndarray] = []
        gated: list[np.ndarray] = []
        held: list[tuple[bool, bool]] = []
        for t in range(trials):
            steps = ring(load, rng)
            if t < HELD_TRIALS:   # the sidecar's reads re-pair its tail each time: ~17x the cost
                held += unpairable(steps)
            by: dict[int, list[float]] = {}
            for p in pairs_in(steps, set()):
                by.setdefault(p.bucket, []).append(p.log_ratio)
            matched += [np.array(v) for v in by.values()]
            wide_by: dict[int, list[float]] = {}
            gated_by: dict[int, list[float]] = {}
            for bucket, r, ok in band_wide(steps):
                wide_by.setdefault(bucket, []).append(r)
                if ok:
                    gated_by.setdefault(bucket, []).append(r)
            wide += [np.array(v) for v in wide_by.values()]
            gated += [np.array(v) for v in gated_by.values()]
        left = [after for was, after in held if was]
        rows.append({"case": f"shared-b-{load}", "load": load, "trials": trials,
                     "matched": null_figures(matched, alpha), "band_wide": null_figures(wide, alpha),
                     "band_wide_gated": null_figures(gated, alpha),
                     "held_bands": len(held),
                     "unpairable": round(len(left) / len(held), 4) if held else None,
                     "paired_after": round(sum(left) / len(left), 4) if left else None})
        print(f"{load}: {rows[-1]}", file=sys.stderr)
    return {"trials": trials, "seed": seed, "alpha": round(alpha, 6), "steps": STEPS,
            "scrape": SCRAPE, "unpaired_runs": UNPAIRED_RUNS, "held_trials": min(trials, HELD_TRIALS),
            "every": EVERY, "run": RUN, "jump": [JUMP_AT, JUMP], "growth": GROWTH, "noise": NOISE,
            "per_request": PER_REQUEST, "drain_every": DRAIN_EVERY, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.shared_batch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2000, help="simulated rings per load")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the JSON here too")
    args = ap.parse_args(argv)
    if args.trials < 1:
        print(f"python -m benchmarks.shared_batch: --trials={args.trials}: must be >= 1",
              file=sys.stderr)
        return 2
    result = simulate(args.trials, args.seed, ALPHA)
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
