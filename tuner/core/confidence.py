"""Tables that only split where the data can tell (pure).

The paper keeps the previous batch size's k unless another is better by more than a tie
(0.5%), comparing point estimates. Measured step times carry noise of several percent, so
near-ties flip from one batch size to the next and split a table into many ranges that no
measurement supports. Here every goodput is a distribution, not a point:

    G_r(B, k) = B·τ_r(k)/T_r(B, k)   for replicates r = 1..R                      (eq. G)

where T_r is drawn log-normally around each measured T(B, k) with the spread its repeats imply
(tuner/core/samples.cell_sigma), and τ_r from a_i drawn from its Beta posterior (accepted, drafted
counts). Where the step times were measured at grid points and interpolated between them
(``grid``), each grid cell's error is drawn once and interpolated along B as T was: 146 batch
sizes between 8 measured points carry 8 errors, not 146 independent ones whose average would
look far more precise than the measurements are (the committed 32B profile: k=3 over k=2 on
B=1-146 read +4.6% [+3.2, +6.1] drawn per row, [-2.4, +11.7] per grid cell at the former
fixed σ = 5%).
Walking B upward, the current k is kept unless the k with the best median goodput beats it by
more than the tie at the lower confidence bound:

    quantile_{1-confidence}( G_r(B, k*) / G_r(B, k) ) > 1 + tie.

Ranges narrower than the minimum width are merged into a neighbour unless a measured cliff
(a step-time jump between grid points) lies at their edge. Each edge of the result carries
the probability that its switch is right: the share of replicates in which the new k beats the
old one over the new range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tuner.core.errors import InvalidInput
from tuner.core.goodput import Cliff, _allowed_mask, goodput, interpolation_weights, tau
from tuner.core.table import Table

__all__ = ["Change", "Confident", "Edge", "RangeGain", "better_at", "choose_confident",
           "confident_changes", "draw_acceptance", "draw_step_times", "merge_remnants", "min_width",
           "replicates"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Edge:
    """Between B=end and B=end+1 the table switches from k_before to k_after."""

    end: int
    k_before: int
    k_after: int
    confidence: float  # P(k_after beats k_before over the range after the edge)


@dataclass(frozen=True, slots=True)
class RangeGain:
    """A range's k against the runner-up k over that range: mean G ratio with its interval."""

    start: int
    end: int
    k: int
    runner_up: int | None
    gain: float
    gain_low: float
    gain_high: float


@dataclass(frozen=True, slots=True)
class Confident:
    table: Table
    ks: IntArray          # ks[b-1]: k at B=b
    G: FloatArray         # median goodput over replicates, [B, K+1]
    edges: list[Edge]
    ranges: list[RangeGain]
    G_reps: FloatArray    # the replicates behind it, [R, B, K+1] (confident_changes reuses them)


def min_width(start: int, width: int = 4, share: float = 0.125) -> int:
    """Narrowest range worth its own k from batch size ``start``: ``width`` batch sizes, or
    ``share`` of start where that is more (a range [129, 131] says nothing one can measure)."""
    return max(width, int(np.ceil(share * start)))


def draw_step_times(T: Any, sigma: Any, replicates: int, rng: np.random.Generator,
                    grid: Any | None = None) -> FloatArray:
    """T_r = T·exp(ε_r): log-normal replicates [R, B, K+1] of dense step times, σ dense too.

    Without ``grid``, ε = σ·z with z independent per row: each B measured on its own (the
    sidecar's live buckets). With ``grid`` (the B where cells were measured), z is drawn per
    grid cell and ε = σ(g)·z(g) interpolated along B with interpolate_step_times' weights, so
    a B between two grid points carries their errors, as its T carries their values; σ is read
    at the grid rows only."""
    T_arr, s = np.asarray(T, dtype=np.float64), np.asarray(sigma, dtype=np.float64)
    if grid is None:
        eps = s[None] * rng.standard_normal((replicates, *T_arr.shape))
    else:
        rows = _grid_rows(grid, T_arr.shape[0])
        at_grid = s[rows][None] * rng.standard_normal((replicates, rows.size, T_arr.shape[1]))
        lo, hi, w = interpolation_weights(rows + 1, T_arr.shape[0])
        eps = (1 - w)[None] * at_grid[:, lo] + w[None] * at_grid[:, hi]
    out: FloatArray = T_arr[None] * np.exp(eps)
    return out


def _grid_rows(grid: Any, max_b: int) -> IntArray:
    """Rows (b-1) of the grid's batch sizes; InvalidInput unless increasing within 1..max_b."""
    g = np.asarray(grid)
    if g.ndim != 1 or g.size == 0 or not np.issubdtype(g.dtype, np.integer) \
            or g[0] < 1 or g[-1] > max_b or np.any(np.diff(g) <= 0):
        raise InvalidInput(f"grid={np.asarray(grid).tolist()}: give the measured batch sizes, "
                           f"increasing integers within 1..{max_b} (the rows of T)")
    return g.astype(np.int64) - 1


def draw_acceptance(a: Any, drafted: Any | None, replicates: int,
                    rng: np.random.Generator, pseudo: float = 1.0) -> FloatArray:
    """a_r [R, K]: each a_i from Beta(a_i·n_i + c, (1 - a_i)·n_i + c), n_i the drafts behind it,
    then made non-increasing (first i accepted implies first i-1 accepted). Without counts,
    a is taken as exact.

    c = ``pseudo``: 1 for measured counts alone (the tuner's sample prompts: a uniform prior);
    0 where a and n already hold a prior (the sidecar's â = (w·prior + accepted)/(w + drafted)
    is the mean of Beta(â·n, (1 - â)·n), n = w + drafted). A second uniform prior there pulls
    every draw towards 1/2 when n is small: after a switch to acceptance ~0 with a k=0 table
    (a few exploration drafts, n ≈ 11) the draws had mean 1/13, which at a tie of T made k=3
    look 14% better and the demo's sidecar pushed k=3 at B=1 under â = 0.0002."""
    a_arr = np.asarray(a, dtype=np.float64)
    if drafted is None:
        return np.repeat(a_arr[None], replicates, axis=0)
    n = np.maximum(np.asarray(drafted, dtype=np.float64), 0)
    tiny = 1e-9  # Beta needs both parameters > 0: a = 0 or 1 with c = 0 draws (almost) a itself
    draws = rng.beta(np.maximum(a_arr * n + pseudo, tiny), np.maximum((1 - a_arr) * n + pseudo, tiny),
                     size=(replicates, a_arr.size))
    out: FloatArray = np.minimum.accumulate(draws, axis=1)
    return out


def _replicate_goodput(T_reps: FloatArray, a_reps: FloatArray) -> FloatArray:
    B = np.arange(1, T_reps.shape[1] + 1, dtype=np.float64)[None, :, None]
    taus = np.stack([tau(a) for a in a_reps])[:, None, :]
    out: FloatArray = B * taus / T_reps
    return out


def _walk(G_reps: FloatArray, mask: npt.NDArray[np.bool_], tie: float,
          confidence: float) -> IntArray:
    """Per B: keep the current k unless the best median k beats it beyond the tie with
    confidence (lower quantile of the replicate ratios)."""
    G_med = np.where(mask[None], np.median(G_reps, axis=0)[None], -np.inf)[0]
    best = np.argmax(G_med, axis=1)
    rows = np.arange(G_reps.shape[1])
    ratios = G_reps[:, rows, best][:, :, None] / G_reps  # [R, B, K+1]: best over each k
    low = np.quantile(ratios, 1 - confidence, axis=0)
    ks = np.empty(len(rows), dtype=np.int64)
    current = int(best[0])
    for b in rows.tolist():  # sequential: each B depends on the previous choice
        if not mask[current] or low[b, current] > 1 + tie:
            current = int(best[b])
        ks[b] = current
    return ks


def _cliff_edges(cliffs: list[Cliff]) -> set[int]:
    """Batch sizes next to which a measured cliff lies: edges there may stay narrow."""
    return {b for c in cliffs for b in range(c.B_lo, c.B_hi + 1)}


def _merge_narrow(ks: IntArray, G_med: FloatArray, cliffs: list[Cliff], width: int,
                  share: float, measured: tuple[tuple[int, int], ...] = (),
                  keep: frozenset[tuple[int, int, int]] = frozenset()) -> IntArray:
    """Merge ranges narrower than min_width into the neighbour whose k does better there,
    unless a measured cliff lies at one of its edges, it holds a whole measured stretch of
    batch sizes (``measured``: (first, last) each) or it is one of ``keep`` ([s, e, k])."""
    ks = ks.copy()
    forced = _cliff_edges(cliffs)
    while True:
        ranges = Table.from_dense(ks.tolist()).to_list()
        narrow = [(e - s + 1, i) for i, (s, e, k) in enumerate(ranges)
                  if e - s + 1 < min_width(s, width, share) and len(ranges) > 1
                  and not ({s - 1, s, e, e + 1} & forced)
                  and not any(s <= lo and hi <= e for lo, hi in measured)
                  and (s, e, k) not in keep]
        if not narrow:
            return ks
        _, i = min(narrow)
        s, e, _ = ranges[i]
        neighbours = [ranges[j][2] for j in (i - 1, i + 1) if 0 <= j < len(ranges)]
        ks[s - 1:e] = max(neighbours, key=lambda k: float(G_med[s - 1:e, k].sum()))


def merge_remnants(ks: Any, old_ks: Any, G_med: FloatArray, cliffs: list[Cliff] | None = None,
                   width: int = 4, share: float = 0.125,
                   measured: tuple[tuple[int, int], ...] = ()) -> IntArray:
    """After confident_changes: a range narrower than min_width that the old table did not
    have is what is left of an old range where only part changed with confidence; there the
    old k and its neighbours are a near-tie, so it goes to the neighbour whose k does better,
    as the width rule would merge it. The old table's own ranges stay as they were (a narrow
    one there is the operator's, or a measurement's)."""
    old = np.asarray(old_ks, dtype=np.int64)
    keep = frozenset((s, e, k) for s, e, k in Table.from_dense(old.tolist()).to_list())
    return _merge_narrow(np.asarray(ks, dtype=np.int64), G_med, cliffs or [], width, share,
                         measured, keep)


def _edges(ks: IntArray, G_reps: FloatArray) -> list[Edge]:
    ranges = Table.from_dense(ks.tolist()).to_list()
    out = []
    for (_, end, k0), (s1, e1, k1) in zip(ranges, ranges[1:]):
        wins = (G_reps[:, s1 - 1:e1, k1] / G_reps[:, s1 - 1:e1, k0]).mean(axis=1) > 1
        out.append(Edge(end, k0, k1, round(float(wins.mean()), 3)))
    return out


def _range_gains(ks: IntArray, G_reps: FloatArray, mask: npt.NDArray[np.bool_]) -> list[RangeGain]:
    out = []
    G_med = np.median(G_reps, axis=0)
    for s, e, k in Table.from_dense(ks.tolist()).to_list():
        others = [j for j in range(G_reps.shape[2]) if j != k and mask[j]]
        if not others:
            out.append(RangeGain(s, e, k, None, 0.0, 0.0, 0.0))
            continue
        runner = max(others, key=lambda j: float(G_med[s - 1:e, j].sum()))
        r = (G_reps[:, s - 1:e, k] / G_reps[:, s - 1:e, runner]).mean(axis=1) - 1
        lo, mid, hi = np.quantile(r, [0.025, 0.5, 0.975])
        out.append(RangeGain(s, e, k, runner, float(mid), float(lo), float(hi)))
    return out


def choose_confident(T: Any, sigma: Any, a: Any, drafted: Any | None = None, tie: float = 0.005,
                     confidence: float = 0.9, allowed_k: set[int] | None = None,
                     cliffs: list[Cliff] | None = None, width: int = 4, share: float = 0.125,
                     replicates: int = 200, seed: int = 0,
                     measured: tuple[tuple[int, int], ...] = (), pseudo: float = 1.0,
                     grid: Any | None = None) -> Confident:
    """The table for dense step times T[b-1, k] (ms) with log-spread sigma, acceptance a_i
    (with the drafted counts behind each, if known; ``pseudo``: draw_acceptance), splitting
    only with confidence.
    ``measured``: stretches of batch sizes, (first, last), whose step times were measured
    directly (the sidecar's live buckets): a narrow range holding one is a finding, not an
    interpolation artefact.
    ``grid``: the batch sizes T was measured at and interpolated between (a profile's grid):
    noise is drawn per grid cell and interpolated (draw_step_times). None: per row."""
    T_arr = np.asarray(T, dtype=np.float64)
    if T_arr.ndim != 2 or np.asarray(sigma).shape != T_arr.shape:
        raise InvalidInput(f"T and sigma must be [B, K+1] arrays of one shape, got {T_arr.shape} "
                           f"and {np.asarray(sigma).shape}")
    if not 0.5 <= confidence < 1:
        raise InvalidInput(f"confidence={confidence}: use a level in [0.5, 1), e.g. 0.9")
    goodput(T_arr, a)  # validates shapes and values once, with its messages
    rng = np.random.default_rng(seed)
    G_reps = _replicate_goodput(draw_step_times(T_arr, sigma, replicates, rng, grid),
                                draw_acceptance(a, drafted, replicates, rng, pseudo))
    mask = _allowed_mask(T_arr.shape[1], allowed_k)
    ks = _walk(G_reps, mask, tie, confidence)
    G_med = np.median(G_reps, axis=0)
    ks = _merge_narrow(ks, np.where(mask[None], G_med, -np.inf), cliffs or [], width, share,
                       measured)
    return Confident(Table.from_dense(ks.tolist()), ks, G_med, _edges(ks, G_reps),
                     _range_gains(ks, G_reps, mask), G_reps)


def replicates(T: Any, sigma: Any, a: Any, drafted: Any | None = None, replicates: int = 200,
               seed: int = 0, pseudo: float = 1.0, grid: Any | None = None) -> FloatArray:
    """G_r(B, k) [R, B, K+1]: eq. G under R draws of T (log-normal, sigma; per grid cell
    with ``grid``: draw_step_times) and a (Beta)."""
    rng = np.random.default_rng(seed)
    return _replicate_goodput(draw_step_times(T, sigma, replicates, rng, grid),
                              draw_acceptance(a, drafted, replicates, rng, pseudo))


@dataclass(frozen=True, slots=True)
class Change:
    """One run of batch sizes where a new table's k differs from the one in force."""

    start: int
    end: int
    k_old: int
    k_new: int
    gain: float        # median over replicates of mean_B G(B, k_new) / G(B, k_old) - 1
    gain_low: float    # its lower bound at the confidence level
    kept: bool         # the lower bound beats the tie: the change is worth a push


def confident_changes(G_reps: FloatArray, old_ks: Any, new_ks: Any, tie: float = 0.005,
                      confidence: float = 0.9) -> tuple[IntArray, list[Change]]:
    """Keep only the changes from ``old_ks`` to ``new_ks`` whose gain is beyond the tie with
    confidence; elsewhere the old k stays. A rebuild then never pushes a table that only
    reshuffles near-ties (docs/measurement.md, rule 9)."""
    old, new = np.asarray(old_ks, dtype=np.int64), np.asarray(new_ks, dtype=np.int64)
    out, changes = old.copy(), []
    b = 0
    while b < old.size:
        if old[b] == new[b]:
            b += 1
            continue
        e = b
        while e + 1 < old.size and old[e + 1] == old[b] and new[e + 1] == new[b]:
            e += 1
        ratio = (G_reps[:, b:e + 1, new[b]] / G_reps[:, b:e + 1, old[b]]).mean(axis=1) - 1
        low, mid = (float(x) for x in np.quantile(ratio, [1 - confidence, 0.5]))
        kept = low > tie
        if kept:
            out[b:e + 1] = new[b]
        changes.append(Change(b + 1, e + 1, int(old[b]), int(new[b]), mid, low, kept))
        b = e + 1
    return out, changes


def better_at(batch_size: int, T_row: Any, sigma_row: Any, a: Any, drafted: Any | None,
              current_k: int, allowed_k: set[int] | None = None, tie: float = 0.005,
              confidence: float = 0.9, replicates: int = 400, seed: int = 0,
              pseudo: float = 1.0) -> tuple[int, float] | None:
    """At one batch size: (k, lower bound of its gain) when a k beats ``current_k`` beyond the
    tie with confidence, else None. One row of eq. G, cheap enough for every scrape."""
    T1, s1 = np.asarray(T_row, dtype=np.float64)[None], np.asarray(sigma_row, dtype=np.float64)[None]
    rng = np.random.default_rng(seed)
    taus = np.stack([tau(x) for x in draw_acceptance(a, drafted, replicates, rng, pseudo)])  # [R, K+1]
    G = batch_size * taus / draw_step_times(T1, s1, replicates, rng)[:, 0]          # [R, K+1]
    mask = _allowed_mask(G.shape[1], allowed_k)
    best = int(np.argmax(np.where(mask, np.median(G, axis=0), -np.inf)))
    if best == current_k:
        return None
    low = float(np.quantile(G[:, best] / G[:, current_k], 1 - confidence)) - 1
    return (best, low) if low > tie else None
