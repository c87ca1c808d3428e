"""The guardrail: a pushed table that makes live goodput drop is rolled back (pure).

Every complete scrape gives one sample of realized goodput: tokens the engine emitted over the
interval (request-steps plus accepted drafts) per second, at the interval's mean batch size.
Before a push the last ``window`` samples are the baseline; after it, ``settle`` samples are
skipped (the swap and its first steps) and the next ``window`` are the trial. Only samples at
a comparable load count (mean batch within ``load_band`` of the baseline's median): a load
change is not a regression. The trial fails when

    mean log G_after - mean log G_before < log(1 - drop)   and   Welch t < -z

both a practical and a statistical bound (docs/measurement.md, rule 5). A trial whose mean is
past the practical bound but whose t is not yet past -z is not a pass: it goes on, judged again
at every sample, up to ``window · (1 + extend)`` samples (the baseline keeps as many before the
push), so a large drop under noisy scrapes is found with more samples rather than waved
through (a loaded CPU box: a 50% drop at t = -1.9 on 4 + 4 samples). Its error rates on
simulated scrapes: benchmarks/results/calibration (guardrail.json). A failed trial rolls the
engine back to the table before the push and holds the pushed table out for ``hold_s``. A
detected change of traffic (sidecar/change.py) cancels the trial and the holds: goodput
before and after a push under different traffic says nothing about the table.

A push that measurement decided (sidecar/arbiter.py: paired runs of realized goodput at the
buckets it changed) is judged by those pairs, not by the scrapes: the scrape-level goodput
mixes every bucket and the minute-to-minute drift that pairing cancels, so a drop there rolls
such a push back only when the pairs at its buckets do not say the new k wins
(``paired_overrule``). The pairs keep coming after the push (a confidence sequence stays valid
at every look), so a measured push whose pairs turn against it is rolled back by the same rule.

Bounded regret: a bad table runs at most (settle + window · (1 + extend)) scrape intervals before it is
rolled back, then is held out for hold_s; the same table can come back at most once per hold,
so the share of time on a table that loses beyond the noise is at most
(settle + window · (1 + extend)) · interval_s / hold_s (docs/sidecar.md, "The guardrail").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from tuner.core.table import Table

__all__ = ["Guardrail", "PairedCheck", "Sample", "Verdict", "paired_overrule"]


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
    batch: float       # mean requests per step over the interval
    goodput: float     # tokens per second over the interval


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


# (bucket, k_new, k_old, family) -> (low, high) of G(k_new)/G(k_old) from the pairs, or None;
# family: the buckets judged together (the caller splits its error rate over them)
Compare = Callable[[int, int, int, int], tuple[float, float] | None]


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


@dataclass(slots=True)
class Guardrail:
    window: int = 5
    settle: int = 1
    drop: float = 0.05
    z: float = 3.0
    load_band: float = 0.25
    hold_s: float = 600.0
    extend: int = 3      # an inconclusive drop: up to this many more windows of samples
    baseline: deque[Sample] = field(default_factory=deque)
    trial: _Trial | None = None
    held: dict[tuple[tuple[int, int, int], ...], float] = field(default_factory=dict)

    def start(self, old: Table, new: Table,
              measured: tuple[tuple[int, int, int], ...] = ()) -> None:
        """A table was pushed: judge it against the samples before it. A push during a trial
        extends it: the last judged table and its baseline stay, the new table is judged.
        ``measured``: the (bucket, k_old, k_new) changes that paired measurement decided."""
        if self.trial is not None:
            self.trial = _Trial(self.trial.old, new, self.trial.before,
                                measured=self.trial.measured + measured)
            return
        self.trial = _Trial(old, new, list(self.baseline), measured=measured)

    def cancel(self) -> None:
        """Someone else changed the table, or the engine restarted: no verdict on this push."""
        self.trial = None
        self.baseline.clear()

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

    def observe(self, sample: Sample, now: float, compare: Compare | None = None) -> Verdict | None:
        """Add one scrape's sample; a Verdict when a trial is complete. ``compare`` reads the
        pairs for a measured push's buckets (paired_overrule)."""
        trial = self.trial
        if trial is None:
            self.baseline.append(sample)
            while len(self.baseline) > self.longest:
                self.baseline.popleft()
            return None
        if trial.skipped < self.settle:
            trial.skipped += 1
            return None
        trial.after.append(sample)
        if len(trial.after) < self.window:
            return None
        judged = self._judge(trial)
        if (judged is not None and not judged.rolled_back and judged.ratio < 1 - self.drop
                and len(trial.after) < self.longest and not trial.measured):
            return None  # a drop the samples cannot call yet: more samples, not a pass
        self.trial = None
        verdict = self._paired(trial, judged, compare)
        if verdict is not None and verdict.rolled_back:
            self.held[tuple(trial.new.ranges)] = now + self.hold_s
            self.baseline = deque()  # those samples were the bad table's: no bar for the next
        else:
            self.baseline = deque(trial.after[-self.longest:])
        return verdict

    @property
    def longest(self) -> int:
        """The most samples a side of a trial holds (an inconclusive drop's extended trial)."""
        return self.window * (1 + self.extend)

    @staticmethod
    def _paired(trial: _Trial, verdict: Verdict | None, compare: Compare | None) -> Verdict | None:
        """A measured push: the pairs at its buckets overrule the scrapes where they speak."""
        if not trial.measured or compare is None:
            return verdict
        checks = []
        for bucket, k_old, k_new in trial.measured:
            got = compare(bucket, k_new, k_old, len(trial.measured))
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
        diff = float(np.mean(after) - np.mean(before))
        se = float(np.sqrt(np.var(before, ddof=1) / len(before) + np.var(after, ddof=1) / len(after)))
        t = diff / se if se > 0 else (0.0 if diff == 0 else float("-inf") if diff < 0 else float("inf"))
        bad = diff < np.log(1 - self.drop) and t < -self.z
        return Verdict(bool(bad), round(float(np.exp(diff)), 4), round(t, 2), len(before),
                       len(after), trial.old, trial.new)
