"""The field bench's summary.json as types (issue #37 item 5): benchmarks/field_summary.py
builds a FieldSummary, field.py writes it, readme_table.py reads it back through it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from benchmarks.noharm_summary import ShortRun

__all__ = ["BestFixed", "BestFixedShort", "FieldClaim", "FieldComparison", "FieldShape",
           "FieldSummary", "Figure", "LearnedComparison", "PolicyFigures", "Word"]

# "same table": the two policies ran one table (an A/A, no claim); None: too few blocks
Word = Literal["faster", "slower", "same within noise", "same table"] | None
Interval = list[float | None]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BestFixedShort(_Model):
    """A figure against the best fixed k (the per-figure view of BestFixed)."""

    ratio: float | None
    ci: Interval
    closest: str              # the fixed k that did best
    word: Word


class BestFixed(_Model):
    """``policy`` against the best fixed k in ``metric``: an intersection-union test."""

    policy: str
    metric: str
    ratio: float | None
    ci: Interval
    closest: str
    word: Word


class Figure(_Model):
    """A figure users read: its median over blocks, a distribution-free interval for it."""

    median: float | None
    ci: Interval
    versus_best_fixed: BestFixedShort | None


class PolicyFigures(_Model):
    tokens_per_s: float | None
    engine_tokens_per_s: float | None
    latency_ms: dict[str, float | None]
    acceptance_length: float | None
    request_goodput: float | None
    figures: dict[str, Figure]


class FieldComparison(_Model):
    """policy / versus, paired by block: geometric mean and its t-interval, uncorrected."""

    policy: str
    versus: str
    metric: str
    ratio: float | None
    ci: Interval
    blocks: int
    word: Word


class LearnedComparison(FieldComparison):
    """A sidecar policy against the tuned table where it had been awake ``awake_s`` before."""

    awake_s: float


class GapClosed(_Model):
    """A sidecar started from a table that also ran alone (``start``): the share of the gap from
    that table to the tuned one it closed, in output throughput (issue #34 item 6)."""

    policy: str
    start: str
    awake_s: float            # over the blocks where its sidecar had been awake this long (0: all)
    blocks: int
    gap: float | None         # tuned / start: geometric mean of the per-block ratios
    gap_word: Word            # tuned / start's word on these blocks (None: too few for one)
    share: float | None       # (log sidecar - log start) / (log tuned - log start), each a mean
                              # over blocks; None unless gap_word is "faster"
    ci: Interval              # Fieller's 95% interval over blocks (None: unbounded, < 3 blocks)


class FieldClaim(_Model):
    """One of the README's claims: Holm over the run's family, the interval at its level."""

    shape: str
    policy: str
    versus: str               # a policy, or "best fixed k"
    metric: str
    ratio: float | None
    same_table: bool
    ci: Interval
    level: float | None
    p: float | None           # None: outside the family (an A/A, or too few blocks)
    word: Word
    blocks: int | None = None  # blocks where the policy and every reference ran (None: older files)


class FieldShape(_Model):
    shape: str
    blocks: int               # blocks that ran every policy
    policies: dict[str, PolicyFigures]
    comparisons: list[FieldComparison]
    after_learning: list[LearnedComparison]
    versus_best_fixed: list[BestFixed]
    gap_closed: list[GapClosed] = []


class FieldSummary(_Model):
    """summary.json: the claims, then per shape every policy's figures and comparisons."""

    headline: list[FieldClaim]
    family: int               # claims in the Holm family
    shapes: list[FieldShape]
    policies: list[str]
    tables: dict[str, list[list[int]] | None]
    ci_level: float
    blocks: int               # the fewest complete blocks of any shape
    parts: int
    goodput_slo: list[str] | None
    short_runs: list[ShortRun]
    statistic: str
    command: str | None
