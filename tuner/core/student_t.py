"""Student's t distribution in numpy (pure): numpy has none, and the sidecar must not need scipy.

From the regularized incomplete beta: P(T > t) = I_x(df/2, 1/2) / 2 with x = df/(df + t²), for
t > 0 (Numerical Recipes 6.4). The quantile inverts it by Newton's method. The same functions
as benchmarks/inference.py's, here so that the sidecar (sidecar/guardrail.py) can use them
without importing the benchmarks.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

__all__ = ["betainc", "t_pdf", "t_ppf", "t_sf"]

Array = npt.NDArray[np.float64]
_NORMAL = NormalDist()


def _lgamma(x: Array) -> Array:
    return np.asarray(np.frompyfunc(math.lgamma, 1, 1)(x), dtype=np.float64)


def _betacf(a: Array, b: Array, x: Array, iters: int = 64) -> Array:
    """Continued fraction of I_x(a, b) by the modified Lentz method (Numerical Recipes 6.4)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c = np.ones_like(x)
    d = 1 - qab * x / qap
    d = 1 / np.where(np.abs(d) < tiny, tiny, d)
    h = d.copy()
    for m in range(1, iters + 1):
        for aa in (m * (b - m) * x / ((qam + 2 * m) * (a + 2 * m)),
                   -(a + m) * (qab + m) * x / ((a + 2 * m) * (qap + 2 * m))):
            d = 1 + aa * d
            d = 1 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1 + aa / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            h = h * d * c
    return h


def betainc(a: Array, b: Array, x: Array) -> Array:
    """Regularized incomplete beta I_x(a, b), elementwise."""
    a, b, x = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a, b, x)))
    with np.errstate(all="ignore"):
        xc = np.clip(x, 1e-300, 1 - 1e-16)
        front = np.exp(_lgamma(a + b) - _lgamma(a) - _lgamma(b)
                       + a * np.log(xc) + b * np.log1p(-xc))
        direct = x < (a + 1) / (a + b + 2)
        out = np.where(direct, front * _betacf(a, b, xc) / a,
                       1 - front * _betacf(b, a, 1 - xc) / b)
    return np.where(x <= 0, 0.0, np.where(x >= 1, 1.0, out))


def t_sf(t: Array | float, df: Array | float) -> Array:
    """P(T > t) for Student's t with df degrees of freedom (df > 0)."""
    t, df = np.broadcast_arrays(np.asarray(t, dtype=np.float64), np.asarray(df, dtype=np.float64))
    with np.errstate(all="ignore"):
        tail = 0.5 * betainc(df / 2, np.full_like(df, 0.5), df / (df + t * t))
    out = np.where(t > 0, tail, 1 - tail)
    return np.where(np.isposinf(t), 0.0, np.where(np.isneginf(t), 1.0, out))


def t_pdf(t: Array, df: Array) -> Array:
    """Density of Student's t."""
    out: Array = np.exp(_lgamma((df + 1) / 2) - _lgamma(df / 2) - 0.5 * np.log(df * np.pi)
                        - (df + 1) / 2 * np.log1p(t * t / df))
    return out


def t_ppf(q: Array | float, df: Array | float) -> Array:
    """The q quantile of Student's t (q in (0.5, 1)): Newton's method in log t, started from
    the normal quantile with the first Cornish-Fisher terms."""
    q, df = np.broadcast_arrays(np.asarray(q, dtype=np.float64), np.asarray(df, dtype=np.float64))
    z = np.asarray(np.frompyfunc(lambda p: _NORMAL.inv_cdf(p), 1, 1)(q), dtype=np.float64)
    t = np.maximum(z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2),
                   1e-6)
    u = np.log(t)
    with np.errstate(all="ignore"):
        for _ in range(30):
            t = np.exp(u)
            step = (t_sf(t, df) - (1 - q)) / (t_pdf(t, df) * t)
            u = u + np.clip(step, -1.0, 1.0)
            if np.all(np.abs(step) < 1e-12):
                break
    out: Array = np.exp(u)
    return out
