"""The k in force stays unless a change is confidently better; not for drafts that buy nothing (pure).

confident_changes (tuner/core/confidence.py) keeps the engine's k over a run of batch sizes unless
the new k beats it beyond the tie at the confidence level. At acceptance ~0 every k has
τ(k) ≈ 1, so G(B, k) = B·τ(k)/T(B, k) ranks the k by step time alone, and where step times are a
tie the incumbent stays, however many drafts it wastes: in the demo, after acceptance fell to
~0, the first push was [[1,3,3],[4,16,0]] with â = [0.00, 0.00, 0.00], k=3 kept at B <= 3 where
T(B, 3) and T(B, 0) were within their noise (6.96 vs 6.92 ms at B=1) and it can only lose.

So a change from k_old to a smaller k_new that confident_changes left out is made anyway when

    (1) k_old's extra drafts buy at most the tie in expectation:
            Σ_{k_new < i <= k_old} â_i  <=  tie · τ(k_new; â)        (eq. τ at â, the expectation)
    (2) k_new is at least as fast within its interval, over the run's batch sizes:
            quantile_confidence( mean_B T_r(B, k_old) / T_r(B, k_new) )  >=  1
        (T_r log-normal around T̂ with its spread, as in eq. G's replicates).

With (1) the incumbent's best case is a gain inside the tie even if its drafts cost nothing;
with (2) the data do not say k_new's steps are slower. Then keeping k_old is no longer "not
confidently better to change" but "confidently no better to keep".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from tuner.core.confidence import Change, draw_step_times
from tuner.core.goodput import tau

__all__ = ["drop_futile", "is_futile"]

IntArray = npt.NDArray[np.int64]


def is_futile(change: Change, T: Any, sigma: Any, a: Any, tie: float = 0.005,
              confidence: float = 0.9, replicates: int = 400, seed: int = 0) -> bool:
    """Does the incumbent k_old of ``change`` keep drafts that buy nothing (the module's
    (1) and (2))? T and sigma are dense [B, K+1] (row b-1 is B=b); a is â, non-increasing."""
    if change.k_new >= change.k_old:
        return False
    t = tau(a)
    if t[change.k_old] - t[change.k_new] > tie * t[change.k_new]:  # (1)
        return False
    rows = slice(change.start - 1, change.end)
    cols = [change.k_new, change.k_old]
    T_run = np.asarray(T, dtype=np.float64)[rows][:, cols]
    s_run = np.asarray(sigma, dtype=np.float64)[rows][:, cols]
    draws = draw_step_times(T_run, s_run, replicates, np.random.default_rng(seed))
    ratio = (draws[:, :, 1] / draws[:, :, 0]).mean(axis=1)
    return bool(np.quantile(ratio, confidence) >= 1.0)  # (2)


def drop_futile(ks: Any, changes: list[Change], T: Any, sigma: Any, a: Any, tie: float = 0.005,
                confidence: float = 0.9) -> tuple[IntArray, list[Change]]:
    """confident_changes' (ks, changes) with every left-out change whose incumbent is futile
    made after all (``kept``; ks takes k_new over its run)."""
    out = np.asarray(ks, dtype=np.int64).copy()
    found = []
    for c in changes:
        if not c.kept and is_futile(c, T, sigma, a, tie, confidence):
            out[c.start - 1:c.end] = c.k_new
            c = dataclasses.replace(c, kept=True)
        found.append(c)
    return out, found
