"""How far off the model is where the engine serves: its goodput against what the ring measured (pure).

The model's goodput at a batch size, G(B, k) = B·τ(â)/T̂(B, k) (eq. G, tuner/core/goodput.py),
is what a rebuild ranks k's by. At a bucket the engine served with its table's k, the plugin's
ring says what that k delivered there: tokens per engine-second over its steady decode steps
(sidecar/measured.py). |log(realized / predicted)| is the model's own error at that bucket,
measured live: it takes in what the model leaves out of a decode step (host time between
steps, the acceptance of this bucket's requests against the pooled â, step times of serving
against the profile's). Steps that also prefilled are left out: their chunk costs every k
the same time, and a burst's ramp-up passes through the very buckets its drain leaves to the
model (docs/sidecar.md). A switch the model decides must win by more than
that error (sidecar/arbiter.py); a bucket without this measurement gets no switch from the
model, only from paired measurement. Between two buckets whose error is known, one with
too few steps of its own borrows the larger of theirs (``bracketed``).

That error is one of level: steps slower than the profile's at every k (a burst's, docs/sidecar.md)
move G(c) and G(k) alike, while a switch rests on G(c)/G(k). Pairs measure that ratio
directly: where comparisons have EARLY_PAIRS pairs, the model's ratio error is bounded from
their distances to the model's ratio (``ratio_error``: an upper bound at CHECK_LEVEL on the sd
those distances sample, each pair mean's own noise counted in), and that bound holds the model
instead of the level error (one check's distance is often far below the error it samples,
so not their root mean square). It assumes the model errs on ratios alike where the pairs
reach and where they do not.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sidecar.measured import EARLY_PAIRS, MeasuredGoodput
from tuner.core.buckets import band_rows
from tuner.core.chi2 import chi2_ppf
from tuner.core.goodput import goodput

__all__ = ["BRACKET", "CHECK_LEVEL", "MIN_ERROR_STEPS", "LiveError", "bracketed", "live_errors",
           "model_log_ratio", "ratio_error"]

FloatArray = npt.NDArray[np.float64]
MIN_ERROR_STEPS = 32  # steady steps of the table's k at a bucket before its error is known
CHECK_LEVEL = 0.9     # the one-sided level of the bound on the model's ratio error
BRACKET = 2.0         # a bucket borrows an error only from neighbours this near (ratio of B)


@dataclass(frozen=True, slots=True)
class LiveError:
    bucket: int          # the batch-size band (named by its largest B)
    k: int               # whose steps were measured: the table's k there, else the k with most
    predicted: float     # the model's goodput at the cell's mean B, tokens/s
    realized: float      # what the ring measured, tokens/s
    error: float         # |log(realized / predicted)|
    steps: float         # steady steps behind ``realized``


def live_errors(goodput_by_ring: MeasuredGoodput, table_ks: Sequence[int], T_ms: FloatArray,
                a: FloatArray, min_steps: float = MIN_ERROR_STEPS) -> dict[int, LiveError]:
    """Per served bucket: the model's error for the table's k there (``table_ks[b-1]`` is k at
    B=b; ``T_ms`` the step times the model uses, row b-1 for B=b); where that k has fewer than
    ``min_steps`` steps, for the k with the most steady steps there, whichever ran them (the
    table's before a push, a duel's or the rotation's): a push leaves the new k a few drain
    steps a burst for a while, and the error is one of level, which any k's steps measure."""
    max_b = len(table_ks)
    ks = np.asarray(table_ks, dtype=np.int64)
    G = goodput(T_ms[:max_b], a)  # tokens per ms, row b-1
    out = {}
    for bucket in sorted({b for b, _ in goodput_by_ring.cells}):
        rows = np.asarray(band_rows(bucket, max_b), dtype=np.int64)
        if not rows.size:
            continue
        k = int(np.bincount(ks[rows - 1]).argmax())
        measured = goodput_by_ring.rate(bucket, k)
        if measured is None or measured[1] < min_steps:
            rates = [(r[1], c, r) for c in range(G.shape[1])
                     if (r := goodput_by_ring.rate(bucket, c)) is not None and r[1] >= min_steps]
            if not rates:
                continue
            _, k, measured = max(rates)
        if k >= G.shape[1]:
            continue
        realized, steps, mean_b = measured
        b = min(max(int(round(mean_b)), 1), max_b)
        predicted = float(G[b - 1, k]) * 1000.0
        if predicted <= 0 or realized <= 0:
            continue
        out[bucket] = LiveError(bucket, k, round(predicted, 3), round(realized, 3),
                                round(abs(math.log(realized / predicted)), 5), steps)
    return out


def bracketed(own: Mapping[int, float], served: Iterable[int]) -> dict[int, float]:
    """Each served bucket's live error: its own where measured; between two measured buckets
    at most BRACKET apart (the upper's B over the lower's), the larger of theirs; elsewhere
    none. A burst's drain gives each bucket it passes a few steps, so MIN_ERROR_STEPS of them
    take many bursts and a table wrong across a span was switched one bucket per burst (the
    H100's 3B quarter run: k=0 left at five buckets between 65 and 248 after 195 s awake).
    Between two near measurements the level error (host time, step times against the
    profile's) moves smoothly with B; beyond them, or across a wide gap, nothing says how."""
    known = sorted(own)
    out = dict(own)
    for bucket in served:
        at = bisect.bisect_left(known, bucket)
        if bucket not in out and 0 < at < len(known) and known[at] <= BRACKET * known[at - 1]:
            out[bucket] = max(own[known[at - 1]], own[known[at]])
    return out


def model_log_ratio(G_reps: FloatArray, rows: npt.NDArray[np.int64], k: int,
                    c: int) -> tuple[float, float] | None:
    """The model's log G(c)/G(k) over the rows (B = row): (median over its draws, their sd);
    None where it cannot price one of the two k's."""
    if max(k, c) >= G_reps.shape[2]:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.mean(np.log(G_reps[:, rows - 1, c] / G_reps[:, rows - 1, k]), axis=1)
    logs = logs[np.isfinite(logs)]
    return (float(np.median(logs)), float(np.std(logs))) if logs.size else None


def ratio_error(G_reps: FloatArray, goodput_by_ring: MeasuredGoodput,
                min_pairs: int = EARLY_PAIRS) -> float | None:
    """The model's error on G(c)/G(k) where pairs measured it, bounded above at CHECK_LEVEL:
    e = pairs' mean − model's median (log) of each comparison with at least ``min_pairs``
    pairs; a bucket's comparisons share its incumbent's error, so each checked bucket counts
    once, with the mean of its e²; over n buckets sqrt(Σ / χ²_n at 1 − CHECK_LEVEL), the
    bound on a normal error's sd (×7.96 the root mean square at n=1, ×3.08 at 2, ×1.94 at 4);
    None with no such comparison."""
    max_b = G_reps.shape[1]
    squares: dict[int, list[float]] = {}
    for bucket, k, ref, _, mean in goodput_by_ring.compared(min_pairs):
        rows = np.asarray(band_rows(bucket, max_b), dtype=np.int64)
        model = model_log_ratio(G_reps, rows, ref, k) if rows.size else None
        if model is not None:
            squares.setdefault(bucket, []).append((mean - model[0]) ** 2)
    if not squares:
        return None
    # one check's |e| is often far below the error it samples: a bound, not the estimate
    total = sum(float(np.mean(e2)) for e2 in squares.values())
    return round(math.sqrt(total / chi2_ppf(1 - CHECK_LEVEL, len(squares))), 5)
