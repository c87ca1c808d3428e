"""Realized goodput: what each k delivered at the loads the engine served (pure).

The plugin's step ring (GET /v1/stats?since=SEQ) holds every engine step as
(seq, B, k verified, k drafted, seconds, tokens, emitted, cycle): `emitted` is what the step's
requests kept, one token each plus their accepted drafts, and `cycle` the engine's whole cycle
for the step (its execution plus the host's scheduling and output handling between steps), so
emitted / cycle is goodput as the engine realized it, with no model of τ or T in between. The
cycle, not the execution time alone: a host cost per step that is the same for every k weighs
more on the faster k (with 66.6 vs 79.6 ms steps, a 5 ms gap turns a 3.4% lead by execution
time into 2.2% by the clock). Only steady steps (k verified == k drafted)
speak for one k; the transition steps at the edges of a run are left out.

Comparing two k's by their cell means would compare different minutes of traffic (steps drift
by a few percent over a minute, as much as the differences sought: docs/sidecar.md). So k's are
compared in pairs: a short run of a challenger (a duel run, vllm_patch/duel.py, or any short
stretch of another k) against the steps of the k on either side of it at the same bucket, the
last m before and the first m after (m the run's own steady steps): linear drift cancels, and
each run gives one log ratio log(u_run / u_around), u = Σ emitted / Σ (B · seconds), goodput per
request (G/B = τ/T), in bands of batch sizes (1, 2, 3-4, 5-8, 9-16, then the plugin's 8-wide
buckets) so that a small load's wandering B still pairs.

The ratios of one (bucket, k, k') form a sample whose mean gets a confidence *sequence*
(a normal-mixture boundary, Robbins 1970; Howard et al. 2021): valid at every look, so a sidecar
that checks after every scrape and stops exploring when the interval resolves does not inflate
its error rate the way re-testing a fixed-n interval does:

    |mean_n - μ| <= s/n · sqrt((n + ρ)·(log((n + ρ)/ρ) + 2·log(2/α)))      (eq. CS)

with ρ the pair count where the boundary is tightest and s² the pairs' long-run variance
n·Var(mean_n), not their plain variance S²: neighbouring pairs share requests in flight and a
slow wander of the ratio, so n pairs in a row carry less than n independent ones (a third at
AR(1) ρ = 0.5). It is estimated from the means of every b consecutive pairs (in the order the
runs ran) and taken at its upper 90% bound, since a few batches estimate it loosely:

    s² = max(S², ν·σ̂²_b / χ²_ν(0.1)),   b = max(8, ⌊√n⌋),   ν = 1.5·(n/b − 1)       (eq. LRV)

    σ̂²_b = n·b/((n−b+1)(n−b)) · Σ_j (mean of pairs j..j+b−1 − mean_n)²

(overlapping batch means; s floored: a few pairs can agree by chance). Its error rates with
dependent pairs: benchmarks/pair_dependence.py, and the tests.

Below MIN_PAIRS eq. LRV has too few batches, yet bursts may leave a bucket only a handful of
pairs (docs/sidecar.md, *Early comparisons*). An *early* comparison (EARLY_PAIRS to
MIN_PAIRS - 1 pairs, asked for with ``early=True``) assumes the dependence instead of
estimating it: the plain variance at its upper LRV_LEVEL bound times EARLY_DEPENDENCE, the
long-run factor of AR(1) ρ = 0.5 (real pairs measured 0.67-0.87 pooled):

    s² = EARLY_DEPENDENCE · S²·(n−1)/χ²_{n−1}(0.1)                               (eq. EARLY)

It resolves only large effects (a 2.4x gain at 4 pairs, +10% at sd 0.05 by a median 20); the
early looks add 0.4 points to the null error by pair 500 at ρ = 0.5 (benchmarks/pair_dependence.py).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from tuner.core.admin_api import Step
from tuner.core.buckets import band

__all__ = ["EARLY_PAIRS", "MeasuredGoodput", "changed_buckets", "Pair", "PairPower",
           "PairedComparison", "confidence_sequence", "long_run_variance", "paired_interval",
           "pairs_in", "settled_runs", "smallest_gain"]


MIN_RUN_STEPS = 4     # a run with fewer steady steps is too short to pair (a 3-step rotation run)
MAX_RUN_STEPS = 256   # longer stretches of another k are the table's, not a run
BATCH_PAIRS = 8       # eq. LRV's shortest batch: a slow wander of the ratio outlasts ~5 pairs
LRV_LEVEL = 0.9       # eq. LRV at its upper 90% bound: a few batches estimate it loosely
MIN_PAIRS = 3 * BATCH_PAIRS  # fewer pairs give no comparison: eq. LRV needs 3 batches (ν = 3)
EARLY_PAIRS = 4       # an early comparison's first look (eq. EARLY)
EARLY_DEPENDENCE = 3.0  # eq. EARLY's assumed long-run factor: AR(1) ρ = 0.5
MIN_PAIR_SD = 0.004   # floor of the pairs' log-ratio spread: 3 pairs may agree by chance
RHO = 10.0            # eq. CS is tightest near this many pairs
KEEP_PAIRS = 400      # per (bucket, k, k'): older pairs fall out
TAIL_STEPS = 1024     # ring steps kept to pair a run whose reference is still coming
CYCLE_IDLE = 3.0      # a cycle this many times its neighbours' median had the engine idle
PAIRABLE_SHARE = 1 / 3  # a pair needs a third of a run's window in its bucket (pairs_in: the
                        # run's MIN_RUN_STEPS and half a run of reference steps)
UNPAIRED_RUNS = 3       # a bucket where this many runs had their chance to pair and none did is
                        # one the load passes through (a drain holds it, runs never line up)
LINED_UP_SHARE = 1 / 2  # a run and its references line up only where the load stayed this much
                        # of a window: a run's steps and half a run of reference steps (pairs_in)


FloatArray = npt.NDArray[np.float64]


def _half_width(n: int, alpha: float) -> float:
    """eq. CS's half-width per unit of s."""
    return math.sqrt((n + RHO) * (math.log((n + RHO) / RHO) + 2.0 * math.log(2.0 / alpha))) / n


def confidence_sequence(mean: float, sd: float, n: int, alpha: float) -> tuple[float, float]:
    """eq. CS: (low, high) for the mean of n values whose long-run sd is ``sd``, valid at every n
    (two-sided)."""
    half = max(sd, MIN_PAIR_SD) * _half_width(n, alpha)
    return mean - half, mean + half


def smallest_gain(sd: float, n: int, alpha: float) -> float:
    """The gain whose eq. CS interval just clears 1 at n pairs of long-run sd ``sd``: what a
    comparison finds in half its runs by then (a smaller true gain mostly ends as a tie)."""
    return math.exp(max(sd, MIN_PAIR_SD) * _half_width(n, alpha)) - 1.0


def _chi2_quantile(df: float, q: float) -> float:
    """The q-quantile of χ² with ``df`` degrees of freedom (Wilson-Hilferty; within 1% from 3 df)."""
    h = 2.0 / (9.0 * df)
    return df * max(1.0 - h + NormalDist().inv_cdf(q) * math.sqrt(h), 0.0) ** 3


def long_run_variance(x: FloatArray) -> FloatArray:
    """eq. LRV over the last axis of ``x`` (log ratios in the order their runs ran): n·Var(mean)
    by overlapping batch means, at its upper LRV_LEVEL bound, never below the plain variance;
    infinite where the pairs are too few to bound it."""
    n = x.shape[-1]
    b = max(BATCH_PAIRS, math.isqrt(n))
    df = 1.5 * (n / b - 1.0)
    low = _chi2_quantile(df, 1.0 - LRV_LEVEL) if n > b else 0.0
    if low <= 0.0:
        return np.full(x.shape[:-1], math.inf)
    c = np.concatenate((np.zeros((*x.shape[:-1], 1)), np.cumsum(x, axis=-1)), axis=-1)
    means = (c[..., b:] - c[..., :-b]) / b   # every b consecutive pairs
    spread = np.sum((means - c[..., -1:] / n) ** 2, axis=-1)
    batches = n * b / ((n - b + 1) * (n - b)) * spread
    upper: FloatArray = np.maximum(batches * df / low, np.var(x, axis=-1, ddof=1))
    return upper


def early_variance(x: FloatArray) -> FloatArray:
    """eq. EARLY over the last axis of ``x``: the plain variance at its upper LRV_LEVEL bound
    times the assumed dependence."""
    n = x.shape[-1]
    upper: FloatArray = (np.var(x, axis=-1, ddof=1) * (n - 1) / _chi2_quantile(n - 1, 1.0 - LRV_LEVEL)
                         * EARLY_DEPENDENCE)
    return upper


def paired_interval(x: FloatArray, alpha: float,
                    factor: float = 1.0) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(mean, low, high) of the log ratios over the last axis of ``x`` (in the order their runs
    ran): eq. CS with s² from eq. LRV (eq. EARLY below MIN_PAIRS), times ``factor``."""
    mean = np.mean(x, axis=-1)
    n = x.shape[-1]
    variance = long_run_variance(x) if n >= MIN_PAIRS else early_variance(x)
    half = np.maximum(np.sqrt(variance * factor), MIN_PAIR_SD) * _half_width(n, alpha)
    return mean, mean - half, mean + half


@dataclass(frozen=True, slots=True)
class PairPower:
    """What a running comparison can still find: the pairs' long-run sd so far, and the smallest
    gain it would find by ``max_pairs`` pairs (smallest_gain)."""

    bucket: int
    k: int
    ref: int
    pairs: int
    sd: float
    smallest_gain: float


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """k over k' at one bucket: the ratio of realized goodput and its interval (eq. CS)."""

    bucket: int
    k: int
    ref: int
    ratio: float
    low: float
    high: float
    pairs: int
    steps: int          # the challenger's steady steps behind the pairs

    @property
    def half_width(self) -> float:
        """Half the interval's width on the log scale (comparable with a model's z·σ)."""
        return (math.log(self.high) - math.log(self.low)) / 2.0


@dataclass(frozen=True, slots=True)
class _Segment:
    k: int
    steps: tuple[Step, ...]

    @property
    def first(self) -> int:
        return self.steps[0].seq

    @property
    def last(self) -> int:
        return self.steps[-1].seq


def _segments(steps: Sequence[Step]) -> list[_Segment]:
    """Maximal stretches of steady steps at one k with no step missing between them beyond
    the two transition steps a k change brings (a gap in seq: the ring or a scrape lost some)."""
    out: list[_Segment] = []
    run: list[Step] = []
    prev_seq = None
    for s in steps:
        seq, kv, kd = s.seq, s.k_verified, s.k_drafted
        broken = prev_seq is not None and seq != prev_seq + 1
        prev_seq = seq
        if kv != kd or broken or (run and run[-1].k_drafted != kd):
            if run:
                out.append(_Segment(run[-1].k_drafted, tuple(run)))
            run = []
            if kv != kd:
                continue
        run.append(s)
    if run:
        out.append(_Segment(run[-1].k_drafted, tuple(run)))
    return out


def _seconds(s: Step) -> float:
    """A step's share of the wall clock: its engine cycle where the plugin timed one (the host's
    time between steps included, as a client sees it; under async scheduling the execution
    time alone is only what was left to wait), else its execution time."""
    return s.cycle if s.cycle else s.seconds


def _busy(steps: Sequence[Step]) -> list[Step]:
    """Leave out steps that waited for work (an idle engine): a cycle over CYCLE_IDLE times the
    median of the steps around it."""
    if not steps:
        return []
    limit = CYCLE_IDLE * float(np.median([_seconds(s) for s in steps]))
    return [s for s in steps if _seconds(s) <= limit]


def _rate(steps: Iterable[Step]) -> tuple[float, float]:
    """(emitted tokens, request-seconds): their ratio is goodput per request, G(B, k)/B =
    τ(k)/T(B, k), which a band's mix of batch sizes moves far less than G itself."""
    seconds = emitted = 0.0
    for s in steps:
        seconds += _seconds(s) * max(s.batch_size, 1)
        emitted += s.emitted or 0
    return emitted, seconds


def changed_buckets(old: Sequence[int], new: Sequence[int]) -> set[int]:
    """The buckets (as ``served`` keys them) where two dense tables (row b-1 is B=b) differ."""
    return {band(b) for b, (k_old, k_new) in enumerate(zip(old, new), start=1) if k_old != k_new}


@dataclass(frozen=True, slots=True)
class Pair:
    bucket: int
    k: int
    ref: int
    log_ratio: float
    steps: int
    first: int   # seq of the run's first steady step (each run is paired once)

    def logged(self) -> dict[str, float | int]:
        """The sidecar's `pair` event (benchmarks/pair_dependence.py reads it back)."""
        return {"seq": self.first, "bucket": self.bucket, "k": self.k, "ref": self.ref,
                "log_ratio": round(self.log_ratio, 6), "steps": self.steps}


def _at_shared_batch_sizes(mine: Sequence[Step],
                           around: Sequence[Step]) -> tuple[float, int, int]:
    """The run against its references at the batch sizes both ran: per B the log ratio of their
    goodput per request, weighted by the run's steps there; (log ratio, run steps and reference
    steps counted). Within a band T can jump (a CUDA graph's size, a chunk of prefill), so a
    run at other B than its references would measure the batch sizes, not the k's."""
    run: dict[int, list[Step]] = {}
    ref: dict[int, list[Step]] = {}
    for s in mine:
        run.setdefault(s.batch_size, []).append(s)
    for s in around:
        ref.setdefault(s.batch_size, []).append(s)
    total, counted, refs = 0.0, 0, 0
    for B in run.keys() & ref.keys():
        (e_run, t_run), (e_ref, t_ref) = _rate(run[B]), _rate(ref[B])
        if min(e_run, e_ref, t_run, t_ref) <= 0:
            continue
        total += len(run[B]) * math.log((e_run / t_run) / (e_ref / t_ref))
        counted, refs = counted + len(run[B]), refs + len(ref[B])
    return (total / counted if counted else 0.0), counted, refs


def pairs_in(steps: Sequence[Step], done: set[int],
             table_k: Sequence[int] | None = None) -> list[Pair]:
    """Every run in ``steps`` with at least as many steps of one other k on both sides of it,
    not in ``done`` (first seqs already paired); a run whose after-side is still short waits.

    ``table_k[B]``: the engine's table. A stretch of another k is an exploration run only where
    the table says the reference k at every B of the run and its reference: a stretch the table
    itself runs (B crossing an edge inside a bucket) has its reference at other batch sizes,
    and pairing it would measure the batch sizes, not the k's."""
    segs = _segments(steps)
    out = []
    for before, run, after in zip(segs, segs[1:], segs[2:]):
        if before.k != after.k or run.k == before.k or run.first in done:
            continue
        if run.first - before.last > 2 or after.first - run.last > 2:
            continue  # steps lost around the run: no pair across the gap
        m = len(run.steps)
        if not MIN_RUN_STEPS <= m <= MAX_RUN_STEPS:
            continue
        if len(before.steps) < m or len(after.steps) < m:
            # the after-side still being served, or not a short run inside another k's steps
            # (the table's steps between two runs)
            continue
        bucket = band(int(np.median([s.batch_size for s in run.steps])))
        around = [s for s in (*before.steps[-m:], *after.steps[:m]) if band(s.batch_size) == bucket]
        mine = [s for s in run.steps if band(s.batch_size) == bucket]
        if len(around) < m // 2 or len(mine) < MIN_RUN_STEPS:
            continue  # the load moved across buckets during the run
        if table_k is not None and not all(
                0 < s.batch_size < len(table_k) and table_k[s.batch_size] == before.k
                for s in (*mine, *around)):
            continue  # the table runs this k here: an edge crossed, not an exploration run
        window = _busy([*mine, *around])
        mine = [s for s in mine if s in window]
        around = [s for s in around if s in window]
        if not mine or not around:
            continue
        log_ratio, run_steps, ref_steps = _at_shared_batch_sizes(mine, around)
        if min(run_steps, ref_steps) < MIN_RUN_STEPS:
            continue  # a drain's run at other batch sizes than its references: B, not k, differs
        out.append(Pair(bucket, run.k, before.k, log_ratio, run_steps, run.first))
    return out


def settled_runs(steps: Sequence[Step], table_k: Sequence[int]) -> list[tuple[int, set[int]]]:
    """(first seq, buckets) of every exploration run in ``steps`` whose pair has had its chance:
    a stretch of MIN_RUN_STEPS..MAX_RUN_STEPS steady steps at another k than the table's where
    it began, with at least as many steady steps after it (what pairs_in waits for); the
    buckets it ran MIN_RUN_STEPS steps in (where a pair could have formed: a drain's run passes
    through several). The first stretch may be cut by the window: skipped."""
    segs = _segments(steps)
    after = sum(len(s.steps) for s in segs[1:])  # steps after the current run (once it is taken off)
    out = []
    for run in segs[1:]:
        m, B = len(run.steps), run.steps[0].batch_size
        after -= m
        if not MIN_RUN_STEPS <= m <= MAX_RUN_STEPS or not 0 < B < len(table_k) or table_k[B] == run.k:
            continue
        if after >= m:
            held = Counter(band(s.batch_size) for s in run.steps)
            out.append((run.first, {b for b, n in held.items() if n >= MIN_RUN_STEPS}))
    return out


@dataclass(slots=True)
class MeasuredGoodput:
    """Per (bucket, k): steady decode steps, seconds, emitted tokens, Σ B; per (bucket, k, k'):
    the paired log ratios; per bucket: the steps served since the last ``mark``."""

    cells: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    # per (bucket, k, k'): (log ratio, steps, order); order numbers every pair stored, so the two
    # directions of one comparison interleave as their runs ran (eq. LRV needs the sequence)
    pairs: dict[tuple[int, int, int], deque[tuple[float, int, int]]] = field(default_factory=dict)
    num_pairs: int = 0
    served: dict[int, int] = field(default_factory=dict)
    last_seq: int = 0
    tail: list[Step] = field(default_factory=list)
    done: set[int] = field(default_factory=set)
    measuring: bool = False   # a step with `emitted` was read: the plugin measures goodput
    variance_factor: float = 1.0  # widens eq. LRV further (1: as estimated)
    # a duel run pairs only where the load stays near one bucket for the run and its two
    # references: the buckets that, since the last ``mark``, held at least PAIRABLE_SHARE of
    # some ``window`` consecutive steps
    window: int = 48          # a duel run and as many steps on each side (3 x --duel-run)
    recent: deque[int] = field(default_factory=deque)   # the last ``window`` steps' buckets
    in_recent: Counter[int] = field(default_factory=Counter)
    held: set[int] = field(default_factory=set)
    lined_up: set[int] = field(default_factory=set)  # held LINED_UP_SHARE of some window
    # where a step came after a run's length of the table's k there: the plugin starts a run
    # only there (vllm_patch/duel.py); with no table to tell by, every served bucket
    startable: set[int] = field(default_factory=set)
    streak: tuple[int, int] = (-1, 0)  # (k, steps in a row at it) up to the last step read
    # per bucket since the last ``mark``: the runs that ran there and whose pair had its chance
    # and did not form (settled_runs), and whether any run paired there
    unpaired: Counter[int] = field(default_factory=Counter)
    paired: set[int] = field(default_factory=set)
    settled: set[int] = field(default_factory=set)  # first seqs of runs already judged
    # per bucket, the seq of the last push that changed it (0: all of them): a run that began
    # before it ran under another table, which the ring's steps are no longer judged by
    counted_from: dict[int, int] = field(default_factory=dict)

    def ingest(self, steps: Sequence[Step], table_k: Sequence[int] | None = None) -> list[Pair]:
        """Add the ring's steps newer than the last seen (a six-field step, from a plugin that
        predates `emitted`, is passed over); the pairs found. ``table_k``: the engine's dense
        table (see pairs_in)."""
        fresh = [s for s in steps if s.seq > self.last_seq]
        if fresh:
            self.last_seq = fresh[-1].seq
        new = [s for s in fresh if s.emitted is not None]
        if not new:
            return []
        self.measuring = True
        for s in new:
            bucket = band(s.batch_size)
            self.served[bucket] = self.served.get(bucket, 0) + 1
            self.recent.append(bucket)
            self.in_recent[bucket] += 1
            if len(self.recent) > self.window:
                self.in_recent[self.recent.popleft()] -= 1
            if self.in_recent[bucket] >= PAIRABLE_SHARE * self.window:
                self.held.add(bucket)
            if self.in_recent[bucket] >= LINED_UP_SHARE * self.window:
                self.lined_up.add(bucket)
            # the plugin starts a run after a run's length in a row at the table's k
            if table_k is None or (0 < s.batch_size < len(table_k) and self.streak[1] >= self.window // 3
                                   and self.streak[0] == table_k[s.batch_size]):
                self.startable.add(bucket)
            k, n = self.streak
            self.streak = (k, n + 1) if s.k_drafted == k else (s.k_drafted, 1)
            # the cells speak for decode steps, what the model describes: a step that also
            # prefilled (a burst's ramp-up, through the same buckets) costs every k alike
            decode = s.tokens <= s.batch_size * (1 + s.k_verified)
            if s.k_verified == s.k_drafted and decode:
                cell = self.cells.setdefault((bucket, s.k_drafted), [0.0, 0.0, 0.0, 0.0])
                cell[0] += 1
                cell[1] += _seconds(s)
                cell[2] += s.emitted or 0
                cell[3] += s.batch_size
        # pair over everything new before cutting the tail: a first read or a re-read after a
        # restart brings up to 8192 steps at once
        window = [*self.tail, *new]
        found = pairs_in(window, self.done, table_k)
        self.tail = window[-TAIL_STEPS:]
        for p in found:
            self.pairs.setdefault((p.bucket, p.k, p.ref), deque(maxlen=KEEP_PAIRS)).append(
                (p.log_ratio, p.steps, self.num_pairs))
            self.num_pairs += 1
            self.done.add(p.first)
            self.paired.add(p.bucket)
        for first, buckets in settled_runs(window, table_k) if table_k is not None else ():
            if first in self.settled:
                continue
            self.settled.add(first)
            for bucket in buckets if first not in self.done else ():
                if first > max(self.counted_from.get(0, 0), self.counted_from.get(bucket, 0)):
                    self.unpaired[bucket] += 1
        oldest = self.tail[0].seq
        self.done = {seq for seq in self.done if seq >= oldest}
        self.settled = {seq for seq in self.settled if seq >= oldest}
        return found

    def restart(self, since: int = 0) -> None:
        """A new engine run (its seq starts again from 1), or reading from step ``since`` on;
        what was measured stays."""
        self.last_seq, self.tail, self.done, self.settled = since, [], set(), set()
        self.counted_from = {0: since}
        self.recent.clear()
        self.in_recent.clear()
        self.streak = (-1, 0)

    def pause(self) -> None:
        """The ring cannot be read: the model decides everywhere until a step is read again."""
        self.measuring = False

    def forget(self) -> None:
        """A change of traffic: what was measured described the old traffic."""
        self.cells.clear()
        self.pairs.clear()
        self.served.clear()
        self.held.clear()
        self.lined_up.clear()
        self.startable.clear()
        self.unpaired.clear()
        self.paired.clear()

    def mark(self, changed: Iterable[int] | None = None) -> None:
        """A push: `served` and `held` count again from here at the buckets it ``changed`` (None:
        all); elsewhere the table did not change, and resetting them would keep a bucket a burst
        passes through from ever gathering min_served steps between two pushes."""
        if changed is None:
            self.counted_from = {0: self.last_seq}
            self.served.clear()
            self.held.clear()
            self.lined_up.clear()
            self.startable.clear()
            self.unpaired.clear()
            self.paired.clear()
            return
        for bucket in changed:
            self.counted_from[bucket] = self.last_seq
            self.served.pop(bucket, None)
            self.held.discard(bucket)
            self.lined_up.discard(bucket)
            self.startable.discard(bucket)
            self.unpaired.pop(bucket, None)
            self.paired.discard(bucket)

    def pairable(self) -> set[int]:
        """The buckets where a duel can pair at all since the last push that changed them: some
        step of theirs had PAIRABLE_SHARE of the last ``window`` steps in them (a burst holds
        its plateau's bucket and drains through the others in a few steps each: those never
        pair), and they paired, or they held LINED_UP_SHARE of some window (a slow drain holds
        a bucket for a third of one: a run and its references never line up, and since the
        plugin starts a run only after its reference, one may never start there), some step
        there came after a run's length of the table's k (a range squeezed between two of
        another k is entered and left under theirs by the hysteresis: the plugin never starts
        a run there, so none ever has its chance) and fewer than UNPAIRED_RUNS runs there had
        their chance to pair and did not."""
        return {b for b in self.held if b in self.paired or (
            b in self.lined_up and b in self.startable and self.unpaired[b] < UNPAIRED_RUNS)}

    def rate(self, bucket: int, k: int) -> tuple[float, float, float] | None:
        """(tokens per engine-second, steady steps, their mean B) of one cell, or None."""
        cell = self.cells.get((bucket, k))
        if not cell or cell[1] <= 0 or cell[0] <= 0:
            return None
        return cell[2] / cell[1], cell[0], cell[3] / cell[0]

    def power(self, alpha: float, max_pairs: int) -> list[PairPower]:
        """Per compared (bucket, k, ref) with enough pairs for eq. LRV: its smallest gain at
        ``max_pairs`` pairs (at least the pairs it has)."""
        out = []
        for bucket, k, ref in self._comparisons():
            ordered = self._ordered(bucket, k, ref)
            if len(ordered) < MIN_PAIRS:
                continue
            x = np.asarray([v for _, v, _ in ordered])
            sd = math.sqrt(float(long_run_variance(x)) * self.variance_factor)
            if math.isfinite(sd):
                out.append(PairPower(bucket, k, ref, len(x), sd,
                                     smallest_gain(sd, max(max_pairs, len(x)), alpha)))
        return out

    def _comparisons(self) -> list[tuple[int, int, int]]:
        """(bucket, k, ref) of every comparison with pairs, each once (k < ref)."""
        return sorted({(b, min(k, r), max(k, r)) for b, k, r in self.pairs})

    def _ordered(self, bucket: int, k: int, ref: int) -> list[tuple[int, float, int]]:
        """(order, log ratio k over ref, steps) of every pair of the two, either way round, in
        the order their runs ran."""
        return sorted([(o, v, n) for v, n, o in self.pairs.get((bucket, k, ref), ())]
                      + [(o, -v, n) for v, n, o in self.pairs.get((bucket, ref, k), ())])

    def so_far(self, bucket: int, k: int, ref: int) -> tuple[int, float]:
        """k over ref at ``bucket``: the pairs and their mean log ratio (0 with none)."""
        x = [v for _, v, _ in self._ordered(bucket, k, ref)]
        return len(x), (sum(x) / len(x) if x else 0.0)

    def compared(self, min_pairs: int) -> list[tuple[int, int, int, int, float]]:
        """(bucket, k, ref, pairs, mean log ratio of k over ref) of every comparison with at least
        ``min_pairs`` pairs, each once (k < ref)."""
        out = []
        for bucket, k, ref in self._comparisons():
            n, mean = self.so_far(bucket, k, ref)
            if n >= min_pairs:
                out.append((bucket, k, ref, n, mean))
        return out

    def compare(self, bucket: int, k: int, ref: int, alpha: float,
                early: bool = False) -> PairedComparison | None:
        """Goodput of k over ref at ``bucket`` from every pair of the two (either way round), in
        the order their runs ran; from EARLY_PAIRS pairs with ``early`` (eq. EARLY)."""
        ordered = self._ordered(bucket, k, ref)
        if len(ordered) < (EARLY_PAIRS if early else MIN_PAIRS):
            return None
        x = np.asarray([v for _, v, _ in ordered])
        mean, low, high = (float(a) for a in paired_interval(x, alpha, self.variance_factor))
        return PairedComparison(bucket, k, ref, math.exp(mean), math.exp(low), math.exp(high),
                          len(x), sum(n for *_, n in ordered))
