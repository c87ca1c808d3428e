"""Descriptive figures of a do-no-harm record beside its verdict (pure): what the README says
about a run besides summary.json's ratio, computed here instead of by one-off scripts.

Per traffic shape, over the blocks that ran both arms (benchmarks/noharm_summary.paired):

- for the client's output throughput, mean TTFT and mean TPOT, and the engine's steps per
  generated token: the paired ratio sidecar / table twice, as summary.json's t-interval and as
  a Hodges-Lehmann estimate with its signed-rank interval (benchmarks/inference.py), which a
  few wild blocks cannot widen as they widen the t: when both are as wide the noise is broad;
- steps per token above 1 with the same tokens: the sidecar's arm ran smaller batches or
  shorter drafts for the same work;
- short drafts, per arm: the share of its drafting request-steps that drafted fewer than the
  engine's K positions (the plugin's counters: drafted at position K over position 1), the
  table's own ranges below K included; the sidecar arm's excess over the table arm is what
  its duels and rotation ran at a smaller k (not what they ran at k=0, which drafts nothing).

    python -m benchmarks.noharm_of_field --field F --figures DIR/figures.json
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
import numpy as np
from pydantic import BaseModel, ConfigDict

from benchmarks.arm_run import ArmRun, BlockRun
from benchmarks.client_record import ClientRecord
from benchmarks.inference import hodges_lehmann
from benchmarks.noharm_summary import (ALPHA, ARMS, RatioCI, arm_throughput, mean_of, paired,
                                       ratio_interval)


class Paired(BaseModel):
    """One quantity's paired ratio sidecar / table: the t-interval and the rank-based one."""

    model_config = ConfigDict(frozen=True)

    t: RatioCI
    hodges_lehmann: RatioCI


class ShapeFigures(BaseModel):
    model_config = ConfigDict(frozen=True)

    shape: str
    blocks: int
    throughput: Paired
    mean_ttft: Paired
    mean_tpot: Paired
    steps_per_token: Paired
    short_drafts: dict[str, float | None]   # per arm, over its blocks' runs pooled


class NoharmFigures(BaseModel):
    model_config = ConfigDict(frozen=True)

    # the field run's policies read as (sidecar, table): the arms' names in ``short_drafts``
    reading: list[str] | None
    shapes: list[ShapeFigures]
    ci_level: float
    statistic: str


def steps_per_token(run: ArmRun) -> float:
    steps = sum(p.engine.steps or 0 for p in run.phases)
    tokens = sum(p.engine.generated_tokens for p in run.phases)
    return steps / tokens if steps > 0 and tokens > 0 else math.nan


def short_drafts(runs: Sequence[ArmRun]) -> float | None:
    """Request-steps that drafted position 1 but not position K, over those that drafted 1."""
    first = sum(p.engine.drafted_per_pos[0] for r in runs for p in r.phases
                if p.engine.drafted_per_pos)
    last = sum(p.engine.drafted_per_pos[-1] for r in runs for p in r.phases
               if p.engine.drafted_per_pos)
    return round(1.0 - last / first, 5) if first > 0 else None


def rank_interval(pairs: Sequence[tuple[ArmRun, ArmRun]], of: Callable[[ArmRun], float],
                  alpha: float = ALPHA) -> RatioCI:
    logs = [math.log(of(s) / of(t)) for t, s in pairs if of(t) > 0 and of(s) > 0]
    if not logs:
        return RatioCI(ratio=None, ci=[None, None], n=0)
    mid, low, high = hodges_lehmann(np.asarray(logs), alpha)
    return RatioCI(ratio=round(math.exp(mid), 4),
                   ci=[None if low is None else round(math.exp(low), 4),
                       None if high is None else round(math.exp(high), 4)], n=len(logs))


def both(pairs: Sequence[tuple[ArmRun, ArmRun]], of: Callable[[ArmRun], float]) -> Paired:
    return Paired(t=ratio_interval(pairs, of), hodges_lehmann=rank_interval(pairs, of))


def shape_figures(runs: Sequence[BlockRun], shape: str) -> ShapeFigures:
    pairs = paired(runs, shape)
    return ShapeFigures(
        shape=shape, blocks=len(pairs), throughput=both(pairs, arm_throughput),
        mean_ttft=both(pairs, mean_of("mean_ttft_ms")),
        mean_tpot=both(pairs, mean_of("mean_tpot_ms")),
        steps_per_token=both(pairs, steps_per_token),
        short_drafts={arm: short_drafts([p[i] for p in pairs]) for i, arm in enumerate(ARMS)})


def figures(record: ClientRecord, reading: tuple[str, str] | None = None) -> NoharmFigures:
    """The figures of a do-no-harm record (noharm.json, or a field record through
    noharm_summary.from_field with the (sidecar, table) policies ``reading``)."""
    return NoharmFigures(
        reading=list(reading) if reading else None,
        shapes=[shape_figures(record.runs, s.name) for s in record.meta.shapes],
        ci_level=1 - ALPHA,
        statistic="per-block ratios sidecar / table: geometric mean with Student's t-interval "
                  "on their logs, and Hodges-Lehmann estimate with its signed-rank interval")
