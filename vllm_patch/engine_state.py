"""What the plugin holds inside EngineCore: one immutable table, one policy, the counters.

Swaps rebind (`engine.table = TableState(...)`), never mutate: the engine thread reads
`engine.table` once per step and sees either the old or the new state, never half of one.
Counters are only written by the engine thread; the admin thread copies them under `lock`.
The admin thread's read-modify-write of the table and policy (version n -> n+1) happens under
`admin_lock`, so two concurrent PUTs cannot both build version n+1.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from tuner.core.admin_api import Duel, Step
from tuner.core.buckets import step_bucket
from tuner.core.table import Table


@dataclass(frozen=True, slots=True)
class TableState:
    table: Table
    dense: tuple[int, ...]  # dense[B] = K, index 0 unused (vLLM's lookup layout)
    version: int
    swapped_at: float  # wall clock of the swap (time.time())


@dataclass(frozen=True, slots=True)
class Policy:
    explore_every: int = 0  # every N steps a run of explore_run steps at another k; 0 = off
    hysteresis: int = 0     # keep the current K while B is within h of its range's edge (policy.step_k)
    baseline: str | None = None  # "nightjar": the per-batch-size bandit baseline decides K
    explore_run: int = 3    # < explore_every; the middle steps of a run are steady steps
    # duels (vllm_patch/duel.py): while set, exploration runs only at these batch-size ranges,
    # only these challenger k's, in runs of duel_run steps, within duel_share of the steps of
    # any duel_horizon steps under exploring policies; the explore_every rotation is off meanwhile
    duels: tuple[Duel, ...] = ()
    duel_run: int = 16
    duel_share: float = 0.02
    duel_horizon: int = 10_000
    explore_ks: tuple[int, ...] = ()  # the k's the rotation visits; (): every runnable k


# Per-step samples kept for GET /v1/stats: 8192 steps are 80-400 s of 10-50 ms GPU steps, so a
# consumer polling with ?since= every few seconds misses none (a gap in seq shows if it did).
RECENT_STEPS = 8192


# a K=0 stretch this long (steps) counts as one after which drafting "resumes"
RESUME_AFTER = 4
# a request's own counts are closed when it finishes, or after this many request-steps with a
# proposal (a long request then adds its life in pieces, not once at its end)
LIFETIME_STEPS = 256


def drafted_per_pos(request_steps: Counter[tuple[int, int, int]], n: int) -> list[int]:
    """Per position i: request-steps offered K > i (keys are (offered K, drafted, accepted))."""
    out = [0] * n
    for (k, _, _), count in request_steps.items():
        for i in range(min(k, n)):
            out[i] += count
    return out


def accepted_per_pos(request_steps: Counter[tuple[int, int, int]], n: int) -> list[int]:
    """Per position i: request-steps whose first i+1 drafts were all accepted."""
    out = [0] * n
    for (k, _, a), count in request_steps.items():
        for i in range(min(a, n) if k else 0):
            out[i] += count
    return out


@dataclass(slots=True)
class Counters:
    """Exact spec-decode counts vLLM does not export (positions are 0-based, like vLLM's).

    The engine thread only tallies one key per request-step, (offered K, drafted, accepted), in a
    Counter (C-speed `update`): the per-position series are derived when someone reads them, so
    the per-step cost stays a dict lookup per request, not a Python loop per position.
    """

    num_positions: int
    request_steps: Counter[tuple[int, int, int]] = field(default_factory=Counter)
    engine_steps_per_k: Counter[int] = field(default_factory=Counter)
    explore_steps: int = 0
    # steady steps only (k verified == k drafted): (bucket, k) -> seconds, and their count
    step_seconds: dict[tuple[int, int], float] = field(default_factory=dict)
    steps_timed: Counter[tuple[int, int]] = field(default_factory=Counter)
    transition_steps: int = 0  # steps whose verified and drafted k differ
    num_steps: int = 0         # steps recorded; the seq of the newest one
    k_drafted: int = 0         # the k drafted at the end of the newest step (nothing before the first)
    recent_steps: deque[Step] = field(default_factory=lambda: deque(maxlen=RECENT_STEPS))
    # exact totals over all steps: requests and tokens scheduled (decodes, drafts and prefill
    # chunks), so a window's tokens per step shows where steps cross a CUDA-graph size
    scheduled_requests: int = 0
    scheduled_tokens: int = 0
    # request-steps verified right after a K=0 stretch of at least RESUME_AFTER steps: does a
    # drafter whose state went stale while nothing was drafted lose acceptance when it resumes?
    resume_request_steps: Counter[tuple[int, int, int]] = field(default_factory=Counter)
    zero_streak: int = 0       # consecutive steps that drafted nothing
    resume_next: bool = False  # the next step verifies the first drafts after such a stretch
    # per request in flight: [request-steps with a proposal, of which the first draft kept];
    # closed into the finished_* totals when the request finishes: acceptance by whole request
    # lives, which a burst of fresh requests does not move (its young and old steps go together)
    lifetimes: dict[str, list[int]] = field(default_factory=dict)
    finished_requests: int = 0
    finished_proposed: int = 0
    finished_accepted: int = 0

    def record_request_step(self, offered_k: int, drafted: int, accepted: int) -> None:
        """One request-step: offered K, drafted, accepted."""
        self.request_steps[(offered_k, drafted, accepted)] += 1

    @property
    def drafted_per_pos(self) -> list[int]:
        """Request-steps offered K > i. An empty or short draft (ngram no-match) still counts at
        every position < K: it is a chance the drafter had and did not take."""
        return drafted_per_pos(self.request_steps, self.num_positions)

    @property
    def accepted_per_pos(self) -> list[int]:
        """... whose first i+1 drafts were all accepted."""
        return accepted_per_pos(self.request_steps, self.num_positions)

    @property
    def histogram(self) -> Counter[tuple[int, int]]:
        """(drafted, accepted) -> request-steps, over steps that offered K > 0."""
        h: Counter[tuple[int, int]] = Counter()
        for (k, d, a), n in self.request_steps.items():
            if k:
                h[(d, a)] += n
        return h

    @property
    def request_steps_per_k(self) -> Counter[int]:
        """Request-steps per offered K."""
        per_k: Counter[int] = Counter()
        for (k, _, _), n in self.request_steps.items():
            per_k[k] += n
        return per_k

    def record_step(self, batch_size: int, k: int, seconds: float | None, tokens: int = 0,
                    emitted: int = 0, cycle: float | None = None) -> None:
        """One engine step that scheduled `batch_size` requests (`tokens` tokens), emitted
        `emitted` tokens (one per request that sampled, plus its accepted drafts: what the
        step delivered) and drafts `k`; `cycle`: the engine's whole cycle since the previous
        step's update (scheduling and host time between steps included; 0.0 in the ring when
        unknown).

        vLLM drafts at the end of step t and verifies at t+1, so a step's time is
        verify(k_verified = the previous step's k) + draft(k). Only a steady step (both equal)
        times one k: it goes to the (bucket, k) sums; the others count as transition steps.
        Every timed step is also kept, exactly, in the recent_steps ring."""
        k_verified, self.k_drafted = self.k_drafted, k
        self.resume_next = k > 0 and self.zero_streak >= RESUME_AFTER
        self.zero_streak = 0 if k else self.zero_streak + 1
        self.num_steps += 1
        self.engine_steps_per_k[k] += 1
        self.scheduled_requests += batch_size
        self.scheduled_tokens += tokens
        if k_verified != k:
            self.transition_steps += 1
        if seconds is None:
            return
        self.recent_steps.append(Step(self.num_steps, batch_size, k_verified, k, seconds, tokens,
                                      emitted, 0.0 if cycle is None else cycle))
        if k_verified == k:
            key = (step_bucket(batch_size), k)
            self.step_seconds[key] = self.step_seconds.get(key, 0.0) + seconds
            self.steps_timed[key] += 1

    def close_lifetimes(self, request_ids: Any, max_open: int) -> None:
        """Requests that finished (vLLM's finished_req_ids): their counts into the totals; and,
        should ids never be reported finished, the oldest beyond ``max_open`` too."""
        for r in request_ids:
            life = self.lifetimes.pop(r, None)
            if life is not None:
                self.close(life, request=True)
        while len(self.lifetimes) > max_open:
            self.close(self.lifetimes.pop(next(iter(self.lifetimes))), request=True)

    def close(self, life: list[int], request: bool) -> None:
        """Add one request's counts (``request``: its whole life) to the finished totals."""
        self.finished_requests += request
        self.finished_proposed += life[0]
        self.finished_accepted += life[1]

    def steps_after(self, since: int | None) -> list[Step]:
        """The recent steps with seq > since (all of them for None), oldest first."""
        if since is None:
            return list(self.recent_steps)
        out = []
        for sample in reversed(self.recent_steps):  # newest first: stop at the first old one
            if sample[0] <= since:
                break
            out.append(sample)
        out.reverse()
        return out


@dataclass(slots=True)
class EngineState:
    """Everything the hooks and the admin endpoint share, one per EngineCore."""

    table: TableState | None
    policy: Policy
    num_speculative_tokens: int
    max_num_seqs: int
    model_name: str
    startup_k: frozenset[int]
    restrict_k: bool
    counters: Counters
    lock: threading.Lock = field(default_factory=threading.Lock)  # counters: engine vs admin
    admin_lock: threading.Lock = field(default_factory=threading.Lock)  # PUTs' read-modify-write
    started_at: float = field(default_factory=time.time)
    current_k: int | None = None
    steps: int = 0
    applied_version: int = 0  # the table version the last step used
    swap_latency_s: float | None = None  # that version's swap -> its first step (admin.swap_latency)
    hook_errors: int = 0
    emulation: tuple[float, ...] | None = None
    emulation_enabled: bool = False
    # where steps leave the CUDA graphs or the token budget (the tuner's grid, tuner/core/graphs.py)
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    max_num_batched_tokens: int | None = None
    bandit: Any = None  # vllm_patch.bandit.Bandit while the nightjar baseline is on
    runner: str | None = None  # "v1" or "v2" (vLLM's model runner), None when unknown

    @property
    def runnable_k(self) -> tuple[int, ...]:
        """The k's this engine may run: the startup table's under restrict_k, else 0..K (the
        one place of the rule: the policy, the table check and the duels read it)."""
        if self.restrict_k:
            return tuple(sorted(self.startup_k))
        return tuple(range(self.num_speculative_tokens + 1))
