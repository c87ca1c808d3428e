"""Paired-block analysis of a bench (pure): every policy against the best fixed k, with
family-wise error control. The method and its reasons are in docs/measurement.md.

Unit of analysis: a *block* (benchmarks/cells.py), windows measured close in time at one load.
A ratio is only ever taken between two windows of the same block, so drift between blocks
cancels and the spread of the ratios is the noise that matters (docs/measurement.md, rule 1).

Against the best fixed k, which no run can name: policy P at load N is compared with *every*
fixed k, each by exp of the mean over blocks of log(window(P) / window(k)) with a t-interval
(benchmarks/inference.py). "Better" only if better than every fixed k (an intersection-union
test, each at the full level), "worse" if worse than any (Bonferroni over the fixed k's); the
interval's lower end is the least of the per-k lower ends, its upper end the least of the
per-k upper ends at the split level (inference.p_best, bounds_best; the field bench's rule).

The ratio shown is against the *reference*: R_b, the reference of block b, is the fixed k with
the highest mean log ratio to an anchor (the fixed k held by the most blocks) on the *other*
half of N's blocks (cross-fitting): a reference picked on the blocks it is judged on is the max
of noisy fixed k's and makes every policy look worse than it is. When both halves pick the
same k it is "the reference"; otherwise both are named (`fixed-k2 | fixed-k1`). That point is
kept inside the interval (rarely, a reference that is not the best puts it above the least
upper end). Before the intersection-union rule, verdicts were taken against this reference
alone, which under near-ties (fixed k's within 1%) and no band is sometimes a worse one:
`--threshold 0` then erred in up to 9.4% of null runs (benchmarks/results/calibration).

Policies that are not tables run in their own blocks, each with a window of one fixed k (the
pair reference); their log ratio to each fixed k is chained: mean log(P / pair_ref) over their
blocks plus log(pair_ref / k) over the table blocks, variances added (Welch's df).

A/A: `aa:X` is table X measured under a second name; its ratio to X is the run's noise floor.

Verdicts: every comparison with at least MIN_BLOCKS blocks (policies x loads, A/A, head-to-head)
is one family, tested against the band [1 - threshold, 1 + threshold] and corrected by Holm at
1 - confidence. "better"/"worse": the interval, at the level Holm tested it at, lies wholly
beyond the band; "within": wholly inside it; else "undecided". Fewer blocks, with the
reference or with any fixed k: "too_few_blocks".

Worst case over loads: per load, the loss 1 - ratio with an interval at 1 - α/L (Bonferroni over
the policy's L loads; its upper end the largest of the per-fixed-k upper ends); [max of the
lows, max of the highs] then covers the largest true loss with probability >= 1 - α, whatever
the loads' dependence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from benchmarks.cells import TABLES, Window, counted
from benchmarks.inference import (MIN_BLOCKS, LogRatio, bounds_best, chain, crossfit_refs,
                                  estimate, holm, log_ratios_to, p_best)

AA = "aa:"
FIXED = "fixed-k"
FEW = "too_few_blocks"
WITHIN = "within"
UNDECIDED = "undecided"
FAMILY_METHOD = "holm"


@dataclass(frozen=True, slots=True)
class Settings:
    threshold: float = 0.01    # smallest difference that counts (criterion.rs: 1%)
    confidence: float = 0.95   # 1 - the family-wise error rate of a run's verdicts


@dataclass(frozen=True, slots=True)
class Interval:
    median: float   # the point estimate (a geometric mean of block ratios; name kept for plots)
    low: float
    high: float

    @property
    def halfwidth(self) -> float:
        return (self.high - self.low) / 2


@dataclass(frozen=True, slots=True)
class Comparison:
    load: int
    policy: str
    versus: str          # what the ratio divides by: the reference, the A/A twin, another policy
    ratio: Interval
    n_blocks: int
    verdict: str         # better | worse | within | undecided | reference | too_few_blocks
    level: float = 0.95  # confidence level of `ratio`: the level Holm tested it at
    p_holm: float | None = None   # Holm-adjusted p (None: not in the family)


@dataclass(frozen=True, slots=True)
class WorstCase:
    policy: str
    loss: Interval       # 1 - ratio to the reference, at the load where it is largest
    at_load: int
    n_blocks: int        # blocks at that load
    loads: int           # loads it is the worst over (each at 1 - α/loads)


@dataclass(frozen=True, slots=True)
class Family:
    method: str
    level: float         # family-wise error rate controlled
    size: int            # comparisons in the family


@dataclass(frozen=True, slots=True)
class Analysis:
    loads: list[int]
    references: dict[int, str]
    medians: dict[tuple[str, int], float]              # window tokens/s, (policy, load)
    comparisons: dict[tuple[str, int], Comparison]     # every policy against the reference
    aa: dict[int, Comparison]
    versus: dict[tuple[str, str, int], Comparison]     # head-to-head pairs of table policies
    worst: dict[str, WorstCase]
    blocks: dict[int, int]                             # table blocks per load
    family: Family
    settings: Settings = field(default_factory=Settings)
    dropped: int = 0                                   # windows left out (cells.counted)
    aa_sd: float | None = None                         # sd of the A/A's block log ratios

    @property
    def aa_halfwidth(self) -> float | None:
        """The widest A/A interval over loads: the run's noise floor."""
        return max((c.ratio.halfwidth for c in self.aa.values()), default=None)

    def every(self) -> list[Comparison]:
        return [*self.comparisons.values(), *self.aa.values(), *self.versus.values()]


def is_fixed(policy: str) -> bool:
    return policy.startswith(FIXED)


def policy_key(policy: str) -> tuple[int, int, str]:
    """Display order: fixed k's by k, then the rest by name."""
    if is_fixed(policy) and policy.removeprefix(FIXED).isdigit():
        return (0, int(policy.removeprefix(FIXED)), "")
    return (1, 0, policy)


def twin(policy: str) -> str | None:
    """The policy an A/A name repeats (`aa:fixed-k3` -> `fixed-k3`), else None."""
    return policy.removeprefix(AA) if policy.startswith(AA) else None


@dataclass(slots=True)
class _Group:
    """A group's blocks at one load: log tokens/s, blocks x policies, NaN where absent."""

    policies: list[str]
    Y: np.ndarray

    def col(self, policy: str) -> np.ndarray:
        return self.Y[:, self.policies.index(policy)]

    def median(self, policy: str) -> float:
        x = self.col(policy)
        return float(np.exp(np.median(x[~np.isnan(x)])))


def _groups(windows: Sequence[Window]) -> dict[tuple[int, str], _Group]:
    out: dict[tuple[int, str], _Group] = {}
    for key in sorted({(w.load, w.group) for w in windows}):
        mine = [w for w in windows if (w.load, w.group) == key]
        blocks = sorted({w.block for w in mine})
        policies = list(dict.fromkeys(w.policy for w in mine))
        Y = np.full((len(blocks), len(policies)), np.nan)
        for w in mine:
            Y[blocks.index(w.block), policies.index(w.policy)] = np.log(w.tokens_per_s)
        out[key] = _Group(policies, Y)
    return out


Key = tuple[str, str, int]   # (kind: ref | aa | vs, name, load); vs names are "a\tb"


class Claim(NamedTuple):
    """One comparison: the point shown (``point``: against the cross-fitted reference for a
    ``ref`` key, else the pair itself) and what it is tested on (``each``: a last axis over
    the fixed k's for a ``ref`` key, of one for an A/A or a head-to-head pair)."""

    point: LogRatio
    each: LogRatio


def _single(e: LogRatio) -> LogRatio:
    return LogRatio(*(np.asarray(x)[..., None] for x in e))


def load_family(Y: np.ndarray, policies: list[str], n: int,
                head_to_head: Sequence[tuple[str, str]] = ()
                ) -> tuple[dict[Key, Claim], dict[Key, np.ndarray]]:
    """One load's table-block comparisons, vectorized over any leading axes of
    Y [..., blocks, policies] (log tokens/s): every policy against every fixed k (shown against
    the cross-fitted reference), each A/A against its twin, each head-to-head pair. Returns the
    claims and, per policy, whether it *is* the reference in every block (then it has no
    verdict). Shared with the calibration (benchmarks/calibration.py), which runs it on
    thousands of simulated runs."""
    fixed, anchor = _anchored(Y, policies)
    refs = crossfit_refs(Y, fixed, anchor)
    point = estimate(np.swapaxes(log_ratios_to(Y, refs), -1, -2))
    # [..., policies, fixed, blocks]: every policy against every fixed k in the same blocks
    each = estimate(np.moveaxis(Y[..., :, None] - Y[..., None, fixed], -3, -1))
    out: dict[Key, Claim] = {}
    is_ref: dict[Key, np.ndarray] = {}
    for i, p in enumerate(policies):
        base = twin(p)
        if base is None:
            out[("ref", p, n)] = Claim(LogRatio(*(x[..., i] for x in point)),
                                       LogRatio(*(x[..., i, :] for x in each)))
            is_ref[("ref", p, n)] = np.all(refs == i, axis=-1)
        elif base in policies:
            d = estimate(Y[..., policies.index(p)] - Y[..., policies.index(base)])
            out[("aa", p, n)] = Claim(d, _single(d))
    for a, b in head_to_head:
        if a in policies and b in policies:
            d = estimate(Y[..., policies.index(a)] - Y[..., policies.index(b)])
            out[("vs", f"{a}\t{b}", n)] = Claim(d, _single(d))
    return out, is_ref


def chained(pair: np.ndarray, to_ref: Claim) -> Claim:
    """A non-table policy through its pair reference: pair [..., blocks, 2] log tokens/s of
    (policy, pair reference) in its own blocks, chained with the pair reference's claims
    against the reference and every fixed k from the table blocks."""
    own = estimate(pair[..., 0] - pair[..., 1])
    return Claim(chain(own, to_ref.point), chain(_single(own), to_ref.each))


def decide(each: LogRatio, is_ref: np.ndarray, threshold: float,
           alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Holm over the family (the second-to-last axis of ``each``; its last: the fixed k's, or
    one, NaN where absent): (codes, adjusted p, level). Codes: +1 better, -1 worse, 0 no
    claim; NaN adjusted p where a comparison is not in the family (fewer than MIN_BLOCKS
    blocks, or the reference itself)."""
    p, sign = p_best(each, threshold)
    with np.errstate(invalid="ignore"):
        n = np.min(np.where(np.isnan(each.mean), np.inf, each.n), axis=-1)
    in_family = (n >= MIN_BLOCKS) & np.isfinite(n) & ~is_ref
    adj, level = holm(np.where(in_family, p, np.nan), alpha)
    return np.where(adj <= alpha, sign, 0.0), adj, level


def stack(claims: Sequence[Claim]) -> tuple[LogRatio, LogRatio]:
    """(points [..., m], each [..., m, F]) of m claims, F the most references any has (the
    rest NaN): the shape decide and ratio_bounds take."""
    width = max(np.asarray(c.each.mean).shape[-1] for c in claims)

    def padded(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        pad = [(0, 0)] * (x.ndim - 1) + [(0, width - x.shape[-1])]
        return np.pad(x, pad, constant_values=np.nan)

    points = LogRatio(*(np.stack([np.asarray(c.point[j], dtype=np.float64) for c in claims], axis=-1)
                        for j in range(4)))
    each = LogRatio(*(np.stack([padded(c.each[j]) for c in claims], axis=-2) for j in range(4)))
    return points, each


def ratio_bounds(points: LogRatio, each: LogRatio,
                 alpha: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ratio, low, high): the shown ratio (kept inside its interval) and the interval at the
    level p_best tests at (inference.bounds_best)."""
    low, high = bounds_best(each, alpha)
    mid = np.clip(points.mean, low, high)
    return np.exp(mid), np.exp(low), np.exp(high)


def analyze(windows: Sequence[Window], s: Settings = Settings(),
            head_to_head: Sequence[tuple[str, str]] = ()) -> Analysis:
    """The whole analysis of a bench's windows; see the module docstring."""
    groups = _groups([w for w in windows if counted(w)])
    loads = [n for n in sorted({n for n, grp in groups if grp == TABLES})
             if any(is_fixed(p) for p in groups[(n, TABLES)].policies)]
    medians = {(p, n): g.median(p) for (n, grp), g in groups.items() for p in g.policies
               if grp in (TABLES, p)}
    raw: dict[Key, Claim] = {}
    is_ref: dict[Key, np.ndarray] = {}
    versus: dict[Key, str] = {}
    refs: dict[int, str] = {}
    for n in loads:
        g = groups[(n, TABLES)]
        est, mine = load_family(g.Y, g.policies, n, head_to_head)
        raw |= est
        is_ref |= mine
        refs[n] = _ref_name(g)
        versus |= {k: (refs[n] if k[0] == "ref" else k[1].split("\t")[1] if k[0] == "vs"
                       else twin(k[1]) or "") for k in est}
        for (m, grp), pg in groups.items():
            pair_ref = next((p for p in pg.policies if p != grp), None)
            if (m == n and grp != TABLES and grp in pg.policies and pair_ref is not None
                    and ("ref", pair_ref, n) in raw):
                Yp = np.stack([pg.col(grp), pg.col(pair_ref)], axis=-1)
                raw[("ref", grp, n)] = chained(Yp, raw[("ref", pair_ref, n)])
                is_ref[("ref", grp, n)] = np.asarray(False)
                versus[("ref", grp, n)] = f"{pair_ref}→{refs[n]}"
    return _decide(raw, is_ref, versus, refs, loads, groups, medians, s, windows)


def _anchored(Y: np.ndarray, policies: list[str]) -> tuple[list[int], int]:
    """The fixed k columns and the anchor among them: the one held by the most blocks (the
    A/A twin, in a bench that has one), which every other fixed k is scored against."""
    fixed = [i for i, p in enumerate(policies) if is_fixed(p)]
    held = {i: int(np.sum(~np.isnan(Y[..., i]))) for i in fixed}
    return fixed, max(fixed, key=lambda i: (held[i], policy_key(policies[i])))


def _ref_name(g: _Group) -> str:
    picks = dict.fromkeys(crossfit_refs(g.Y, *_anchored(g.Y, g.policies)).tolist())
    return " | ".join(sorted((g.policies[int(i)] for i in picks), key=policy_key))


def _aa_sd(groups: dict[tuple[int, str], _Group]) -> float | None:
    """The widest per-block sd of an A/A's log ratios over loads: the noise a design plans on."""
    sds = []
    for (n, grp), g in groups.items():
        for p in g.policies:
            base = twin(p)
            if grp == TABLES and base is not None and base in g.policies:
                d = g.col(p) - g.col(base)
                d = d[~np.isnan(d)]
                if d.size > 1:
                    sds.append(float(np.std(d, ddof=1)))
    return max(sds, default=None)


def _decide(raw: dict[Key, Claim], is_ref: dict[Key, np.ndarray], versus: dict[Key, str],
            refs: dict[int, str], loads: list[int], groups: dict[tuple[int, str], _Group],
            medians: dict[tuple[str, int], float], s: Settings, windows: Sequence[Window]) -> Analysis:
    """Holm over the family, then each comparison with its interval and verdict."""
    alpha = 1 - s.confidence
    keys = list(raw)
    points, each = stack([raw[k] for k in keys])
    ref = np.array([bool(is_ref.get(k, False)) for k in keys])
    codes, adj, level = decide(each, ref, s.threshold, alpha)
    mid, low, high = ratio_bounds(points, each, level)
    out: dict[Key, Comparison] = {}
    for i, (kind, name, n) in enumerate(keys):
        iv = Interval(float(mid[i]), float(low[i]), float(high[i]))
        v = ("reference" if ref[i] else FEW if np.isnan(adj[i])
             else "better" if codes[i] > 0 else "worse" if codes[i] < 0
             else WITHIN if 1 - s.threshold <= iv.low and iv.high <= 1 + s.threshold else UNDECIDED)
        out[(kind, name, n)] = Comparison(
            n, name.split("\t")[0], versus[(kind, name, n)], iv, int(points.n[i]), v,
            round(1 - float(level[i]), 6), None if np.isnan(adj[i]) else float(adj[i]))
    comparisons = {(c.policy, n): c for (k, _, n), c in out.items() if k == "ref"}
    worst = {p: w for p in dict.fromkeys(p for p, _ in comparisons)
             if (w := _worst(p, [c for (q, _), c in comparisons.items() if q == p],
                             {k[2]: raw[k] for k in keys if k[0] == "ref" and k[1] == p},
                             alpha)) is not None}
    return Analysis(
        loads, refs, medians, comparisons,
        {n: c for (k, _, n), c in out.items() if k == "aa"},
        {(name.split("\t")[0], name.split("\t")[1], n): c for (k, name, n), c in out.items()
         if k == "vs"},
        worst, {n: groups[(n, TABLES)].Y.shape[0] for n in loads},
        Family(FAMILY_METHOD, round(alpha, 6), int(np.sum(~np.isnan(adj)))), s,
        sum(not counted(w) for w in windows), _aa_sd(groups))


def _worst(policy: str, cs: list[Comparison], claims: dict[int, Claim],
           alpha: float) -> WorstCase | None:
    """The largest loss over the loads with enough blocks, each load's interval at 1 - α/L
    against every fixed k (its upper end the largest of the per-k upper ends)."""
    ok = [c for c in cs if c.n_blocks >= MIN_BLOCKS or c.verdict == "reference"]
    if not ok:
        return None
    mid, low, high = ratio_bounds(*stack([claims[c.load] for c in ok]), alpha / len(ok))
    at = int(np.argmax(1 - mid))
    loss = Interval(float(np.max(1 - mid)), float(np.max(1 - high)), float(np.max(1 - low)))
    return WorstCase(policy, loss, ok[at].load, ok[at].n_blocks, len(ok))
