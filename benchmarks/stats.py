"""Paired-block statistics of a bench (pure): ratios to a reference, bootstrap intervals, verdicts.

Unit of analysis: a *block* (benchmarks/cells.py), windows measured close in time at one load.
A ratio is only ever taken between two windows of the same block, so drift between blocks
cancels and the spread of the ratios is the noise that matters (/shared/MEASUREMENT.md, rule 1).

Reference at a load N: the fixed k with the highest median paired ratio to an anchor (the fixed
k held by the most table blocks at N: the A/A twin, which every block holds), chosen once from
all the data; every policy is then paired with *that* k's window in the same block. Not each block's best fixed k: the max of several noisy windows is biased
upward by the noise, so every policy would look worse than it is (and the best fixed k would
lose to itself). A fixed k can therefore score above 1 in a block, or even overall.

Ratio of policy P at N: the median over blocks of window(P) / window(reference). Its interval
is a percentile bootstrap: resample N's blocks with replacement n_boot times, recompute the
median, take the (1-c)/2 and (1+c)/2 quantiles. Loads are resampled independently within each
replicate (a stratified bootstrap), and a worst case over loads is computed inside every
replicate, so its interval is joint over loads (not the max of per-load bounds).

Policies that are not tables run in their own blocks, each with a window of one fixed k (the
pair reference, e.g. fixed-kK); their ratio to the reference is chained:
median(P / pair_ref, their blocks) x median(pair_ref / reference, table blocks), each factor
resampled from its own blocks in the same replicate.

A/A: `aa:X` is table X measured under a second name; its ratio to X is the run's noise floor.

Few blocks: for n <= 5 a percentile bootstrap of a median returns [min, max] of the n ratios,
which covers the true median with probability 1 - 2·0.5^n only: 75% at n = 3 (on the H200 an
A/A over 3 blocks came out at 0.953 [0.951, 0.961], "excluding 1"), 97% from n = 6. So below
``blocks_for(confidence)`` blocks (6 at 95%) the verdict is "too_few_blocks" and nothing is
resolved: the interval is shown, the comparison stays open.

Verdict (criterion.rs's rule): "better" when the whole interval lies above 1 + threshold,
"worse" when it lies below 1 - threshold, else "indistinguishable" at this noise. A comparison
is *resolved* when its verdict is better or worse, or when its interval is narrower than
±ci_target (then "indistinguishable" is a finding: any difference is that small).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from benchmarks.cells import TABLES, Window, counted

AA = "aa:"
FIXED = "fixed-k"
FEW = "too_few_blocks"   # the verdict below blocks_for(confidence) blocks


@dataclass(frozen=True, slots=True)
class Settings:
    threshold: float = 0.01    # smallest difference that counts (criterion.rs: 1%)
    ci_target: float = 0.02    # an interval this narrow (half-width) resolves a comparison
    confidence: float = 0.95
    n_boot: int = 2000
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Interval:
    median: float
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
    verdict: str         # better | worse | indistinguishable | reference
    resolved: bool


@dataclass(frozen=True, slots=True)
class WorstCase:
    policy: str
    loss: Interval       # 1 - ratio to the reference, at the load where it is largest
    at_load: int


@dataclass(frozen=True, slots=True)
class Analysis:
    loads: list[int]
    references: dict[int, str]
    medians: dict[tuple[str, int], float]              # window tokens/s, (policy, load)
    comparisons: dict[tuple[str, int], Comparison]     # every policy against the reference
    aa: dict[int, Comparison]
    versus: dict[tuple[str, str, int], Comparison]     # head-to-head pairs of table policies
    worst: dict[str, WorstCase]
    best_fixed: str | None
    blocks: dict[int, int]                             # table blocks per load
    # worst-case loss minus the best single fixed k's, joint in every replicate: does a policy
    # hold up better at its worst load than the one fixed k an operator would have picked?
    worst_vs_best: dict[str, Comparison] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)
    dropped: int = 0     # windows whose engine count could not be right (cells.counted)

    @property
    def aa_halfwidth(self) -> float | None:
        """The widest A/A interval over loads: the run's noise floor."""
        return max((c.ratio.halfwidth for c in self.aa.values()), default=None)

    def unresolved(self) -> list[Comparison]:
        every = [*self.comparisons.values(), *self.aa.values(), *self.versus.values()]
        return [c for c in every if not c.resolved]


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


def blocks_for(confidence: float) -> int:
    """Fewest blocks whose [min, max] covers a median at ``confidence``: 1 - 2·0.5^n >= c."""
    return int(np.ceil(np.log2(2 / (1 - confidence))))


def verdict(ratio: Interval, threshold: float) -> str:
    if ratio.low > 1 + threshold:
        return "better"
    if ratio.high < 1 - threshold:
        return "worse"
    return "indistinguishable"


def _nanmedian(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    with warnings.catch_warnings():  # a replicate may draw no block holding the pair: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(np.nanmedian(x, axis=axis))


@dataclass(frozen=True, slots=True)
class _Sample:
    """One pair's ratios over a group's blocks: the point estimate and its bootstrap replicates."""

    point: float
    reps: np.ndarray     # (n_boot,)
    n_blocks: int

    def times(self, other: _Sample) -> _Sample:
        return _Sample(self.point * other.point, self.reps * other.reps,
                       min(self.n_blocks, other.n_blocks))


@dataclass(slots=True)
class _Group:
    """A group's blocks at one load as a matrix (blocks x policies, NaN where absent)."""

    policies: list[str]
    tps: np.ndarray
    idx: np.ndarray      # (n_boot, n_blocks) resampled block indices, shared by every pair

    def has(self, policy: str) -> bool:
        return policy in self.policies

    def median(self, policy: str) -> float:
        return float(_nanmedian(self.tps[:, self.policies.index(policy)]))

    def paired_median(self, num: str, den: str) -> float:
        return float(_nanmedian(self.tps[:, self.policies.index(num)]
                                / self.tps[:, self.policies.index(den)]))

    def ratio(self, num: str, den: str) -> _Sample:
        x = self.tps[:, self.policies.index(num)] / self.tps[:, self.policies.index(den)]
        return _Sample(float(_nanmedian(x)), _nanmedian(x[self.idx], axis=1),
                       int(np.sum(~np.isnan(x))))

    def one(self, n_boot: int) -> _Sample:
        return _Sample(1.0, np.ones(n_boot), self.tps.shape[0])


def _groups(windows: Sequence[Window], s: Settings) -> dict[tuple[int, str], _Group]:
    rng = np.random.default_rng(s.seed)
    keys = sorted({(w.load, w.group) for w in windows})
    out: dict[tuple[int, str], _Group] = {}
    for key in keys:
        mine = [w for w in windows if (w.load, w.group) == key and counted(w)]
        blocks = sorted({w.block for w in mine})
        policies = list(dict.fromkeys(w.policy for w in mine))
        tps = np.full((len(blocks), len(policies)), np.nan)
        for w in mine:
            tps[blocks.index(w.block), policies.index(w.policy)] = w.tokens_per_s
        idx = rng.integers(0, max(len(blocks), 1), size=(s.n_boot, len(blocks)))
        out[key] = _Group(policies, tps, idx)
    return out


def _interval(sample: _Sample, s: Settings) -> Interval:
    q = 50 * (1 - s.confidence)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanpercentile(sample.reps, [q, 100 - q])
    return Interval(sample.point, float(low), float(high))


def _compare(load: int, policy: str, versus: str, sample: _Sample, s: Settings,
             is_aa: bool = False) -> Comparison:
    iv = _interval(sample, s)
    enough = sample.n_blocks >= blocks_for(s.confidence)  # see "Few blocks" above
    v = verdict(iv, s.threshold) if enough else FEW
    narrow = enough and iv.halfwidth <= s.ci_target
    # an A/A that looks "better" is noise or a broken method, never a decided result
    return Comparison(load, policy, versus, iv, sample.n_blocks, v,
                      enough and (narrow if is_aa else (narrow or v != "indistinguishable")))


def _reference(g: _Group) -> str | None:
    """The fixed k with the highest median ratio to an anchor, the fixed k held by the most
    blocks (the A/A twin is in every one). Paired, because the adaptive design stops measuring
    decided policies: raw medians over different sets of blocks would compare different
    stretches of time (on the CPU box the whole engine slowed by 15% for minutes, and a k
    measured only early then looked fastest)."""
    fixed = [p for p in g.policies if is_fixed(p)]
    if not fixed:
        return None
    held = {p: int(np.sum(~np.isnan(g.tps[:, g.policies.index(p)]))) for p in fixed}
    anchor = max(fixed, key=lambda p: (held[p], policy_key(p)))
    return max(fixed, key=lambda p: 1.0 if p == anchor else g.paired_median(p, anchor))


def _samples_at(load: int, groups: dict[tuple[int, str], _Group], ref: str,
                s: Settings) -> dict[str, tuple[_Sample, str]]:
    """Every policy's ratio to the reference at one load (chained for non-table groups)."""
    tables = groups[(load, TABLES)]
    out = {p: (tables.ratio(p, ref) if p != ref else tables.one(s.n_boot), ref)
           for p in tables.policies if twin(p) is None}
    for (n, group), g in groups.items():
        if n != load or group == TABLES or not g.has(group):
            continue
        pair_ref = next((p for p in g.policies if p != group), None)
        if pair_ref is None or not tables.has(pair_ref):
            continue  # no fixed-k window to pair with, or none in the table blocks to chain
        chain = tables.ratio(pair_ref, ref) if pair_ref != ref else tables.one(s.n_boot)
        out[group] = (g.ratio(group, pair_ref).times(chain), f"{pair_ref}→{ref}")
    return out


def analyze(windows: Sequence[Window], s: Settings = Settings(),
            head_to_head: Sequence[tuple[str, str]] = ()) -> Analysis:
    """The whole analysis of a bench's windows; see the module docstring."""
    groups = _groups(windows, s)
    loads = sorted({n for n, grp in groups if grp == TABLES})
    refs: dict[int, str] = {}
    comparisons: dict[tuple[str, int], Comparison] = {}
    aa: dict[int, Comparison] = {}
    versus: dict[tuple[str, str, int], Comparison] = {}
    # a paired block's fixed-k window is not that k's median: the table blocks give that
    medians = {(p, n): g.median(p) for (n, grp), g in groups.items() for p in g.policies
               if grp in (TABLES, p)}
    loss_reps: dict[str, list[tuple[int, float, np.ndarray, int]]] = {}
    for n in loads:
        tables = groups[(n, TABLES)]
        ref = _reference(tables)
        if ref is None:
            continue
        refs[n] = ref
        samples = _samples_at(n, groups, ref, s)
        for p in sorted(samples, key=policy_key):
            sample, den = samples[p]
            c = _compare(n, p, den, sample, s)
            comparisons[(p, n)] = c if p != ref else Comparison(
                n, p, ref, c.ratio, c.n_blocks, "reference", True)
            loss_reps.setdefault(p, []).append((n, 1 - sample.point, 1 - sample.reps,
                                                sample.n_blocks))
        for p in tables.policies:
            base = twin(p)
            if base is not None and tables.has(base):
                aa[n] = _compare(n, p, base, tables.ratio(p, base), s, is_aa=True)
        for a, b in head_to_head:
            if tables.has(a) and tables.has(b):
                versus[(a, b, n)] = _compare(n, a, b, tables.ratio(a, b), s)
    worst_samples = {p: _worst(v) for p, v in loss_reps.items()}
    worst = {p: WorstCase(p, _interval(w, s), at) for p, (w, at) in worst_samples.items()}
    fixed = [p for p in worst if is_fixed(p)]
    best = min(fixed, key=lambda p: worst[p].loss.median) if fixed else None
    blocks = {n: groups[(n, TABLES)].tps.shape[0] for n in loads}
    vs_best = {} if best is None else _versus_best(worst_samples, best, s)
    return Analysis(loads, refs, medians, comparisons, aa, versus, worst, best, blocks,
                    worst_vs_best=vs_best, settings=s,
                    dropped=sum(not counted(w) for w in windows))


def _worst(per_load: list[tuple[int, float, np.ndarray, int]]) -> tuple[_Sample, int]:
    """Worst case over loads, point and replicates (the max inside each replicate), and where;
    it rests on the fewest blocks any load had."""
    points = [pt for _, pt, _, _ in per_load]
    at = per_load[int(np.argmax(points))][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reps = np.nanmax(np.vstack([r for _, _, r, _ in per_load]), axis=0)
    return _Sample(max(points), reps, min(b for *_, b in per_load)), at


def _versus_best(worst: dict[str, tuple[_Sample, int]], best: str, s: Settings) -> dict[str, Comparison]:
    """Each policy's worst-case loss minus the best fixed k's, as a ratio of kept throughput
    (1 - loss) / (1 - loss_best), so the verdict reads like every other: "better" holds up at its
    worst load by more than the threshold, in every replicate but the tails."""
    b, _ = worst[best]
    out = {}
    for p, (w, at) in worst.items():
        if p == best:
            continue
        kept = _Sample((1 - w.point) / (1 - b.point), (1 - w.reps) / (1 - b.reps),
                       min(w.n_blocks, b.n_blocks))
        out[p] = _compare(at, p, best, kept, s)
    return out
