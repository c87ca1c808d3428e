"""What the sidecar publishes about itself: one typed snapshot, built by Controller.snapshot().

GET /v1/state is its JSON, field for field (the route dumps the model); `tabletune status`
parses that reply with the same model; the probes (/healthz, /readyz, sidecar/probes.py) and the
Prometheus collector (sidecar/metrics.py) read the same snapshot. None of them reaches into the
controller or its helpers, and each reading of a scrape or a probe sees one consistent moment.

``process`` holds what only the running sidecar needs besides: the liveness verdict, the
counters and the predicted goodput of /metrics. It is never serialized, so a snapshot parsed
from a reply has none. Every published field has a default (nothing seen yet), so a reply from
a sidecar that predates a field still parses.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sidecar.counters import Stats
from sidecar.decision import Decision, DriftCell, Outcome, Source
from tuner.core.admin_api import Duel
from tuner.core.errors import InvalidInput

__all__ = ["ConditionDetail", "Estimator", "ForeignHold", "GuardrailState", "HeldOut", "LiveCell",
           "PredictedGoodput", "Process", "RecentDecision", "SidecarState", "StepTimes"]

Ranges = list[list[int]]  # a table as vLLM writes it: [[start_bs, end_bs, K], ...]


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True)


class ForeignHold(_Part):
    """Holding off after someone else wrote the engine's table (sidecar/engine_table.py)."""

    version: int | None = None
    until: float
    remaining_s: float


class ConditionDetail(_Part):
    """A condition's current state, since when, what was said and the latest error."""

    state: str
    since: float
    message: str
    error: str | None = None


class Estimator(_Part):
    """The estimator's prior a_i, its weight w and the live counts (eq. â)."""

    prior: list[float] = []
    w: float = 0.0
    accepted: list[float] = []
    drafted: list[float] = []


class LiveCell(_Part):
    """Live steps and their mean time at one (B bucket, k) (sidecar/step_times.py)."""

    batch_size: int
    k: int
    steps: float
    live_ms: float | None


class StepTimes(_Part):
    prior_steps: float = 0.0  # w_T: the profile's weight in steps
    live: list[LiveCell] = []


class HeldOut(_Part):
    """A table the guardrail rolled back, held out until ``until``."""

    table: Ranges
    until: float


class GuardrailState(_Part):
    judging: bool = False  # a pushed table is being judged against the goodput before it
    held_out: list[HeldOut] = []
    rollbacks: int = 0


class RecentDecision(_Part):
    """One of the last rebuilds, in short (the whole one is the decision log line)."""

    time: float
    outcome: Outcome
    trigger: str | None = None
    old_table: Ranges | None = None
    new_table: Ranges
    reason: str


class ModelError(_Part):
    """The model's goodput against what the ring measured at one served bucket, for the
    table's k there (sidecar/model_error.py): a switch by the model must beat ``error``."""

    batch_size: int          # the bucket (its largest B)
    k: int
    predicted_tokens_per_s: float
    realized_tokens_per_s: float
    error: float             # |log(realized / predicted)|
    steps: float
    pairable: bool = True    # a duel can pair here; False: the load only passes through, so
                             # the model decides the bucket (beyond ``error``)
    unpaired_runs: int = 0   # duel runs here that had their chance to pair and did not
                             # (UNPAIRED_RUNS of them, none paired: not pairable)
    lined_up: bool = True    # the load held half of a run's window here (sidecar/measured.py
                             # LINED_UP_SHARE); False: no run lines up with its references
    startable: bool = True   # some step here came after a run's length of the table's k: the
                             # plugin can start a run; False: the load enters under another k


class BorrowedError(_Part):
    """A served bucket with too few steps for its own model error, between two that have one:
    it borrows the larger (sidecar/model_error.py ``bracketed``), so the model may switch it."""

    batch_size: int          # the bucket (its largest B)
    error: float
    between: list[int]       # the two measured buckets it lies between
    pairable: bool = True    # as ModelError's
    unpaired_runs: int = 0
    lined_up: bool = True
    startable: bool = True


class DuelPower(_Part):
    """A paired comparison at one bucket (sidecar/measured.py): the pairs so far, their long-run
    sd (log scale), and the smallest gain it finds by max_pairs pairs, in half its runs: a
    smaller true gain mostly ends as a tie."""

    batch_size: int          # the bucket (its largest B)
    k: int
    ref: int
    pairs: int
    max_pairs: int
    sd: float
    smallest_gain: float


class Exploration(_Part):
    """What the sidecar asked the plugin to explore (sidecar/engine_table.py): the duels (B
    range and challengers), whether at the urgent share, and the k's the rotation visits."""

    duels: list[Duel] = []
    urgent: bool = False
    rotation: list[int] = []  # []: every runnable k


class PredictedGoodput(_Part):
    """G(B, k) = B·τ(k)/T̂(B, k) at the last interval's mean batch size B (eq. G)."""

    k: int
    batch_size: int
    tokens_per_s: float


class Process(_Part):
    """What the running sidecar reads besides the published state (never in /v1/state)."""

    healthy: bool            # /healthz: the control loop still turns (sidecar/probes.py)
    health_reason: str
    scrape_age_s: float | None  # since the last complete scrape, unrounded
    stats: Stats             # a copy of the counters, at the snapshot's moment
    goodput: list[PredictedGoodput]


class SidecarState(BaseModel):
    """GET /v1/state: what the sidecar last saw, and when (docs/sidecar.md, HTTP endpoints)."""

    model_config = ConfigDict(frozen=True)

    ready: bool = False
    ready_reason: str = ""
    dry_run: bool = False
    source: Source | None = None  # where the counts come from; None before the first scrape
    last_scrape_ok_at: float | None = None
    last_scrape_age_s: float | None = None
    last_admin_ok_at: float | None = None
    admin_age_s: float | None = None
    foreign_hold: ForeignHold | None = None
    foreign_tables_seen: int = 0
    conditions: dict[str, str] = {}
    condition_details: dict[str, ConditionDetail] = {}
    bias_note: str | None = None
    estimator: Estimator = Estimator()
    a_hat: list[float] = []
    a_used: list[float] = []  # â projected non-increasing: what rebuilds use
    steps_since_rebuild: float = 0.0
    explore_steps_seen: float = 0.0
    transition_steps_seen: float = 0.0
    rebuild_every_steps: int = 0
    allowed_k: list[int] | Literal["all"] = "all"
    engine_table: Ranges | None = None
    engine_table_version: int | None = None
    recommended_table: Ranges | None = None
    last_decision: Decision | None = None
    drift: list[DriftCell] = []
    step_times: StepTimes = StepTimes()
    model_error: list[ModelError] = []  # per served bucket, at the last rebuild
    borrowed_error: list[BorrowedError] = []  # buckets between two of model_error, at the last rebuild
    duel_power: list[DuelPower] = []    # per compared (bucket, k, ref) with enough pairs
    exploration: Exploration = Exploration()
    guardrail: GuardrailState = GuardrailState()
    traffic_changes: int = 0
    recent_decisions: list[RecentDecision] = []
    prior_acceptance: list[float] = []  # the profile's a_i; estimator.prior may be rebased
    profile_sha256: str = ""            # the profile the checkpoint belongs to
    process: Process | None = Field(default=None, exclude=True)

    def in_process(self) -> Process:
        """The running sidecar's own part; InvalidInput for a state parsed from a reply."""
        if self.process is None:
            raise InvalidInput("this state came from a /v1/state reply: it has no process part")
        return self.process
