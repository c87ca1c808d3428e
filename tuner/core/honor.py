"""Does the engine honor the table? What its steps verified, and what drafting cost, against what
the table asked (pure).

vLLM drafts at the end of step t with the k the scheduler chose for t (the table's k at B_t) and
verifies those drafts at step t+1. The plugin's ring keeps every step as (seq, B, k_verified,
k_drafted, seconds, tokens, ...): k_drafted is the scheduler's k, i.e. what the table asked, and
tokens is what the step scheduled. On a steady decode-only step every request carries its one
sampled token plus the drafts it verifies, so

    d = tokens / B - 1        drafts verified per request (the engine's own count)

A cell (table, B) is *honored* when d <= k + tolerance (ngram may propose fewer than k: no match;
it never proposes more), *ignored* when k < K and d >= K - tolerance (the engine verified its
startup maximum whatever the table said), *partial* otherwise.

That is the verification side. What the drafter drafted does not always reach the scheduler:
under async scheduling (vLLM's default for EAGLE) the scheduler reserves placeholders of the
table's k, so d follows the table even when the drafter runs K steps every time (vLLM 0.26's
V2 runner never reads the scheduler's k). Drafting is therefore timed: the same (B, k) on a second
engine started with a smaller K_ref. A drafter that drafts k does the same work on both; one that
drafts its startup K makes the K engine's step longer by K - K_ref drafter forwards.

Legend: B batch size (requests a step scheduled), k the table's draft length at B, K the engine's
num_speculative_tokens, d verified drafts per request, T step time (ms).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from tuner.core.admin_api import StatsReply, Step
from tuner.core.honor_finding import finding
from tuner.core.intervals import bootstrap_medians
from tuner.core.table import Table

__all__ = ["Burst", "Counts", "DraftingCheck", "EdgePlan", "HonorCell", "HonorCheck", "check",
           "compare_drafting", "counts_between", "decode_steps", "edge_plan", "judge", "measured_cell",
           "sweep_cell", "verified_drafts"]

Verdict = Literal["honored", "ignored", "partial", "unmeasured"]
Overall = Literal["honored", "ignored", "partial", "unknown"]
Drafted = Literal["startup_k", "table_k", "unclear", "unmeasured"]
Row = Step  # a ring row of the plugin (tuner/core/admin_api.Step)

TOLERANCE = 0.25  # drafts per request: steps that carried a prompt's prefill, budget trims
MARGIN = 0.01  # a drafting cost under 1% of a step is not told apart from two engines' noise


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Counts(_Frozen):
    """The plugin's exact counters over some steps (differences of two /v1/stats reads)."""

    engine_steps_per_k: dict[int, int]  # steps per scheduled k (what the table asked)
    drafted_per_pos: list[int]          # request-steps offered k > position
    request_steps: int                  # request-steps that verified (decodes)
    verified: int                       # drafts those request-steps verified


def counts_between(before: StatsReply, after: StatsReply) -> Counts:
    """What the steps between two reads counted; the histogram's rows are (drafted, accepted,
    request-steps) with drafted the drafts a request verified."""
    per_k = {k: n - before.engine_steps_per_k.get(k, 0) for k, n in after.engine_steps_per_k.items()}
    pos = [a - b for a, b in zip(after.drafted_per_pos,
                                 before.drafted_per_pos + [0] * len(after.drafted_per_pos))]
    old = {(d, a): n for d, a, n in before.histogram}
    new = [(d, n - old.get((d, a), 0)) for d, a, n in after.histogram]
    return Counts(engine_steps_per_k={k: n for k, n in per_k.items() if n}, drafted_per_pos=pos,
                  request_steps=sum(n for _, n in new), verified=sum(d * n for d, n in new))


def decode_steps(rows: Iterable[Row], B: int, K: int) -> list[Row]:
    """Steady decode-only steps at exactly B: they verified and drafted the same k (not the step
    after a swap), and carried at most B(K+1) tokens (a step holding a prompt's prefill carries
    more, for prompts longer than K+1 tokens). Whatever k the scheduler used: a step at another
    k than the table's is the table not followed, and counts against it."""
    return [r for r in rows
            if r.batch_size == B and r.k_verified == r.k_drafted and r.tokens <= B * (K + 1)]


def verified_drafts(rows: Iterable[Row], B: int, K: int) -> list[float]:
    """d = tokens / B - 1 per steady decode-only step at B."""
    return [r.tokens / B - 1 for r in decode_steps(rows, B, K)]


def judge(d: float | None, k: int, K: int, tolerance: float = TOLERANCE) -> Verdict:
    """The cell's verdict from its verified drafts per request d (None: no step measured)."""
    if d is None:
        return "unmeasured"
    if d <= k + tolerance:
        return "honored"
    return "ignored" if k < K and d >= K - tolerance else "partial"


@dataclass(frozen=True, slots=True)
class Burst:
    """One run of B requests under one table: its ring rows and the counters around it."""

    rows: Sequence[Row]
    counts: Counts | None = None


class HonorCell(_Frozen):
    """One table at one batch size: what the table asked, what the steps verified and took."""

    engine_K: int                 # the engine's num_speculative_tokens
    table: list[list[int]]
    B: int
    k: int                        # the table's k at B
    steps: int                    # steady decode-only steps at B (the tuner's cells: its samples)
    drafts: float | None          # d, median over those steps
    step_ms: float | None         # T, median over those steps
    off_table: int = 0            # of those steps, how many the scheduler ran at another k
    verdict: Verdict
    counts: Counts | None = None  # the plugin's counters over the cell's bursts
    steps_ms: list[list[float]] = []  # per burst (clusters for the drafting comparison)


def _sum_counts(counts: Sequence[Counts]) -> Counts | None:
    if not counts:
        return None
    per_k: dict[int, int] = {}
    for c in counts:
        for k, n in c.engine_steps_per_k.items():
            per_k[k] = per_k.get(k, 0) + n
    width = max(len(c.drafted_per_pos) for c in counts)
    pos = [sum(c.drafted_per_pos[i] for c in counts if i < len(c.drafted_per_pos)) for i in range(width)]
    return Counts(engine_steps_per_k=per_k, drafted_per_pos=pos,
                  request_steps=sum(c.request_steps for c in counts),
                  verified=sum(c.verified for c in counts))


def measured_cell(bursts: Sequence[Burst], table: Table, B: int, K: int,
                  tolerance: float = TOLERANCE) -> HonorCell:
    """The cell of the bursts run under ``table`` at B on an engine of num_speculative_tokens K."""
    k = table.k_at(B, K)
    steps = [decode_steps(b.rows, B, K) for b in bursts]
    flat = [r for s in steps for r in s]
    drafts = [r.tokens / B - 1 for r in flat]
    d = round(statistics.median(drafts), 4) if drafts else None
    return HonorCell(engine_K=K, table=table.to_list(), B=B, k=k, steps=len(flat), drafts=d,
                     step_ms=round(statistics.median(r.seconds for r in flat) * 1e3, 4) if flat else None,
                     off_table=sum(1 for r in flat if r.k_drafted != k), verdict=judge(d, k, K, tolerance),
                     counts=_sum_counts([b.counts for b in bursts if b.counts is not None]),
                     steps_ms=[[round(r.seconds * 1e3, 4) for r in s] for s in steps if s])


def sweep_cell(B: int, k: int, K: int, max_num_seqs: int, drafts: Sequence[float], steps: int,
               step_ms: float | None, tolerance: float = TOLERANCE) -> HonorCell:
    """A cell of the tuner's sweep (one-range table [[1, max_num_seqs, k]]), from its samples'
    medians of d (``steps``: how many samples have one)."""
    d = round(statistics.median(drafts), 4) if drafts else None
    return HonorCell(engine_K=K, table=[[1, max_num_seqs, k]], B=B, k=k, steps=steps, drafts=d,
                     step_ms=step_ms, verdict=judge(d, k, K, tolerance))


@dataclass(frozen=True, slots=True)
class EdgePlan:
    """A table with an edge at E = B_below: K up to it, ``k_above`` after it."""

    table: Table
    B_below: int
    B_above: int


def edge_plan(batch_sizes: Sequence[int], K: int, max_num_seqs: int,
              edge: int | None = None) -> EdgePlan | None:
    """[[1, E, K], [E+1, N, 1]] (k=0 above when K=1) measured at the largest batch size <= E and
    the smallest > E. E defaults to the middle batch size; None when no batch size lies above it."""
    sizes = sorted(set(batch_sizes))
    E = edge if edge is not None else sizes[(len(sizes) - 1) // 2]
    below = [b for b in sizes if b <= E]
    above = [b for b in sizes if b > E]
    if not below or not above or E >= max_num_seqs:
        return None
    table = Table.from_list([[1, E, K], [E + 1, max_num_seqs, 1 if K > 1 else 0]])
    return EdgePlan(table, below[-1], above[0])


class DraftingCheck(_Frozen):
    """T(B, k) on the K engine over T(B, k) on a K_ref engine, with its 95% interval."""

    B: int
    k: int
    K: int
    K_ref: int
    ratio: float
    low: float
    high: float
    extra_ms: float  # the K engine's median step minus the K_ref engine's
    verdict: Drafted


def compare_drafting(main: HonorCell, ref: HonorCell, margin: float = MARGIN,
                     seed: int = 0) -> DraftingCheck | None:
    """Same (B, k) on two engines: longer on the K engine beyond ``margin`` (its whole interval)
    means the drafter ran more steps there than the table asked (``startup_k``); an interval
    within 1 ± margin means the same drafting work (``table_k``). Shorter beyond the margin is
    ``unclear``: more drafting cannot make a step shorter, so the engines differ by something
    else (the host between the two runs), which could hide a drafting cost as well. Cluster
    bootstrap of each engine's median, bursts then steps (tuner/core/intervals.py); None
    without steps on one."""
    if not main.steps_ms or not ref.steps_ms or main.step_ms is None or ref.step_ms is None:
        return None
    ratios = bootstrap_medians(main.steps_ms, seed=seed) / bootstrap_medians(ref.steps_ms, seed=seed + 1)
    low, high = (float(x) for x in np.quantile(ratios, [0.025, 0.975]))
    verdict: Drafted = ("startup_k" if low > 1 + margin
                        else "table_k" if 1 - margin <= low and high <= 1 + margin else "unclear")
    return DraftingCheck(B=main.B, k=main.k, K=main.engine_K, K_ref=ref.engine_K,
                         ratio=round(main.step_ms / ref.step_ms, 4), low=round(low, 4),
                         high=round(high, 4), extra_ms=round(main.step_ms - ref.step_ms, 4),
                         verdict=verdict)


class HonorCheck(_Frozen):
    """Everything measured for one engine, and what it says."""

    K: int
    runner: str | None = None  # the plugin's word for vLLM's model runner (v1, v2)
    tolerance: float = TOLERANCE
    cells: list[HonorCell]           # one-range tables [[1, N, k]]
    edge: list[HonorCell] = []       # a table with an edge, below and above it
    reference: list[HonorCell] = []  # the K_ref engine's one-range cells
    drafting: list[DraftingCheck] = []
    verified: Overall
    drafted: Drafted
    finding: str


def _overall(verdicts: Sequence[Verdict]) -> Overall:
    seen = {v for v in verdicts if v != "unmeasured"}
    if not seen:
        return "unknown"
    return seen.pop() if len(seen) == 1 else "partial"


def _drafted(checks: Sequence[DraftingCheck]) -> Drafted:
    seen = {c.verdict for c in checks}
    if not seen:
        return "unmeasured"
    return seen.pop() if len(seen) == 1 else "unclear"


def check(cells: Sequence[HonorCell], K: int, edge: Sequence[HonorCell] = (),
          reference: Sequence[HonorCell] = (), runner: str | None = None,
          tolerance: float = TOLERANCE, margin: float = MARGIN) -> HonorCheck:
    """The verdicts over every cell whose k is below K (at k = K honored and ignored look alike),
    the drafting comparisons at each (B, k) both engines ran, and the finding in words."""
    informative = [c.verdict for c in [*cells, *edge] if c.k < K]
    main = {(c.B, c.k): c for c in cells}
    drafting = [d for r in reference if (r.B, r.k) in main
                if (d := compare_drafting(main[(r.B, r.k)], r, margin)) is not None]
    verified, drafted = _overall(informative), _drafted(drafting)
    text = finding(cells, edge, drafting, K, verified, drafted, runner)
    return HonorCheck(K=K, runner=runner, tolerance=tolerance, cells=list(cells), edge=list(edge),
                      reference=list(reference), drafting=drafting, verified=verified,
                      drafted=drafted, finding=text)
