"""Estimates that respect what they estimate: weighted isotonic projections (pure).

- a_i is P(first i drafts all accepted), so a_1 >= a_2 >= ... >= a_K (non-increasing in i);
- T(B, k) never shrinks when a step drafts and verifies more tokens (non-decreasing in k), and
  never shrinks with more requests in the step (non-decreasing in B).

Noise breaks these orders (a k=3 column measured faster than k=2; a prior of 1.0 at a position
the live traffic never drafts), and the goodput math then chases the noise. The projection is
the closest ordered sequence in weighted least squares (pool-adjacent-violators): values the
evidence supports keep their place, weakly supported ones give way, and a real jump (a CUDA
graph cliff in T) is an increase, which the projection never smooths away.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["nondecreasing", "nonincreasing", "monotone_step_times"]

FloatArray = npt.NDArray[np.float64]


def nondecreasing(y: Any, w: Any = None) -> FloatArray:
    """The weighted least-squares non-decreasing fit of ``y`` (pool adjacent violators).

    ``w`` are the weights (the evidence behind each value); zero-weight values take their
    neighbours' pooled value. O(n): each value is merged into a block at most once.
    """
    values = np.asarray(y, dtype=np.float64)
    weights = np.ones_like(values) if w is None else np.asarray(w, dtype=np.float64)
    if values.ndim != 1 or weights.shape != values.shape:
        raise ValueError(f"y and w must be 1-D of one length, got {values.shape} and {weights.shape}")
    weights = np.maximum(weights, 1e-12)  # an unweighted value still needs a block of its own
    means: list[float] = []
    sizes: list[float] = []
    counts: list[int] = []
    for v, wt in zip(values.tolist(), weights.tolist(), strict=True):
        means.append(v)
        sizes.append(wt)
        counts.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            m, s, c = means.pop(), sizes.pop(), counts.pop()
            total = sizes[-1] + s
            means[-1] = (means[-1] * sizes[-1] + m * s) / total
            sizes[-1] = total
            counts[-1] += c
    return np.repeat(np.asarray(means), counts)


def nonincreasing(y: Any, w: Any = None) -> FloatArray:
    """The weighted least-squares non-increasing fit of ``y`` (e.g. a_1 >= a_2 >= ...)."""
    values = np.asarray(y, dtype=np.float64)
    weights = None if w is None else np.asarray(w, dtype=np.float64)[::-1]
    return nondecreasing(values[::-1], weights)[::-1]


def monotone_step_times(T: Any, W: Any = None, rounds: int = 20) -> FloatArray:
    """T[g, k] made non-decreasing in both B (rows, the grid order) and k (columns).

    Alternating projections on the two orders (each a weighted isotonic fit), until a round
    changes nothing: the result lies in both orders. ``W`` weights each cell by its evidence,
    e.g. 1 / variance of its median.
    """
    out = np.asarray(T, dtype=np.float64).copy()
    weights = np.ones_like(out) if W is None else np.asarray(W, dtype=np.float64)
    for _ in range(rounds):
        before = out.copy()
        for k in range(out.shape[1]):
            out[:, k] = nondecreasing(out[:, k], weights[:, k])
        for g in range(out.shape[0]):
            out[g, :] = nondecreasing(out[g, :], weights[g, :])
        if np.allclose(out, before, rtol=1e-12, atol=0):
            break
    return out
