"""The chi-square distribution's CDF and quantile (pure, scalars): the sidecar must not need scipy.

P(chi2_df <= x) is the regularized lower incomplete gamma P(df/2, x/2), summed as its series
(Numerical Recipes 6.2), which converges for every x; the quantile inverts it by bisection.
"""

from __future__ import annotations

import math

__all__ = ["chi2_cdf", "chi2_ppf"]


def chi2_cdf(x: float, df: float) -> float:
    """P(chi2 with df degrees of freedom <= x), df > 0."""
    if x <= 0:
        return 0.0
    a, z = df / 2.0, x / 2.0
    term = total = 1.0 / a
    n = 0
    while abs(term) > abs(total) * 1e-15 and n < 10_000:
        n += 1
        term *= z / (a + n)
        total += term
    return min(1.0, total * math.exp(-z + a * math.log(z) - math.lgamma(a)))


def chi2_ppf(q: float, df: float) -> float:
    """The x with P(chi2_df <= x) = q, 0 < q < 1."""
    lo, hi = 0.0, max(1.0, df)
    while chi2_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if chi2_cdf(mid, df) < q else (lo, mid)
    return (lo + hi) / 2.0
