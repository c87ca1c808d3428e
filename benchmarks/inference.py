"""Inference for paired blocks (pure: numpy, and pydantic for MeanInterval): t-intervals on log
ratios, Holm, cross-fitting.

Legend: y = log tokens/s of one window; in block b, d_b = y_b(P) - y_b(R) is the log ratio of
policy P to the reference R. Over n blocks: mean d̄, standard error se = s/√n, df = n - 1.
The ratio shown is exp(d̄), a geometric mean of the per-block ratios.

Why a t-interval on log ratios and not a bootstrap of a median: at the block counts a bench can
afford (6-30), the percentile bootstrap of a median covered 92-94% where it claimed 95%, and
below 6 blocks it is [min, max]. The t-interval is exact for normal log ratios at every n and
was checked on simulated blocks (benchmarks/calibration.py; its figures in
benchmarks/results/calibration/calibration.json). Windows are log-normal-ish (a rate), so the
log is where the noise is symmetric.

Verdicts test against the practical threshold, not against zero (criterion.rs's rule): "better"
needs H0: ratio <= 1 + threshold rejected, "worse" needs H0: ratio >= 1 - threshold rejected.
The p of a comparison is twice the smaller of the two one-sided p's, so a level-α test of it
rejects exactly when the (1 - α) interval lies wholly beyond the band.

Every accepted verdict of a run is one family, corrected together by Holm's step-down method
(family-wise error <= α for any dependence between the comparisons). The interval shown for a
comparison is at the level Holm tested it at, so "the interval clears the band" and "the
verdict is better or worse" always agree.

Against the best fixed k, which no run can name (p_best, bounds_best): "better" only if better
than every fixed k (an intersection-union test), "worse" if worse than any (Bonferroni), the
interval's lower end the least of the per-k lower ends and its upper end the least of the
per-k upper ends at the split level; a loss's upper end is then the largest of the per-k ones.
The bench (benchmarks/stats.py) and the field bench (benchmarks/field_summary.py) both use them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from tuner.core.student_t import t_ppf, t_sf  # numpy has no t distribution

Array = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
MIN_BLOCKS = 4   # fewest blocks for a verdict: two per cross-fitting half (see crossfit_refs)


# -- estimates ---------------------------------------------------------------------------------
class LogRatio(NamedTuple):
    """Mean log ratio over blocks, its standard error, degrees of freedom and block count."""

    mean: Array
    se: Array
    df: Array
    n: Array


def estimate(d: Array) -> LogRatio:
    """Over the last axis (blocks; NaN where a block lacks the pair)."""
    d = np.asarray(d, dtype=np.float64)
    held = ~np.isnan(d)
    n = held.sum(axis=-1).astype(np.float64)
    with np.errstate(all="ignore"):
        mean = np.where(held, d, 0.0).sum(axis=-1) / n
        dev = np.where(held, d - mean[..., None], 0.0)
        sd = np.sqrt((dev * dev).sum(axis=-1) / (n - 1))
    return LogRatio(mean, sd / np.sqrt(n), n - 1, n)


def chain(x: LogRatio, y: LogRatio) -> LogRatio:
    """log(P/Q) + log(Q/R) from independent blocks: variances add, Welch-Satterthwaite df."""
    v1, v2 = x.se ** 2, y.se ** 2
    with np.errstate(all="ignore"):
        df = (v1 + v2) ** 2 / (v1 ** 2 / x.df + v2 ** 2 / y.df)
    df = np.where(np.isfinite(df), df, np.minimum(x.df, y.df))
    return LogRatio(x.mean + y.mean, np.sqrt(v1 + v2), df, np.minimum(x.n, y.n))


def _one_sided(e: LogRatio, threshold: float) -> tuple[Array, Array]:
    """(p_better, p_worse): one-sided t p's of H0 ratio <= 1 + thr and of H0 ratio >= 1 - thr.
    A zero spread (the reference against itself) gives 1 for a claim its mean does not make."""
    up, down = math.log1p(threshold), math.log1p(-threshold)
    with np.errstate(all="ignore"):
        p_up = t_sf((e.mean - up) / e.se, e.df)
        p_down = t_sf((down - e.mean) / e.se, e.df)
    p_up = np.where(np.isnan(p_up), np.where(e.mean > up, 0.0, 1.0), p_up)
    p_down = np.where(np.isnan(p_down), np.where(e.mean < down, 0.0, 1.0), p_down)
    return p_up, p_down


def p_beyond(e: LogRatio, threshold: float) -> tuple[Array, Array]:
    """(p, sign): p = 2·min(p_better, p_worse) against the band [1 - thr, 1 + thr], capped at 1;
    sign +1 where "better" is the nearer claim, -1 for "worse"."""
    p_up, p_down = _one_sided(e, threshold)
    p = np.minimum(1.0, 2 * np.minimum(p_up, p_down))
    return p, np.where(p_up <= p_down, 1.0, -1.0)


# -- against the best of several references ----------------------------------------------------
def p_best(e: LogRatio, threshold: float) -> tuple[Array, Array]:
    """(p, sign) of a policy against the best of the references along e's last axis (NaN mean
    where a reference is absent), which the data cannot name. "Better" needs every reference
    beaten beyond the band: an intersection-union test, its p the largest of the one-sided
    p's, each at the full level. "Worse" needs any one: Bonferroni, the smallest p times the
    number of references. Then as p_beyond: p = 2·min of the two, capped at 1; sign +1 where
    "better" is the nearer claim. One reference: p_beyond's p."""
    p_up, p_down = _one_sided(e, threshold)
    held = ~np.isnan(e.mean)
    better = np.max(np.where(held, p_up, -np.inf), axis=-1)
    worse = np.min(np.where(held, p_down, np.inf), axis=-1) * held.sum(axis=-1)
    p = np.minimum(1.0, 2 * np.minimum(better, worse))
    return p, np.where(better <= worse, 1.0, -1.0)


def holm(p: Array, alpha: float) -> tuple[Array, Array]:
    """Holm's step-down over the last axis: (adjusted p, the level each comparison was tested
    at). The j-th smallest p (0-based, of m) is tested at α/(m - j) while every smaller one was
    rejected; from the first that is not, every later one keeps that level. NaN: not in the
    family (too few blocks); it gets level α and adjusted p NaN."""
    p = np.asarray(p, dtype=np.float64)
    inside = ~np.isnan(p)
    m = inside.sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(inside, p, np.inf), axis=-1, kind="stable")
    ps = np.take_along_axis(np.where(inside, p, np.inf), order, axis=-1)
    j = np.arange(p.shape[-1])
    with np.errstate(all="ignore"):
        adj_sorted = np.maximum.accumulate(np.minimum(1.0, (m - j) * ps), axis=-1)
        level_sorted = alpha / np.maximum(m - j, 1)
    stop = np.cumsum(~(ps <= level_sorted), axis=-1) > 0          # at or after the first keep
    first = np.argmax(stop, axis=-1)[..., None]
    held = np.take_along_axis(level_sorted, np.minimum(first, p.shape[-1] - 1), axis=-1)
    level_sorted = np.where(stop, held, level_sorted)
    adj, level = np.empty_like(p), np.empty_like(p)
    np.put_along_axis(adj, order, adj_sorted, axis=-1)
    np.put_along_axis(level, order, level_sorted, axis=-1)
    return np.where(inside, adj, np.nan), np.where(inside, level, alpha)


def bounds(e: LogRatio, alpha: Array | float) -> tuple[Array, Array, Array]:
    """(mean, low, high): the mean and its two-sided (1 - alpha) t-interval, in e's unit."""
    with np.errstate(all="ignore"):
        half = t_ppf(1 - np.asarray(alpha) / 2, np.maximum(e.df, 1)) * e.se
    half = np.where(e.se == 0, 0.0, half)
    return e.mean, e.mean - half, e.mean + half


def interval(e: LogRatio, alpha: Array | float) -> tuple[Array, Array, Array]:
    """(ratio, low, high): exp of the mean log ratio and of its (1 - alpha) t-interval."""
    mid, low, high = bounds(e, alpha)
    return np.exp(mid), np.exp(low), np.exp(high)


def bounds_best(e: LogRatio, alpha: Array | float) -> tuple[Array, Array]:
    """(low, high) in e's unit of the ratio to the best of the references along e's last axis,
    at the level p_best tests at: the least of the lower ends at alpha each (the true best's
    own end is among them) and the least of the upper ends at alpha over their number (every
    one must hold at once). So the interval clears the band exactly when p_best's p <= alpha."""
    a = np.asarray(alpha, dtype=np.float64)[..., None]
    held = ~np.isnan(e.mean)
    _, low, _ = bounds(e, a)
    _, _, high = bounds(e, a / np.maximum(held.sum(axis=-1, keepdims=True), 1))
    return (np.min(np.where(held, low, np.inf), axis=-1),
            np.min(np.where(held, high, np.inf), axis=-1))


# -- the honest reference ----------------------------------------------------------------------
def crossfit_refs(Y: Array, fixed: list[int], anchor: int) -> IntArray:
    """Per block, the column of the reference it is compared with: the fixed k with the highest
    mean log ratio to ``anchor``, chosen on the *other* half of the blocks (even/odd in the order
    they ran). Chosen on the same blocks, the max of noisy fixed k's leans high and every policy
    looks worse than it is (2-5% at 6-20 blocks, CV 5-15%); chosen on the other half, the
    choice is independent of the blocks it is judged on.

    Y: [..., blocks, policies] log tokens/s, NaN where absent. Returns [..., blocks] ints."""
    nb = Y.shape[-2]
    D = Y[..., fixed] - Y[..., [anchor]]                       # [..., blocks, F]
    fold = np.arange(nb) % 2
    refs = np.empty(Y.shape[:-2] + (nb,), dtype=np.int64)
    for f in (0, 1):
        other = D[..., fold != f, :] if nb >= MIN_BLOCKS else D
        held = ~np.isnan(other)
        with np.errstate(all="ignore"):
            score = np.where(held, other, 0.0).sum(axis=-2) / held.sum(axis=-2)
        best = np.asarray(fixed)[np.argmax(np.where(np.isnan(score), -np.inf, score), axis=-1)]
        refs[..., fold == f] = best[..., None]
    return refs


def log_ratios_to(Y: Array, refs: IntArray) -> Array:
    """d[..., b, p] = Y[..., b, p] - Y[..., b, refs[..., b]]: each window against its block's
    reference."""
    ref = np.take_along_axis(Y, refs[..., None], axis=-1)
    out: Array = Y - ref
    return out


# -- a rank-based check beside the t ----------------------------------------------------------
def signed_rank_null(n: int) -> Array:
    """P(W+ = w), w = 0..n(n+1)/2: Wilcoxon's signed-rank statistic of n untied differences
    symmetric about 0 (exact, by adding one rank at a time)."""
    p = np.ones(1)
    for r in range(1, n + 1):
        p = (np.concatenate([p, np.zeros(r)]) + np.concatenate([np.zeros(r), p])) / 2.0
    return p


def hodges_lehmann(d: npt.ArrayLike, alpha: float) -> tuple[float, float | None, float | None]:
    """The Hodges-Lehmann estimate of the centre of ``d`` (the median of its Walsh averages)
    and its (1 - alpha) interval from the signed-rank distribution (Walsh averages ranked,
    coverage at least 1 - alpha); None bounds when too few values reach that level (n < 6 at
    alpha 0.05). Valid for any symmetric noise, so a few wild blocks cannot widen it as they
    widen the t-interval; a check beside it, not a replacement (it assumes symmetry)."""
    x = np.asarray(d, dtype=np.float64)
    x = x[~np.isnan(x)]
    n = len(x)
    i, j = np.triu_indices(n)
    walsh = np.sort((x[i] + x[j]) / 2.0)
    if n == 0:
        return math.nan, None, None
    mid = float(np.median(walsh))
    cdf = np.cumsum(signed_rank_null(n))
    k = int(np.searchsorted(cdf, alpha / 2.0, side="right"))  # P(W+ <= k - 1) <= alpha / 2
    if k < 1:
        return mid, None, None
    return mid, float(walsh[k - 1]), float(walsh[len(walsh) - k])


class MeanInterval(BaseModel):
    """An estimate with its t-interval over per-block (or per-cycle) values."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    estimate: float
    ci_low: float
    ci_high: float
    n: int
    statistic: Literal["geometric mean", "mean"]
    verdict_ready: bool       # at least MIN_BLOCKS values: a claim may rest on it


def log_ratio_interval(logs: Sequence[float],
                       alpha: float = 0.05) -> tuple[float | None, list[float | None]]:
    """The geometric mean of exp(logs) and its (1 - alpha) t-interval, to 4 places; with one
    value its ratio and no interval (no spread to build one on), with none neither."""
    if len(logs) < 2:
        return (round(math.exp(logs[0]), 4) if logs else None), [None, None]
    mid, low, high = (float(np.exp(v)) for v in bounds(estimate(np.asarray(logs)), alpha))
    return round(mid, 4), [round(low, 4), round(high, 4)]


def mean_interval(values: list[float], ratio: bool = True,
                  alpha: float = 0.05) -> MeanInterval | None:
    """Estimate and (1 - alpha) t-interval of per-block or per-cycle values: for ratios, the
    geometric mean (the t-interval on their logs, as the bench); otherwise the mean. Not a
    bootstrap percentile: over 5 cycles that is exactly [min, max], which covers far less than
    95%. Below MIN_BLOCKS values the interval is shown, no claim rests on it."""
    if not values or (ratio and min(values) <= 0):
        return None
    x = np.log(np.asarray(values)) if ratio else np.asarray(values, dtype=np.float64)
    mid, low, high = (float(np.exp(v) if ratio else v) for v in bounds(estimate(x), alpha))
    return MeanInterval(estimate=round(mid, 4), ci_low=round(low, 4), ci_high=round(high, 4),
                        n=len(values), statistic="geometric mean" if ratio else "mean",
                        verdict_ready=len(values) >= MIN_BLOCKS)


def fieller(x: Sequence[float], y: Sequence[float], alpha: float = 0.05) -> tuple[float, float] | None:
    """Fieller's (1 - alpha) interval for mean(x) / mean(y) from n paired values: the θ with
    (x̄ - θȳ)² <= t² var(x - θy) / n, exact for bivariate-normal pairs at every n (a
    percentile bootstrap of a ratio undercovers at 6-30 blocks, as of a median above). None
    where it is unbounded: ȳ itself not clear of 0 at this level, or fewer than 3 pairs."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(xs)
    if n < 3:
        return None
    q = float(t_ppf(np.asarray(1 - alpha / 2), np.asarray(n - 1.0))) ** 2 / n
    cov = np.cov(xs, ys, ddof=1)
    a = ys.mean() ** 2 - q * cov[1, 1]
    b = xs.mean() * ys.mean() - q * cov[0, 1]
    c = xs.mean() ** 2 - q * cov[0, 0]
    disc = b * b - a * c
    if a <= 0 or disc < 0:
        return None
    root = math.sqrt(disc)
    return (b - root) / a, (b + root) / a
