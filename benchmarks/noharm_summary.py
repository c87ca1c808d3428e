"""The do-no-harm bench's figures from its raw runs (pure): noharm.json -> summary.json.

Per traffic shape, over its blocks (each block ran the shape once with the table alone and once
with the sidecar, in alternating order, on the same requests):

- ratio: the geometric mean of the per-block ratios sidecar / table of the client's output
  throughput (tokens over the run's duration, summed over the shape's runs), its 95%
  Student's t-interval on the logs (benchmarks/inference.py: exact for normal log ratios at
  any number of blocks). The target holds at a shape when the interval's lower end is at least
  TARGET: "meets"; "misses" when its upper end is below; otherwise "undecided".
- sidecar_cpu_share: the sidecar's CPU seconds per second awake, from /proc (on a host whose
  cores the engine fills, what it takes from the engine);
- pushes, minutes, false_changes: the sidecar's pushes, the minutes it ran (thawed) and the
  traffic changes it detected in that shape's measured arms. Every block serves the same
  shapes from the same distribution, so nothing changes from block to block: a detected
  change is false, and the pushes are what a sidecar does when nothing changed (target: at
  most PUSHES_PER_10_MIN).

Latency beside throughput: the per-block ratios of mean TPOT and TTFT (sidecar / table, below 1
is faster) with their intervals, and each arm's medians over blocks of the client's p50/p99.
The engine's own counter gives a second throughput ratio (its generated tokens over the
client's duration), a cross-check of the client's.

The field bench's record reads the same way when its policies hold a sidecar and the table it
starts from (`from_field`): on a GPU one field run gives both
(its shell: benchmarks/noharm_of_field.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from benchmarks.arm_run import ArmRun, BlockRun
from benchmarks.client_record import ClientRecord, FieldRecord
from benchmarks.inference import log_ratio_interval
from benchmarks.policies import SIDECAR_POLICIES

TARGET = 0.995            # table + sidecar >= table alone - 0.5%
PUSHES_PER_10_MIN = 1.0   # when nothing changed
ALPHA = 0.05
ARMS = ("table", "sidecar")
MIN_STEPS = 50            # an arm's run shorter than this many engine steps is flagged
LATENCY = ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "p50_itl_ms", "p99_itl_ms")

Run = BlockRun


def arm_throughput(run: ArmRun) -> float:
    """Output tokens over the client's durations, summed over the shape's runs (one run but
    for the ramp's staircase): a run's output_throughput when there is one."""
    tokens = sum(p.client.total_output_tokens for p in run.phases)
    seconds = sum(p.client.duration for p in run.phases)
    return tokens / seconds if seconds > 0 else math.nan


def engine_throughput(run: ArmRun) -> float:
    tokens = sum(p.engine.generated_tokens for p in run.phases)
    seconds = sum(p.client.duration for p in run.phases)
    return tokens / seconds if seconds > 0 else math.nan


def mean_of(field: str) -> Callable[[ArmRun], float]:
    """A latency mean over the shape's runs, weighted by their completed requests."""
    def get(run: ArmRun) -> float:
        done = [(getattr(p.client, field), p.client.completed) for p in run.phases]
        n = sum(c for _, c in done)
        return sum(v * c for v, c in done) / n if n else math.nan
    return get


Verdict = Literal["meets", "misses", "undecided", "too_few_blocks"]


class Ratio(BaseModel):
    """A paired ratio (geometric mean over blocks) and its interval; None where unmeasured."""

    model_config = ConfigDict(frozen=True)

    ratio: float | None
    ci: list[float | None]


class RatioCI(Ratio):
    n: int                    # blocks with both arms measured


class ShortRun(BaseModel):
    model_config = ConfigDict(frozen=True)

    block: int
    shape: str
    arm: str
    steps: int


def short_runs(runs: Sequence[Run]) -> list[ShortRun]:
    """Runs of fewer than MIN_STEPS engine steps (kept in the figures, named here); a run
    without the plugin's counters (no speculation) has no step count to judge."""
    out = []
    for r in runs:
        if all(p.engine.steps is None for p in r.phases):
            continue
        steps = sum(p.engine.steps or 0 for p in r.phases)
        if steps < MIN_STEPS:
            out.append(ShortRun(block=r.block, shape=r.shape, arm=r.arm, steps=steps))
    return out


def paired(runs: Sequence[Run], shape: str) -> list[tuple[Run, Run]]:
    """(table, sidecar) of each block that ran both arms of `shape`, in block order."""
    by_block: dict[tuple[int, int], dict[str, Run]] = {}
    for r in runs:
        if r.shape == shape:
            by_block.setdefault((r.part, r.block), {})[r.arm] = r
    return [(b["table"], b["sidecar"]) for _, b in sorted(by_block.items())
            if "table" in b and "sidecar" in b]


def ratio_interval(pairs: Sequence[tuple[ArmRun, ArmRun]], of: Callable[[ArmRun], float],
                   alpha: float = ALPHA) -> RatioCI:
    """Geometric mean of of(sidecar) / of(table) over blocks and its (1 - alpha) t-interval;
    None figures below two blocks (no spread to build an interval on)."""
    logs = [math.log(of(s) / of(t)) for t, s in pairs if of(t) > 0 and of(s) > 0]
    mid, ci = log_ratio_interval(logs, alpha)
    return RatioCI(ratio=mid, ci=ci, n=len(logs))


def verdict(ci: Sequence[float | None], target: float = TARGET) -> Verdict:
    lo, hi = ci
    if lo is None or hi is None:
        return "too_few_blocks"
    return "meets" if lo >= target else "misses" if hi < target else "undecided"


class SidecarCounts(BaseModel):
    """What the sidecar did over some of its arms."""

    model_config = ConfigDict(frozen=True)

    pushes: int
    minutes: float
    false_changes: int        # traffic changes detected where nothing changed
    rollbacks: int
    pushes_per_10min: float | None
    cpu_share: float | None   # its CPU seconds per awake second (None: records without them)


def sidecar_counts(arms: Sequence[Run]) -> SidecarCounts:
    """Pushes, thawed minutes, detected changes and rollbacks over sidecar arms."""
    seen = [r.sidecar for r in arms if r.sidecar is not None]
    pushes = sum(s.pushes for s in seen)
    minutes = sum(s.minutes for s in seen)
    timed = [s for s in seen if s.cpu_s is not None]
    awake_s = 60 * sum(s.minutes for s in timed)
    return SidecarCounts(pushes=pushes, minutes=round(minutes, 2),
                         false_changes=sum(s.traffic_changes for s in seen),
                         rollbacks=sum(s.rollbacks for s in seen),
                         pushes_per_10min=round(10 * pushes / minutes, 3) if minutes > 0 else None,
                         cpu_share=round(sum(s.cpu_s or 0.0 for s in timed) / awake_s, 4)
                         if awake_s > 0 else None)


def latency(arms: Sequence[Run]) -> dict[str, float | None]:
    """Median over blocks of each client latency percentile (runs pooled by requests)."""
    return {f: median([mean_of(f)(r) for r in arms]) for f in LATENCY}


def acceptance_length(arms: Sequence[Run]) -> float | None:
    got = [p.client.spec_decode_acceptance_length for r in arms for p in r.phases]
    return median([g for g in got if g is not None])


def median(values: Sequence[float]) -> float | None:
    kept = [v for v in values if not math.isnan(v)]
    return round(statistics.median(kept), 3) if kept else None


class ShapeSummary(BaseModel):
    """One traffic shape's figures: sidecar over table, paired by block (see the module)."""

    model_config = ConfigDict(frozen=True)

    shape: str
    blocks: int
    ratio: float | None       # of the client's output throughput
    ci: list[float | None]
    pushes: int
    minutes: float
    false_changes: int
    verdict: Verdict
    pushes_per_10min: float | None
    rollbacks: int
    sidecar_cpu_share: float | None
    engine_ratio: Ratio
    mean_tpot_ratio: Ratio
    mean_ttft_ratio: Ratio
    tokens_per_s: dict[str, float | None]               # per arm, median over blocks
    latency_ms: dict[str, dict[str, float | None]]      # per arm, LATENCY's medians over blocks
    acceptance_length: dict[str, float | None]          # per arm, median over runs


class NoharmSummary(BaseModel):
    """summary.json (or a field run's noharm-summary.json): every shape, the verdict, what
    the sidecar did when measured and while warming up."""

    model_config = ConfigDict(frozen=True)

    shapes: list[ShapeSummary]
    target: float
    ci_level: float
    pushes_target_per_10min: float
    verdict: Verdict
    measured: SidecarCounts
    warmup: SidecarCounts
    blocks: int
    short_runs: list[ShortRun]
    parts: int
    statistic: str
    command: str | None


def shape_summary(runs: Sequence[Run], shape: str) -> ShapeSummary:
    pairs = paired(runs, shape)
    tput = ratio_interval(pairs, arm_throughput)
    counts = sidecar_counts([s for _, s in pairs])
    return ShapeSummary(
        shape=shape, blocks=len(pairs), ratio=tput.ratio, ci=tput.ci,
        pushes=counts.pushes, minutes=counts.minutes, false_changes=counts.false_changes,
        verdict=verdict(tput.ci), pushes_per_10min=counts.pushes_per_10min,
        rollbacks=counts.rollbacks, sidecar_cpu_share=counts.cpu_share,
        engine_ratio=_short(ratio_interval(pairs, engine_throughput)),
        mean_tpot_ratio=_short(ratio_interval(pairs, mean_of("mean_tpot_ms"))),
        mean_ttft_ratio=_short(ratio_interval(pairs, mean_of("mean_ttft_ms"))),
        tokens_per_s={arm: median([arm_throughput(p[i]) for p in pairs])
                      for i, arm in enumerate(ARMS)},
        latency_ms={arm: latency([p[i] for p in pairs]) for i, arm in enumerate(ARMS)},
        acceptance_length={arm: acceptance_length([p[i] for p in pairs])
                           for i, arm in enumerate(ARMS)})


def _short(r: RatioCI) -> Ratio:
    return Ratio(ratio=r.ratio, ci=r.ci)


def overall(runs: Sequence[Run], shapes: Sequence[ShapeSummary], pushes: float,
            minutes: float) -> Verdict:
    """meets: every shape's interval at or above the target (each at 95%: all must hold, an
    intersection-union test) and pushes within theirs; misses: a shape wholly below at the
    95% split over the shapes (Bonferroni: any one may, so the family's false rate stays
    within 5%), or more pushes than the target allows; otherwise undecided."""
    verdicts = [s.verdict for s in shapes]
    rate = 10 * pushes / minutes if minutes > 0 else None
    if not shapes or "too_few_blocks" in verdicts or rate is None:
        return "too_few_blocks"
    split = ALPHA / len(shapes)
    below = [verdict(ratio_interval(paired(runs, s.shape), arm_throughput, split).ci)
             == "misses" for s in shapes]
    if any(below) or rate > PUSHES_PER_10_MIN:
        return "misses"
    return "meets" if all(v == "meets" for v in verdicts) else "undecided"


def summary(record: ClientRecord) -> NoharmSummary:
    """The figures of noharm.json's record (or a field record read by from_field)."""
    runs = record.runs
    names = [s.name for s in record.meta.shapes]
    shapes = [shape_summary(runs, name) for name in names]
    measured = sidecar_counts([r for r in runs if r.arm == "sidecar"])
    return NoharmSummary(
        shapes=shapes, target=TARGET, ci_level=1 - ALPHA,
        pushes_target_per_10min=PUSHES_PER_10_MIN,
        verdict=overall(runs, shapes, measured.pushes, measured.minutes),
        measured=measured,
        warmup=sidecar_counts([r for r in record.warmup if r.arm == "sidecar"]),
        blocks=max((s.blocks for s in shapes), default=0),
        short_runs=short_runs(runs),
        parts=len(record.meta.parts),
        statistic="geometric mean of per-block ratios sidecar / table of the client's "
                  "output throughput; 95% Student's t-interval on their logs",
        command=record.meta.command)


def summarize(record: ClientRecord) -> dict[str, Any]:
    """summary.json as written: `summary(record)` in JSON form."""
    return summary(record).model_dump(mode="json")


def from_field(record: FieldRecord, sidecar: str = "sidecar-from-tuned",
               against: str | None = None) -> FieldRecord:
    """A field bench's record (benchmarks/field.py) as this bench's: the `sidecar` policy's runs
    are the sidecar arm, those of `against` (default: the table it starts from) the table arm,
    other policies left out. KeyError: `sidecar` is not a sidecar policy."""
    arms = {against or SIDECAR_POLICIES[sidecar]: "table", sidecar: "sidecar"}

    def kept(rows: list[BlockRun]) -> list[BlockRun]:
        return [r.model_copy(update={"arm": arms[r.arm]}) for r in rows if r.arm in arms]
    return record.model_copy(update={"runs": kept(record.runs), "warmup": kept(record.warmup)})

