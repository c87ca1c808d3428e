"""The guardrail: a pushed table that makes live goodput drop is rolled back (pure).

A sample is realized goodput over consecutive complete scrapes pooled until they hold at least
``min_steps`` engine steps: the tokens the engine emitted (request-steps plus accepted drafts)
over their seconds, at their step-weighted mean batch size. Not one sample a scrape: a scrape
on a large model holds a dozen steps, and neighbouring scrapes share the host's slow or fast
stretch, which a per-scrape test takes for a regression (benchmarks/guardrail_calibration.py).
Before a push the last ``window`` samples are the baseline; after it, ``settle`` scrapes are
skipped (the swap and its first steps) and the next ``window`` samples are the trial. A pool
never straddles a push. Only samples at a comparable load count (mean batch within
``load_band`` of the baseline's median): a load change is not a regression. The trial fails when

    mean log G_after - mean log G_before < log(1 - drop)   and   Welch t < -t_{1-α}(ν)

both a practical and a statistical bound (docs/measurement.md, rule 5): ν the
Welch-Satterthwaite degrees of freedom, α = Φ(-z) / L split over the L = 1 + window · extend
looks a trial may take (``z`` = 3.5: Φ(-z) = 0.00023 for the whole trial; at z = 3 the bound
on null rollbacks at ρ = 0.8, rate + 2 SE, read 1.0-1.1%, over the 1% aimed at). A trial
whose mean is past the practical bound but whose t is not yet past the bar is not a pass: it
goes on, judged again at every sample, up to ``window · (1 + extend)`` samples (the baseline
keeps as many before the push), so a large drop under noisy scrapes is found with more samples
rather than waved through (a loaded CPU box: a 50% drop at t = -1.9 on 4 + 4 samples). Its
error rates on simulated scrapes: benchmarks/results/calibration (guardrail.json). A failed
trial rolls the engine back to the table before the push and holds the pushed table out for
``hold_s``. A detected change of traffic (sidecar/change.py) cancels the trial and the holds:
goodput before and after a push under different traffic says nothing about the table.

A push that measurement decided (sidecar/arbiter.py: paired runs of realized goodput at the
buckets it changed) is judged by those pairs, not by the scrapes: the scrape-level goodput
mixes every bucket and the minute-to-minute drift that pairing cancels, so a drop there rolls
such a push back only when the pairs at its buckets do not say the new k wins
(``paired_overrule``). The pairs keep coming after the push (a confidence sequence stays valid
at every look), so a measured push whose pairs turn against it is rolled back by the same rule.

Bounded regret: a bad table runs at most settle + window · (1 + extend) · ⌈min_steps / steps a
scrape⌉ scrape intervals before it is rolled back, then is held out for hold_s; the same table
can come back at most once per hold, so the share of time on a table that loses beyond the
noise is at most that many intervals · interval_s / hold_s (docs/sidecar.md, "The guardrail").
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np

from tuner.core.student_t import t_ppf
from tuner.core.table import Table

__all__ = ["MIN_STEPS", "Guardrail", "PairedCheck", "Sample", "Verdict", "paired_overrule", "pooled"]

# engine steps one sample pools at least (consecutive scrapes): neighbouring scrapes correlate
# (benchmarks/results/calibration/guardrail.json)
MIN_STEPS = 100.0


@dataclass(frozen=True, slots=True)
class PairedCheck:
    """Where a measured push stands at one bucket it changed: G(k_new)/G(k_old) from the pairs
    (None: fewer pairs than a comparison needs)."""
    bucket: int
    k_old: int
    k_new: int
    low: float | None
    high: float | None


def paired_overrule(checks: list[PairedCheck]) -> bool | None:
    """The pairs' verdict on a measured push: True (keep it: at every bucket it changed the new
    k is not worse beyond the interval), False (roll back: at some bucket the new k loses
    with confidence), None (no pairs at some bucket: the scrapes judge)."""
    if not checks:
        return None
    if any(c.high is not None and c.high < 1.0 for c in checks):
        return False
    if any(c.low is None or c.high is None for c in checks):
        return None
    return True


@dataclass(frozen=True, slots=True)
class Sample:
    """One scrape interval, or consecutive ones pooled (``pooled``)."""
    batch: float       # mean requests per step over the interval
    goodput: float     # tokens per second over the interval
    steps: float       # engine steps in the interval
    seconds: float     # the interval's length


def pooled(scrapes: Sequence[Sample]) -> Sample:
    """Consecutive intervals as one: total tokens over total seconds, batch weighted by steps."""
    steps = sum(s.steps for s in scrapes)
    seconds = sum(s.seconds for s in scrapes)
    tokens = sum(s.goodput * s.seconds for s in scrapes)
    batch = sum(s.batch * s.steps for s in scrapes) / steps if steps > 0 else 0.0
    return Sample(batch, tokens / seconds if seconds > 0 else 0.0, steps, seconds)


@dataclass(frozen=True, slots=True)
class Verdict:
    rolled_back: bool
    ratio: float         # mean goodput after / before (geometric)
    t: float
    before: int          # samples behind each side
    after: int
    old: Table           # the table before the push: what a rollback puts back
    new: Table           # the pushed table
    paired: list[PairedCheck] = field(default_factory=list)  # a measured push's buckets
    judged_by: str = "scrapes"   # scrapes | pairs

    @property
    def old_table(self) -> list[list[int]]:
        return self.old.to_list()

    @property
    def new_table(self) -> list[list[int]]:
        return self.new.to_list()


PairKey = tuple[int, int, int]  # (bucket, k_new, k_old) of a measured push's change
# (bucket, k_new, k_old) -> (low, high) of G(k_new)/G(k_old) from the pairs, or None (too few),
# each at the error rate split over the buckets one verdict judges (any can roll it back)
PairBounds = Mapping[PairKey, tuple[float, float] | None]


@dataclass(slots=True)
class _Trial:
    old: Table
    new: Table
    before: list[Sample]
    after: list[Sample] = field(default_factory=list)
    skipped: int = 0
    measured: tuple[tuple[int, int, int], ...] = ()   # (bucket, k_old, k_new) the pairs decided


def _comparable(samples: list[Sample], centre: float, band: float) -> list[float]:
    return [np.log(s.goodput) for s in samples
            if s.goodput > 0 and abs(s.batch - centre) <= band * max(centre, 1.0)]


def welch(before: Sequence[float], after: Sequence[float]) -> tuple[float, float, float]:
    """(mean after - mean before, Welch's t, Welch-Satterthwaite degrees of freedom)."""
    diff = float(np.mean(after) - np.mean(before))
    v1, v2 = np.var(before, ddof=1) / len(before), np.var(after, ddof=1) / len(after)
    se = float(np.sqrt(v1 + v2))
    if se == 0:  # identical samples: any difference at all is beyond the noise
        t = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        return diff, t, float(len(before) + len(after) - 2)
    df = float((v1 + v2) ** 2 / (v1 ** 2 / (len(before) - 1) + v2 ** 2 / (len(after) - 1)))
    return diff, diff / se, df


@functools.lru_cache(maxsize=4096)
def _bar(alpha: float, tenths: int) -> float:
    return float(t_ppf(1 - alpha, tenths / 10))


def t_bar(alpha: float, df: float) -> float:
    """Student's t quantile 1 - alpha at df, df floored to a tenth (at least 1): a smaller df
    only raises the bar, and the cache keeps the Newton solve (~15 ms) off the scrape path."""
    return _bar(alpha, max(int(df * 10), 10))


@dataclass(slots=True)
class Guardrail:
    window: int = 5
    settle: int = 1
    drop: float = 0.05
    z: float = 3.5       # the level as a normal z: one-sided α = Φ(-z) for a whole trial
    load_band: float = 0.25
    hold_s: float = 600.0
    extend: int = 3      # an inconclusive drop: up to this many more windows of samples
    min_steps: float = MIN_STEPS
    baseline: deque[Sample] = field(default_factory=deque)
    pending: list[Sample] = field(default_factory=list)  # scrapes of the sample being pooled
    trial: _Trial | None = None
    held: dict[tuple[tuple[int, int, int], ...], float] = field(default_factory=dict)

    def start(self, old: Table, new: Table,
              measured: tuple[tuple[int, int, int], ...] = ()) -> None:
        """A table was pushed: judge it against the samples before it. A push during a trial
        extends it: the last judged table and its baseline stay, the new table is judged.
        ``measured``: the (bucket, k_old, k_new) changes that paired measurement decided."""
        self.pending = []  # a sample holds one table's scrapes
        if self.trial is not None:
            self.trial = _Trial(self.trial.old, new, self.trial.before,
                                measured=self.trial.measured + measured)
            return
        self.trial = _Trial(old, new, list(self.baseline), measured=measured)

    def cancel(self) -> None:
        """Someone else changed the table, or the engine restarted: no verdict on this push."""
        self.trial = None
        self.baseline.clear()
        self.pending = []

    def forget(self) -> None:
        """The traffic changed: no verdict across the change, and what was held out was judged
        on the old traffic."""
        self.cancel()
        self.held.clear()

    @property
    def has_baseline(self) -> bool:
        """A full window of samples before a push: enough to judge one."""
        return len(self.baseline) >= self.window

    def is_held(self, table: Table, now: float) -> float | None:
        """Until when ``table`` is held out after a rollback, else None."""
        until = self.held.get(tuple(table.ranges))
        return until if until is not None and until > now else None

    def wanted(self) -> tuple[PairKey, ...]:
        """The pairs' comparisons the running trial is judged by (a measured push's changes);
        the caller passes their bounds to observe."""
        trial = self.trial
        return () if trial is None else tuple((b, new, old) for b, old, new in trial.measured)

    def observe(self, scrape: Sample, now: float, bounds: PairBounds | None = None) -> Verdict | None:
        """Add one scrape interval; a Verdict when a trial is complete. ``bounds``: the pairs
        at a measured push's buckets, for each key of wanted() (paired_overrule)."""
        trial = self.trial
        if trial is not None and trial.skipped < self.settle:
            trial.skipped += 1
            return None
        self.pending.append(scrape)
        if sum(s.steps for s in self.pending) < self.min_steps:
            return None
        sample, self.pending = pooled(self.pending), []
        if trial is None:
            self.baseline.append(sample)
            while len(self.baseline) > self.longest:
                self.baseline.popleft()
            return None
        trial.after.append(sample)
        if len(trial.after) < self.window:
            return None
        judged = self._judge(trial)
        if (judged is not None and not judged.rolled_back and judged.ratio < 1 - self.drop
                and len(trial.after) < self.longest and not trial.measured):
            return None  # a drop the samples cannot call yet: more samples, not a pass
        self.trial = None
        verdict = self._paired(trial, judged, bounds)
        if verdict is not None and verdict.rolled_back:
            self.held[tuple(trial.new.ranges)] = now + self.hold_s
            self.baseline = deque()  # those samples were the bad table's: no bar for the next
        else:
            self.baseline = deque(trial.after[-self.longest:])
        return verdict

    @property
    def alpha(self) -> float:
        """The level of one look: Φ(-z) for the whole trial, split over the looks it may take
        (Bonferroni; at one level a look the extension's looks raised false rollbacks from
        0.7-0.8% to 1.2-2.0% on independent scrapes: benchmarks/results/calibration)."""
        return NormalDist().cdf(-self.z) / (1 + self.window * self.extend)

    @property
    def longest(self) -> int:
        """The most samples a side of a trial holds (an inconclusive drop's extended trial)."""
        return self.window * (1 + self.extend)

    @staticmethod
    def _paired(trial: _Trial, verdict: Verdict | None, bounds: PairBounds | None) -> Verdict | None:
        """A measured push: the pairs at its buckets overrule the scrapes where they speak."""
        if not trial.measured or bounds is None:
            return verdict
        checks = []
        for bucket, k_old, k_new in trial.measured:
            got = bounds.get((bucket, k_new, k_old))
            checks.append(PairedCheck(bucket, k_old, k_new, *(got or (None, None))))
        keep = paired_overrule(checks)
        if keep is None:
            return None if verdict is None else replace(verdict, paired=checks)
        base = verdict or Verdict(False, 1.0, 0.0, len(trial.before), len(trial.after),
                                  trial.old, trial.new)
        return replace(base, rolled_back=not keep, paired=checks, judged_by="pairs")

    def _judge(self, trial: _Trial) -> Verdict | None:
        if len(trial.before) < 3:
            return None  # no baseline (the first push after a start): nothing to compare
        centre = float(np.median([s.batch for s in trial.before]))
        before = _comparable(trial.before, centre, self.load_band)
        after = _comparable(trial.after, centre, self.load_band)
        if len(before) < 3 or len(after) < 3:
            return None  # the load moved: not a verdict on the table
        diff, t, df = welch(before, after)
        bad = diff < np.log(1 - self.drop) and t < -t_bar(self.alpha, df)
        return Verdict(bool(bad), round(float(np.exp(diff)), 4), round(t, 2), len(before),
                       len(after), trial.old, trial.new)
