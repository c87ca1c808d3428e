"""The plugin's admin API as data: every request body and reply, in one place.

The plugin (vllm_patch/admin.py) validates bodies with these models and builds its replies from
them; every client (tuner/core/engine_client.py) parses replies with them. So the two sides cannot
drift, and a field is named once.

| route              | body             | reply          |
|--------------------|------------------|----------------|
| GET  /healthz      |                  | {"ok": true}   |
| GET  /v1/table     |                  | TableReply     |
| PUT  /v1/table     | TableBody        | TableReply     |
| GET  /v1/policy    |                  | PolicyReply    |
| PUT  /v1/policy    | PolicyBody       | PolicyReply    |
| GET  /v1/stats     | ?since=SEQ       | StatsReply     |
| GET  /v1/emulation |                  | EmulationReply |
| PUT  /v1/emulation | EmulationBody    | EmulationReply |
| any error          |                  | ErrorReply     |

Bodies are strict (``extra="forbid"``, and integers must be JSON integers: ``"1"``, ``true`` and
``2.0`` are refused), since a table pushed by hand with a typo must not run. Replies ignore
unknown fields, so a newer plugin can add some without breaking an older client.

stdlib + pydantic only: imported inside the vLLM engine process.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator

from tuner.core.table import Table

__all__ = ["NO_STEPS", "BucketK", "Duel", "EmulationBody", "EmulationReply", "ErrorReply", "PolicyBody",
           "PolicyReply", "StatsReply", "Step", "TableBody", "TableReply", "check_exploration",
           "check_rates"]


# GET /v1/stats?since=NO_STEPS: past any step's seq (the plugin takes up to 18 digits), so the
# reply carries the counters without the per-step ring (~300 kB): what a poller that only counts
# should ask for
NO_STEPS = 10**18 - 1


BucketK = tuple[int, int]  # (buckets.step_bucket(B), k): the key of the plugin's step counters
Duel = tuple[int, int, tuple[int, ...]]  # (start_bs, end_bs, challenger k's): PolicyBody.duels


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def check_rates(rates: tuple[float, ...]) -> None:
    """Emulated a_i: probabilities of nested events, so in [0, 1] and non-increasing."""
    if not rates:
        raise ValueError("rates must not be empty")
    for i, r in enumerate(rates):
        if not 0.0 <= r <= 1.0:
            raise ValueError(f"rates[{i}]={r} is not a probability in [0, 1]")
        if i and r > rates[i - 1]:
            raise ValueError(f"rates[{i}]={r} > rates[{i - 1}]={rates[i - 1]}: a_i (first i drafts "
                             "all accepted) cannot grow with i")


def check_exploration(explore_every: int, explore_run: int) -> None:
    """A run of explore_run steps in every explore_every must leave the table at least one."""
    if explore_every and explore_run >= explore_every:
        raise ValueError(f"explore_run={explore_run} must be < explore_every={explore_every} (each "
                         f"cycle of {explore_every} steps explores {explore_run} of them); raise "
                         "explore_every or lower explore_run")


class TableBody(_Body):
    """PUT /v1/table: vLLM's ``[[start_bs, end_bs, K], ...]``; with ``if_version``, written only
    if the engine's table is still that version (else 409, field ``if_version``): a writer that
    read version n never overwrites a table someone else wrote after it read."""

    table: tuple[tuple[StrictInt, StrictInt, StrictInt], ...]
    if_version: StrictInt | None = Field(default=None, ge=0)

    def parsed(self) -> Table:
        """The validated Table (vLLM's rules); raises InvalidTable naming the range."""
        return Table.parse_list([list(r) for r in self.table])


class PolicyBody(_Body):
    """PUT /v1/policy: any subset of the fields; the others keep their value.

    Exploration: every ``explore_every`` steps a run of ``explore_run`` consecutive steps at one
    other allowed k, the k's visited in turn, so every k keeps live step times and acceptance at
    the loads that occur; the share of explored steps is at most explore_run / explore_every (a
    cycle whose k is the table's k at that batch size runs the table). ``explore_run`` must stay
    below ``explore_every`` (see check_exploration).
    """

    explore_every: StrictInt | None = Field(default=None, ge=0, le=1_000_000)
    explore_run: StrictInt | None = Field(default=None, ge=1, le=64)
    # duels (vllm_patch/duel.py): [[start_bs, end_bs, [challenger k, ...]], ...]; [] ends them
    duels: tuple[Duel, ...] | None = None  # strict ints: the model's config
    duel_run: StrictInt | None = Field(default=None, ge=2, le=256)
    duel_share: StrictFloat | None = Field(default=None, ge=0.0, le=0.5)
    duel_horizon: StrictInt | None = Field(default=None, ge=100, le=10_000_000)
    hysteresis: StrictInt | None = Field(default=None, ge=0, le=1_000_000)
    baseline: Literal["nightjar", "none"] | None = None  # benchmarks only; "none" turns it off
    # the k's the rotation visits ([]: every runnable k; explore_every=0 turns it off): the
    # sidecar leaves out a k whose best case loses wherever it was judged, so none explores it
    explore_ks: tuple[StrictInt, ...] | None = None


class EmulationBody(_Body):
    """PUT /v1/emulation: the a_i the emulator caps acceptance at."""

    rates: tuple[StrictFloat | StrictInt, ...]

    @field_validator("rates")
    @classmethod
    def _check(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        rates = tuple(float(x) for x in v)
        check_rates(rates)
        return rates


class ErrorReply(_Reply):
    error: str
    field: str | None = None


class TableReply(_Reply):
    """The engine's table state. ``swap_latency_s`` is None while a swap waits for its first
    step (an idle engine runs no step), then the seconds from the swap to that step."""

    table: list[list[int]] | None
    num_speculative_tokens: int
    max_num_seqs: int
    startup_k: list[int] = []
    version: int = 0
    swapped_at: float | None = None
    restrict_k: bool = False
    swap_latency_s: float | None = None
    # what decides where the engine's step time jumps (tuner/core/graphs.py): the CUDA-graph
    # capture sizes (none on CPU) and the scheduler's token budget; None: not reported
    cudagraph_capture_sizes: list[int] | None = None
    max_num_batched_tokens: int | None = None
    # the model runner ("v1", "v2"; None: not reported) and the k's it runs without a penalty:
    # V2 captures full CUDA graphs only for the startup table's k's, V1 (piecewise graphs under
    # a DSD table) and CPU run every k alike
    runner: str | None = None
    graph_k: list[int] | None = None
    # PUT only: what was cut to fit max_num_seqs (tuner/core/table.fit_to_engine), None: nothing
    clipped: str | None = None

    def parsed_table(self) -> Table | None:
        return None if self.table is None else Table.from_list(self.table)


class PolicyReply(_Reply):
    explore_every: int
    hysteresis: int
    explore_run: int = 1
    baseline: str | None = None
    duels: tuple[Duel, ...] = ()
    duel_run: int = 16
    duel_share: float = 0.02
    duel_horizon: int = 10_000
    explore_ks: tuple[int, ...] = ()  # (): every runnable k


class EmulationReply(_Reply):
    enabled: bool
    rates: list[float] | None = None


class Step(NamedTuple):
    """One engine step of the plugin's ring (GET /v1/stats' ``recent_steps``), a JSON list on the
    wire. A step's time is verify(the previous step's k) + draft(this step's k): a steady step has
    both k's equal. ``emitted``: the tokens the step's requests kept (1 + accepted drafts each);
    ``cycle``: seconds since the previous step's update (0.0: unknown), the host's time between
    steps included. An older plugin sends six fields (no emitted, no cycle: None) or seven."""

    seq: int            # numbers the engine's steps from 1 (restarts with the engine)
    batch_size: int
    k_verified: int
    k_drafted: int
    seconds: float      # the step's execution time
    tokens: int         # tokens scheduled
    emitted: int | None = None
    cycle: float | None = None


class StatsReply(_Reply):
    """The plugin's exact counters (GET /v1/stats); positions are 0-based, like vLLM's.

    ``step_times`` rows are [batch-size bucket, k, seconds, steps] of steady steps only (the k
    verified equals the k drafted), the others count in ``transition_steps``; ``histogram`` rows
    are [drafted, accepted, request-steps]; ``scheduled_requests``/``_tokens`` are exact totals
    over all steps (decodes, drafts and prefill chunks). ``recent_steps`` seq numbers the engine's
    steps from 1 (the newest is ``engine_steps``) and restarts with the engine (``started_at``);
    a first seq above since+1 means the ring (8192 steps) dropped some.
    """

    model_name: str = "unknown"
    num_speculative_tokens: int = 0
    max_num_seqs: int = 0
    started_at: float = 0.0
    table_version: int = 0
    current_k: int | None = None
    steps: int = 0
    drafted_per_pos: list[int] = []
    accepted_per_pos: list[int] = []
    histogram: list[tuple[int, int, int]] = []
    request_steps_per_k: dict[int, int] = {}
    engine_steps_per_k: dict[int, int] = {}
    explore_steps: int = 0
    scheduled_requests: int | None = None  # None: a plugin that predates the exact totals
    scheduled_tokens: int | None = None
    step_times: list[tuple[int, int, float, int]] = []
    # the last engine steps, oldest first (GET /v1/stats?since=SEQ: only seq > SEQ)
    recent_steps: list[Step] = []
    transition_steps: int = 0  # steps whose verified and drafted k differ (not in step_times)
    # request-steps verified right after a K=0 stretch (of >= 4 steps), per position: a drafter
    # whose state went stale while nothing was drafted shows here below the steady acceptance
    resume_drafted_per_pos: list[int] = []
    resume_accepted_per_pos: list[int] = []
    # by whole request lives: request-steps with a proposal of the requests that finished (a long
    # one in pieces of 256), and of those whose first draft was kept (None: an older plugin)
    finished_requests: int | None = None
    finished_proposed: int | None = None
    finished_accepted: int | None = None
    swap_latency_s: float | None = None
    hook_errors: int = 0
    bandit: list[Any] | None = None

    @property
    def engine_steps(self) -> int:
        return sum(self.engine_steps_per_k.values())
