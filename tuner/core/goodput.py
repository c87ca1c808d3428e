"""Goodput math: which draft length k each batch size B should use.

Legend (the paper's symbols; arrays are 0-based, so row b-1 is batch size b):

    B        batch size: the number of requests in one decode step, 1..max_num_seqs
    k        draft length used in a step, 0..K (0: the drafter guesses nothing)
    K        the longest draft length, vLLM's num_speculative_tokens
    T(B, k)  measured step time at batch size B with k drafts (seconds or ms: only ratios
             of G matter, so the unit cancels)
    a_i      probability that the first i drafts are all accepted; a[i-1] holds a_i
    tau(k)   mean tokens a request keeps per step: tau(k) = 1 + sum_{i<=k} a_i    (eq. tau)
    G(B, k)  goodput, kept tokens per unit time: G(B, k) = B * tau(k) / T(B, k)   (eq. G)

The paper states two equations, cited below as eq. G and eq. tau.

Pure: takes arrays, returns arrays. A rebuild for max_num_seqs=1024, K=8 takes well under
1 ms, so the sidecar runs it inline (see benchmarks/).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tuner.core.errors import InvalidInput
from tuner.core.table import Table

__all__ = ["Cliff", "TableChoice", "build_table", "choose_k", "choose_table", "cliff_warnings",
           "cliffs", "edges_in_cliffs", "goodput", "interpolate_step_times",
           "interpolation_weights", "predicted_loss",
           "refine_points", "tau"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(slots=True, frozen=True)
class TableChoice:
    """A built table with what it was built from: ks[b-1] is k at B=b, G is eq. G."""

    table: Table
    ks: IntArray
    G: FloatArray


def _floats(name: str, values: Any, ndim: int) -> FloatArray:
    """``values`` as a finite float array of ``ndim`` dimensions, else InvalidInput."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{name}: not numeric ({exc})") from exc
    if array.ndim != ndim or array.size == 0:
        raise InvalidInput(f"{name}: expected a non-empty {ndim}-D array, got shape "
                           f"{array.shape}")
    if not np.all(np.isfinite(array)):
        raise InvalidInput(f"{name}: contains nan or inf; measure or estimate it again")
    return array


def tau(a: Any) -> FloatArray:
    """tau[k] = 1 + sum_{i<=k} a_i for k = 0..K (eq. tau); shape (K+1,)."""
    a_arr = _floats("a", a, 1)
    if np.any((a_arr < 0) | (a_arr > 1)):
        raise InvalidInput(f"a: every a_i must lie in [0, 1], got {a_arr.tolist()}")
    return np.concatenate(([1.0], 1.0 + np.cumsum(a_arr)))


def interpolate_step_times(grid_B: Any, T_grid: Any, max_num_seqs: int) -> FloatArray:
    """T(B, k) for every B = 1..max_num_seqs from the profiled grid (input to eq. G).

    Linear in B between grid points, per k. Outside the grid the nearest measured value is
    held: extrapolating a step time that has jumps (paper, "Results") would invent data,
    and holding never claims that an unmeasured B is cheaper than a measured one nearby.
    Returns shape (max_num_seqs, K+1); row b-1 is batch size b.
    """
    grid = np.asarray(grid_B)
    if grid.ndim != 1 or grid.size == 0 or not np.issubdtype(grid.dtype, np.integer):
        raise InvalidInput(f"grid_B: expected a non-empty 1-D list of integers, got {grid!r}")
    if grid[0] < 1 or np.any(np.diff(grid) <= 0):
        raise InvalidInput(f"grid_B: batch sizes must be >= 1 and strictly increasing, "
                           f"got {grid.tolist()}")
    T = _floats("T_grid", T_grid, 2)
    if T.shape[0] != grid.size or T.shape[1] < 1:
        raise InvalidInput(f"T_grid: shape {T.shape} does not match (len(grid_B)={grid.size}"
                           ", K+1)")
    if np.any(T <= 0):
        raise InvalidInput("T_grid: every step time must be > 0")
    if max_num_seqs < 1:
        raise InvalidInput(f"max_num_seqs={max_num_seqs} must be >= 1")
    # one set of weights for all k: row = T[lo] + w * (T[hi] - T[lo])
    lo, hi, w = interpolation_weights(grid, max_num_seqs)
    out: FloatArray = T[lo] + w * (T[hi] - T[lo])
    return out


def interpolation_weights(grid_B: Any, max_num_seqs: int) -> tuple[IntArray, IntArray, FloatArray]:
    """(lo, hi, w) with row b-1 of the interpolation = (1 - w)·X[lo] + w·X[hi] for values X
    at the grid points (indices into grid_B; w has shape (max_num_seqs, 1)): the weights of
    interpolate_step_times, for anything else that lives on the grid (tuner/core/confidence.py
    interpolates each grid cell's drawn error the same way). grid_B: validated, increasing."""
    grid = np.asarray(grid_B, dtype=np.int64)
    n = max_num_seqs
    if grid.size == 1:
        zeros = np.zeros(n, dtype=np.int64)
        return zeros, zeros, np.zeros((n, 1))
    B = np.clip(np.arange(1, n + 1, dtype=np.float64), grid[0], grid[-1])
    hi = np.clip(np.searchsorted(grid, B, side="left"), 1, grid.size - 1).astype(np.int64)
    lo = hi - 1
    w = ((B - grid[lo]) / (grid[hi] - grid[lo]))[:, None]
    return lo, hi, w


def goodput(T_dense: Any, a: Any) -> FloatArray:
    """G[b-1, k] = b * tau(k) / T(b, k) (eq. G) for every B = 1..len(T_dense)."""
    taus = tau(a)
    T = _floats("T_dense", T_dense, 2)
    if T.shape[1] != taus.size:
        raise InvalidInput(f"T_dense: has {T.shape[1]} columns but a gives K={taus.size - 1};"
                           " need K+1 columns, one per k = 0..K")
    if np.any(T <= 0):
        raise InvalidInput("T_dense: every step time must be > 0")
    B = np.arange(1, T.shape[0] + 1, dtype=np.float64)[:, None]
    return B * taus[None, :] / T


def _allowed_mask(num_k: int, allowed_k: set[int] | None) -> npt.NDArray[np.bool_]:
    """Boolean mask over k = 0..num_k-1; InvalidInput if ``allowed_k`` leaves nothing."""
    if allowed_k is None:
        return np.ones(num_k, dtype=bool)
    bad = sorted(k for k in allowed_k if not 0 <= k < num_k)
    if bad or not allowed_k:
        raise InvalidInput(f"allowed_k={sorted(allowed_k)}: needs at least one k and every k "
                           f"in 0..{num_k - 1}; out of range: {bad}")
    mask = np.zeros(num_k, dtype=bool)
    mask[sorted(allowed_k)] = True
    return mask


def choose_k(G: Any, tie: float = 0.005, allowed_k: set[int] | None = None) -> IntArray:
    """Per B, the k maximising G(B, k) (eq. G), with the paper's tie rule.

    Walking B upward, the previous B's k is kept unless the best allowed k is more than
    ``tie`` (relative) better at this B, so near-ties do not split the table into many
    ranges. B=1 takes the plain argmax (ties go to the smallest k).
    """
    G_arr = _floats("G", G, 2)
    if tie < 0:
        raise InvalidInput(f"tie={tie} must be >= 0")
    masked = np.where(_allowed_mask(G_arr.shape[1], allowed_k)[None, :], G_arr, -np.inf)
    best = np.argmax(masked, axis=1)
    best_G = masked[np.arange(masked.shape[0]), best]
    # switch[b][k]: at row b, leaving k for best[b] gains more than the tie margin
    switch = (best_G[:, None] > masked * (1.0 + tie)).tolist()
    best_list = best.tolist()
    ks = [0] * len(best_list)
    current = best_list[0]
    # sequential by nature (each row depends on the previous choice), so a plain loop
    # over precomputed python lists: ~1024 cheap iterations
    for row, (row_switch, row_best) in enumerate(zip(switch, best_list, strict=True)):
        if row_switch[current]:
            current = row_best
        ks[row] = current
    return np.asarray(ks, dtype=np.int64)


def choose_table(T_dense: Any, a: Any, tie: float = 0.005,
                 allowed_k: set[int] | None = None) -> TableChoice:
    """The table maximising eq. G for already-dense step times (the sidecar's rebuild)."""
    G = goodput(T_dense, a)
    ks = choose_k(G, tie=tie, allowed_k=allowed_k)
    return TableChoice(table=Table.from_dense(ks.tolist()), ks=ks, G=G)


def build_table(grid_B: Any, T_grid: Any, a: Any, max_num_seqs: int, tie: float = 0.005,
                allowed_k: set[int] | None = None) -> TableChoice:
    """Profile grid + acceptance -> the table maximising G(B, k) (eq. G) for B=1..max."""
    T_dense = interpolate_step_times(grid_B, T_grid, max_num_seqs)
    return choose_table(T_dense, a, tie=tie, allowed_k=allowed_k)


def predicted_loss(table: Table, T_dense: Any, a: Any, num_speculative_tokens: int,
                   allowed_k: set[int] | None = None) -> FloatArray:
    """Per B: 1 - G(B, k_table(B)) / max_k G(B, k) (eq. G), 0 where the table is best.

    K is looked up as vLLM does (clamped to ``num_speculative_tokens``); the max runs over
    every k = 0..K, or over ``allowed_k`` when given.
    """
    G = goodput(T_dense, a)
    ks = np.asarray(table.dense(G.shape[0], num_speculative_tokens)[1:], dtype=np.int64)
    if ks.max() >= G.shape[1]:
        raise InvalidInput(f"table: uses K={int(ks.max())} but T_dense only has k = 0.."
                           f"{G.shape[1] - 1}; profile the larger k or lower the table")
    masked = np.where(_allowed_mask(G.shape[1], allowed_k)[None, :], G, -np.inf)
    chosen = G[np.arange(G.shape[0]), ks]
    return 1.0 - chosen / masked.max(axis=1)  # type: ignore[no-any-return]


@dataclass(slots=True, frozen=True)
class Cliff:
    """Between adjacent grid points B_lo < B_hi, T(B, k) jumps by ``ratio``: linear interpolation
    puts a smooth ramp where the engine has a step (e.g. vLLM's CUDA graphs end at 512 tokens a
    step, B·(k+1) > 512 runs eager), so a table edge inside (B_lo, B_hi) is a guess."""

    B_lo: int
    B_hi: int
    k: int
    ratio: float


def cliffs(grid_B: Any, T_grid: Any, jump: float = 1.5) -> list[Cliff]:
    """Every (adjacent grid pair, k) whose step time grows by ``jump`` or more between them."""
    B = [int(b) for b in grid_B]
    T = _floats("T_grid", T_grid, 2)
    return [Cliff(B[g], B[g + 1], k, float(T[g + 1, k] / T[g, k]))
            for g in range(len(B) - 1) if B[g + 1] - B[g] > 1
            for k in range(T.shape[1]) if T[g, k] > 0 and T[g + 1, k] / T[g, k] >= jump]


def edges_in_cliffs(table: Table, found: list[Cliff]) -> list[tuple[int, list[Cliff]]]:
    """Table edges (the last B of a range) strictly inside a cliff, past its last measured point:
    batch sizes there may run a k whose step has already jumped. (An edge on B_lo is the safe
    side of the guess.)"""
    out = []
    for start, _, _ in table.to_list()[1:]:
        edge = start - 1
        near = [c for c in found if c.B_lo < edge < c.B_hi]
        if near:
            out.append((edge, near))
    return out


def refine_points(table: Table, found: list[Cliff]) -> list[int]:
    """Grid points to add: the middle of every cliff that holds a table edge (bisection)."""
    return sorted({(c.B_lo + c.B_hi) // 2 for _, near in edges_in_cliffs(table, found) for c in near})


def cliff_warnings(table: Table, found: list[Cliff]) -> list[str]:
    """One line per table edge that falls inside a cliff: where to add grid points."""
    out = []
    for edge, near in edges_in_cliffs(table, found):
        start = edge + 1
        ks = sorted({c.k for c in near})
        lo, hi = min(c.B_lo for c in near), max(c.B_hi for c in near)
        out.append(f"the edge at B={edge}/{start} lies in a step-time cliff: T(B, k={ks}) grows "
                   f"x{max(c.ratio for c in near):.1f} between the grid points B={lo} and B={hi}, "
                   f"so the true edge is anywhere in {lo + 1}..{hi}; add grid points there "
                   f"(e.g. --grid ...,{lo},{(lo + hi) // 2},{hi},...) or tune with --refine")
    return out
