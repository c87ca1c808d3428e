"""The field bench's figures from its raw runs (pure): field.json -> summary.json.

Per traffic shape, over its blocks (each block ran the shape once under every policy, in a
shuffled order, on the same requests), what users of vLLM's benchmark client read:

- per policy: the medians over blocks of output throughput (the client's tokens over its
  durations), the engine's own generated tokens over the same durations (the cross-check),
  TTFT / TPOT / ITL at p50 and p99, the acceptance length vLLM's client reports, and the
  request goodput under the SLOs given (`--goodput`); and `figures`: per figure users read
  (`output_throughput`, `ttft_p50_ms` ... `itl_p99_ms`) its median over blocks with a
  distribution-free 95% interval (order statistics of the blocks; none below 6 blocks) and,
  for a policy that is not a fixed k, its paired ratio to the best fixed k (below);
- comparisons, paired by block: each policy that is not a fixed k against every fixed k, the
  documented table, the tuned one and no speculation (those the run has), in output
  throughput (above 1 is faster) and in p50 TPOT (below 1 is faster): the geometric mean of
  the per-block ratios with its 95% Student's t-interval on their logs, and a word:
  `faster`, `slower`, or `same within noise` (the interval holds 1);
- `after_learning`: a sidecar policy against the tuned table in the blocks where its sidecar
  had been awake ≥ LEARN_S (60 s) before its run, both metrics (uncorrected, 95%);
- `gap_closed`: a sidecar started from a table that also ran alone, in all blocks and after
  LEARN_S: the share of the gap from that table to the tuned one it closed in output
  throughput, (mean log sidecar − mean log start) / (mean log tuned − mean log start) over the
  blocks, with Fieller's 95% interval on the paired block values (benchmarks/inference.py;
  exact for normal log ratios, its coverage checked in tests); no share unless tuned / start
  itself reads faster on those blocks;
- `headline`, the claims the README shows (each non-fixed, non-documented policy against the
  best fixed k, the documented table and no speculation, both metrics, every shape) as one family,
  Holm-corrected at 5% family-wise, each interval at the level its claim was tested at (a run
  makes dozens of comparisons: at 5% each a few would read faster or slower by chance, even of
  two policies that ran the same table; docs/benchmarks.md). Two policies that ran one table
  are an A/A: word "same table", no claim;
- against the best fixed k, which the data cannot name, in both metrics: "faster" only if
  faster than *every* fixed k (an intersection-union test, each at 5%), "slower" only if
  slower than some fixed k with the 5% split among them (Bonferroni). The figure is the
  per-k ratio against the fixed k that did best, its interval from the per-k ends (the
  least favourable lower end at 5% each, the least favourable upper end at Bonferroni's level).
  Under arrival-driven traffic below saturation every table delivers the arrivals' tokens, so
  output throughput is flat there and TPOT is the figure that moves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

import numpy as np

from benchmarks.arm_run import ArmRun
from benchmarks.client_record import FieldRecord
from benchmarks.field_summary_model import (BestFixed, BestFixedShort, FieldClaim, FieldComparison,
                                            FieldShape, FieldSummary, Figure, GapClosed,
                                            LearnedComparison, PolicyFigures, Word)
from benchmarks.inference import LogRatio, bounds_best, estimate, fieller, holm, p_best
from benchmarks.noharm_summary import (ALPHA, Run, acceptance_length, arm_throughput,
                                       engine_throughput, latency, mean_of, median,
                                       ratio_interval, short_runs)
from benchmarks.stats import is_fixed, policy_key
from benchmarks.policies import NOSPEC, SIDECAR, SIDECAR_POLICIES

Blocks = dict[tuple[int, int], dict[str, Run]]    # (part, block) -> policy -> its run
Tables = dict[str, list[list[int]]]               # policy -> the table it ran

METRICS: dict[str, tuple[Callable[[ArmRun], float], bool]] = {
    # name: (per-run figure, higher is better); the README's claims use the first two
    "output_throughput": (arm_throughput, True),
    "p50_tpot": (mean_of("p50_tpot_ms"), False),
    **{f"{m}_{q}_ms": (mean_of(f"{q}_{m}_ms"), False)
       for m in ("ttft", "tpot", "itl") for q in ("p50", "p99")},
}
HEADLINE = ("output_throughput", "p50_tpot")
FIGURES = ("output_throughput", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
           "itl_p50_ms", "itl_p99_ms")
LEARN_S = 60.0  # a sidecar policy is also compared with the tuned table once awake this long
SAME: Final = "same within noise"
SAME_TABLE: Final = "same table"  # the two policies ran one table: an A/A, no claim
BEST_FIXED = "best fixed k"


def by_block(runs: Sequence[Run], shape: str) -> Blocks:
    """(part, block) -> policy -> its run of `shape`."""
    out: Blocks = {}
    for r in runs:
        if r.shape == shape:
            out.setdefault((r.part, r.block), {})[r.arm] = r
    return dict(sorted(out.items()))


def pairs_of(blocks: Blocks, versus: str,
             policy: str) -> list[tuple[Run, Run]]:
    return [(b[versus], b[policy]) for b in blocks.values() if versus in b and policy in b]


def word(ci: Sequence[float | None], higher_is_better: bool) -> Word:
    lo, hi = ci
    if lo is None or hi is None:
        return None
    if lo > 1.0:
        return "faster" if higher_is_better else "slower"
    if hi < 1.0:
        return "slower" if higher_is_better else "faster"
    return SAME


def request_goodput(run: Run) -> float:
    """Requests meeting every SLO per second over the shape's runs (None: no SLO given)."""
    got = [(p.client.request_goodput, p.client.duration) for p in run.phases]
    if any(g is None for g, _ in got):
        return math.nan
    seconds = sum(d for _, d in got)
    return sum((g or 0.0) * d for g, d in got) / seconds if seconds > 0 else math.nan


def policy_figures(arms: Sequence[Run], figured: dict[str, Figure]) -> PolicyFigures:
    return PolicyFigures(tokens_per_s=median([arm_throughput(r) for r in arms]),
                         engine_tokens_per_s=median([engine_throughput(r) for r in arms]),
                         latency_ms=latency(arms), acceptance_length=acceptance_length(arms),
                         request_goodput=median([request_goodput(r) for r in arms]),
                         figures=figured)


def median_interval(values: Sequence[float], alpha: float = ALPHA) -> list[float | None]:
    """A distribution-free interval for the median: the order statistics x(j), x(n+1-j) with
    the largest j whose coverage 1 - 2·P(Bin(n, 1/2) < j) is at least 1 - alpha (none below
    6 values at 95%: even the extremes cover only 1 - 2/2^n)."""
    xs = sorted(v for v in values if not math.isnan(v))
    n, j = len(xs), 0
    while j + 1 <= n // 2 and 2 * sum(math.comb(n, i) for i in range(j + 1)) / 2 ** n <= alpha:
        j += 1
    return [None, None] if j == 0 else [round(xs[j - 1], 3), round(xs[n - j], 3)]


def figures(blocks: Blocks, policy: str,
            fixed: Sequence[str]) -> dict[str, Figure]:
    """Per figure users read: the median over blocks, its interval, and (a policy that is not
    a fixed k) the paired ratio to the best fixed k."""
    out = {}
    for name in FIGURES:
        of = METRICS[name][0]
        values = [of(b[policy]) for b in blocks.values() if policy in b]
        best = None if is_fixed(policy) else versus_best_fixed(blocks, policy, fixed, name)
        out[name] = Figure(median=median(values), ci=median_interval(values),
                           versus_best_fixed=None if best is None else BestFixedShort(
                               ratio=best.ratio, ci=best.ci, closest=best.closest,
                               word=best.word))
    return out


def compare(blocks: Blocks, policy: str, versus: str,
            metric: str, alpha: float = ALPHA) -> FieldComparison:
    of, higher = METRICS[metric]
    got = ratio_interval(pairs_of(blocks, versus, policy), of, alpha)
    return FieldComparison(policy=policy, versus=versus, metric=metric, ratio=got.ratio,
                           ci=got.ci, blocks=got.n, word=word(got.ci, higher))


def _inverse(v: float) -> float:
    """1/v, where an interval's end rounded to 0 (two blocks: a t quantile of 12.7) is inf."""
    return math.inf if v == 0 else 0.0 if math.isinf(v) else 1.0 / v


def versus_best_fixed(blocks: Blocks, policy: str,
                      fixed: Sequence[str], metric: str = "output_throughput") -> BestFixed | None:
    """`policy` against the best fixed k in `metric` (see the module). For a metric where lower
    is better (TPOT) the figures are read as their inverses (a rate), tested, and turned back."""
    if not fixed:
        return None
    higher = METRICS[metric][1]
    each = [compare(blocks, policy, k, metric) for k in fixed]
    wide = [compare(blocks, policy, k, metric, ALPHA / len(fixed)) for k in fixed]
    if any(c.ratio is None for c in each):
        return None

    def rate(v: float) -> float:  # the figure as "higher is better"
        return v if higher else _inverse(v)

    worst = min(each, key=lambda c: rate(c.ratio or 0.0))
    def end(c: FieldComparison, i: int) -> float | None:  # None: no interval (too few blocks)
        v = c.ci[i]
        return None if v is None or None in c.ci else rate(v)

    lows = [end(c, 0 if higher else 1) for c in each]
    highs = [end(c, 1 if higher else 0) for c in wide]
    said: Word
    if None in lows or None in highs:
        ci: list[float | None] = [None, None]
        said = None
    else:
        lo, hi = min(v for v in lows if v is not None), min(v for v in highs if v is not None)
        said = "faster" if lo > 1.0 else "slower" if hi < 1.0 else SAME
        ci = [round(lo, 4), round(hi, 4)] if higher else [round(_inverse(hi), 4),
                                                              round(_inverse(lo), 4)]
    return BestFixed(policy=policy, metric=metric, ratio=worst.ratio, ci=ci,
                     closest=worst.versus, word=said)


def _estimates(blocks: Blocks, policy: str,
               refs: Sequence[str], metric: str) -> list[LogRatio] | None:
    """Per reference, the per-block log ratios policy / ref as a rate (higher is better; TPOT
    turned into its inverse), estimated; None below two blocks for any of them."""
    of, higher = METRICS[metric]
    sign = 1.0 if higher else -1.0
    out = []
    for ref in refs:
        logs = [sign * math.log(of(b) / of(a)) for a, b in pairs_of(blocks, ref, policy)
                if of(a) > 0 and of(b) > 0]
        if len(logs) < 2:
            return None
        out.append(estimate(np.asarray(logs)))
    return out


def _stacked(estimates: Sequence[LogRatio]) -> LogRatio:
    return LogRatio(*(np.array([float(e[j]) for e in estimates]) for j in range(4)))


def claim_p(estimates: Sequence[LogRatio]) -> float:
    """p of "the policy differs from the best of the references": better needs every reference
    beaten (intersection-union), worse any one (Bonferroni); benchmarks/inference.p_best, with
    no band."""
    return float(p_best(_stacked(estimates), 0.0)[0])


def claim_interval(estimates: Sequence[LogRatio], alpha: float, higher: bool) -> list[float]:
    """The ratio's interval against the best reference at level alpha
    (benchmarks/inference.bounds_best), in the metric's own direction."""
    lo, hi = (float(x) for x in bounds_best(_stacked(estimates), alpha))
    return [round(math.exp(lo), 4), round(math.exp(hi), 4)] if higher else \
        [round(math.exp(-hi), 4), round(math.exp(-lo), 4)]


def headline(runs: Sequence[Run], shapes: Sequence[str], policies: Sequence[str],
             tables: Tables, alpha: float = ALPHA) -> list[FieldClaim]:
    """The claims the README shows, one family: per shape, every policy that is neither a
    fixed k nor the documented table, against the best fixed k, the documented table and no
    speculation (where the run has them), in output throughput and p50 TPOT. Holm's step-down
    over the family (a run makes dozens: at 5% each, a few would read faster or slower by
    chance); each interval at the level Holm tested its claim at, so its word and its interval
    agree. A claim between two policies that ran the same table is an A/A: reported, outside
    the family, word "same table"."""
    fixed = sorted((p for p in policies if is_fixed(p)), key=policy_key)
    shown = [p for p in policies if not is_fixed(p) and p != "documented"]
    found: list[tuple[_Asked, list[LogRatio] | None]] = []
    for shape in shapes:
        blocks = by_block(runs, shape)
        for policy in shown:
            for versus, refs in ((BEST_FIXED, fixed), ("documented", ["documented"]),
                                 (NOSPEC, [NOSPEC])):
                if not refs or policy in refs or any(r not in policies for r in refs):
                    continue
                same = any(tables.get(r) is not None and tables.get(r) == tables.get(policy)
                           for r in refs) if versus == "documented" else False
                for metric in HEADLINE:
                    ests = _estimates(blocks, policy, refs, metric)
                    ratio = None
                    if ests is not None:
                        rate = min(math.exp(float(e.mean)) for e in ests)
                        ratio = round(rate if METRICS[metric][1] else _inverse(rate), 4)
                    n = sum(policy in b and all(r in b for r in refs) for b in blocks.values())
                    found.append((_Asked(shape, policy, versus, metric, ratio, same, n), ests))
    p = np.full(len(found), np.nan)
    for i, (asked, ests) in enumerate(found):
        if ests is not None and not asked.same_table:
            p[i] = claim_p(ests)
    levels = holm(p, alpha)[1] if len(found) else np.asarray([])
    out = []
    for i, (asked, ests) in enumerate(found):
        higher = METRICS[asked.metric][1]
        if ests is None:
            out.append(FieldClaim(**asked._asdict(), ci=[None, None], level=None, p=None, word=None))
            continue
        in_family = not math.isnan(p[i])
        level = float(levels[i]) if in_family else alpha
        ci = claim_interval(ests, level, higher)
        said = SAME_TABLE if asked.same_table else word(ci, True) if higher else \
            word([_inverse(ci[1]), _inverse(ci[0])], True)
        out.append(FieldClaim(**asked._asdict(), ci=list(ci), level=round(level, 6),
                         p=round(float(p[i]), 6) if in_family else None, word=said))
    return out


class _Asked(NamedTuple):
    """A claim before it is tested."""

    shape: str
    policy: str
    versus: str
    metric: str
    ratio: float | None
    same_table: bool
    blocks: int


def _same(c: FieldComparison, tables: Tables) -> FieldComparison:
    """A comparison of two policies that ran one table is an A/A: its word says so."""
    a, b = tables.get(c.policy), tables.get(c.versus)
    return c.model_copy(update={"word": SAME_TABLE}) if a is not None and a == b and c.word else c


def awake_before(runs: Sequence[Run]) -> dict[tuple[int, int, str, str], float]:
    """Per sidecar run, keyed (part, block, shape, arm): the seconds its sidecar had been awake
    before it. The record lists runs as they ran, and each part (call) starts a new sidecar
    per sidecar policy."""
    out: dict[tuple[int, int, str, str], float] = {}
    awake: dict[tuple[int, str], float] = {}
    for r in runs:
        if r.sidecar is not None:
            out[(r.part, r.block, r.shape, r.arm)] = before = awake.get((r.part, r.arm), 0.0)
            awake[(r.part, r.arm)] = before + 60 * r.sidecar.minutes
    return out


def after_learning(blocks: Blocks, policy: str,
                   awake: dict[tuple[int, int, str, str], float],
                   learn_s: float = LEARN_S) -> list[LearnedComparison]:
    """A sidecar policy against the tuned table in the blocks where its sidecar had been awake
    at least ``learn_s`` before its run (what it keeps once it has learned), both metrics."""
    learned = {key: b for key, b in blocks.items() if policy in b and awake.get(
        (b[policy].part, b[policy].block, b[policy].shape, policy), 0.0) >= learn_s}
    return [LearnedComparison(**dict(compare(learned, policy, "tuned", m)), awake_s=learn_s)
            for m in HEADLINE]


def gap_closed(blocks: Blocks, policy: str, start: str,
               awake: dict[tuple[int, int, str, str], float], learn_s: float = 0.0) -> GapClosed:
    """How much of the gap from ``start`` to the tuned table the sidecar ``policy`` (started
    from it) closed, over the blocks where it had been awake ``learn_s`` before its run and
    all three ran with a throughput (a run with no tokens or no duration is left out). No
    share unless tuned / start reads "faster" on those blocks (none where its interval holds
    1, where tuned is slower, or below two blocks); its interval Fieller's (inference.py)."""
    def usable(b: dict[str, Run]) -> bool:
        return all(p in b and math.isfinite(v := arm_throughput(b[p])) and v > 0
                   for p in (start, "tuned", policy)) and awake.get(
            (b[policy].part, b[policy].block, b[policy].shape, policy), 0.0) >= learn_s
    used = {key: b for key, b in blocks.items() if usable(b)}
    rows = np.asarray([[math.log(arm_throughput(b[p])) for p in (start, "tuned", policy)]
                       for b in used.values()]).reshape(-1, 3)
    got, gap = rows[:, 2] - rows[:, 0], rows[:, 1] - rows[:, 0]
    n = len(rows)
    vs = compare(used, "tuned", start, "output_throughput")
    share: float | None = None
    ci: list[float | None] = [None, None]
    if vs.word == "faster":
        share = round(float(got.mean() / gap.mean()), 4)
        bounds = fieller(got, gap, ALPHA)
        if bounds is not None:
            ci = [round(bounds[0], 4), round(bounds[1], 4)]
    return GapClosed(policy=policy, start=start, awake_s=learn_s, blocks=n, gap=vs.ratio,
                     gap_word=vs.word, share=share, ci=ci)


def shape_summary(runs: Sequence[Run], shape: str, policies: Sequence[str],
                  tables: Tables | None = None) -> FieldShape:
    blocks = by_block(runs, shape)
    complete = [b for b in blocks.values() if all(p in b for p in policies)]
    fixed = sorted((p for p in policies if is_fixed(p)), key=policy_key)
    others = [p for p in policies if not is_fixed(p)]
    references = [*fixed, *(p for p in ("documented", "tuned", NOSPEC) if p in policies)]
    tables = tables or {}
    comparisons = [_same(compare(blocks, p, v, m), tables) for p in others for v in references
                   if v != p for m in HEADLINE]
    awake = awake_before(runs)
    learned = [c for p in others if p.startswith(SIDECAR) and "tuned" in policies
               for c in after_learning(blocks, p, awake)]
    starts = {p: start for p in others
              if (start := SIDECAR_POLICIES.get(p)) is not None and start in policies
              and start != "tuned" and "tuned" in policies}
    gaps = [gap_closed(blocks, p, start, awake, s) for p, start in starts.items()
            for s in (0.0, LEARN_S)]
    return FieldShape(
        shape=shape, blocks=len(complete),
        policies={p: policy_figures([b[p] for b in blocks.values() if p in b],
                                    figures(blocks, p, fixed)) for p in policies},
        comparisons=comparisons, after_learning=learned,
        versus_best_fixed=[v for p in others for m in HEADLINE
                           if (v := versus_best_fixed(blocks, p, fixed, m)) is not None],
        gap_closed=gaps)


def summarize(record: FieldRecord) -> dict[str, Any]:
    """summary.json as written: `summary(record)` in JSON form."""
    return summary(record).model_dump(mode="json")


def summary(record: FieldRecord) -> FieldSummary:
    """summary.json from field.json's record."""
    meta = record.meta
    names = [s.name for s in meta.shapes]
    policies = list(meta.policies)
    runs = record.runs
    tables: Tables = meta.tables
    shapes = [shape_summary(runs, name, policies, tables) for name in names]
    claims = headline(runs, names, policies, tables)
    return FieldSummary(
        headline=claims, family=sum(c.p is not None for c in claims), shapes=shapes,
        policies=policies, tables=tables, ci_level=1 - ALPHA,
        blocks=min((s.blocks for s in shapes), default=0), parts=len(meta.parts),
        goodput_slo=meta.goodput, short_runs=short_runs(runs),
        statistic="geometric mean of per-block ratios policy / reference (output "
                  "throughput; p50 TPOT), Student's t-interval on their logs; against "
                  "the best fixed k an intersection-union test; `headline`: the README's "
                  "claims, Holm at 5% family-wise, each interval at its Holm level; "
                  "`shapes[].comparisons`: every pair at 95% each, not corrected",
        command=meta.command)
