"""What the plugin holds inside EngineCore: one immutable table, one policy, the counters.

Swaps rebind (`engine.table = TableState(...)`), never mutate: the engine thread reads
`engine.table` once per step and sees either the old or the new state, never half of one.
Counters are only written by the engine thread; the admin thread copies them under a lock.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tuner.table import Table


@dataclass(frozen=True, slots=True)
class TableState:
    table: Table
    dense: tuple[int, ...]  # dense[B] = K, index 0 unused (vLLM's lookup layout)
    version: int
    swapped_at: float  # wall clock of the swap (time.time())


@dataclass(frozen=True, slots=True)
class Policy:
    explore_every: int = 0  # one step at the largest allowed K every N steps; 0 = off
    hysteresis: int = 0     # keep the current K while B is within h of its range's edge
    baseline: str | None = None  # "nightjar": the per-batch-size bandit baseline decides K


def step_bucket(batch_size: int) -> int:
    """Step-time bucket: exact up to 16, then the next multiple of 8 (bounded label count)."""
    return batch_size if batch_size <= 16 else -(-batch_size // 8) * 8


@dataclass(slots=True)
class Counters:
    """Exact spec-decode counts vLLM does not export (positions are 0-based, like vLLM's)."""

    num_positions: int
    drafted_per_pos: list[int] = field(default_factory=list)   # request-steps offered K > i
    accepted_per_pos: list[int] = field(default_factory=list)  # ... whose first i+1 drafts were accepted
    histogram: Counter[tuple[int, int]] = field(default_factory=Counter)  # (drafted, accepted)
    request_steps_per_k: Counter[int] = field(default_factory=Counter)
    engine_steps_per_k: Counter[int] = field(default_factory=Counter)
    explore_steps: int = 0
    step_seconds: dict[tuple[int, int], float] = field(default_factory=dict)  # (bucket, K) -> s
    steps_timed: Counter[tuple[int, int]] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.drafted_per_pos = [0] * self.num_positions
        self.accepted_per_pos = [0] * self.num_positions

    def record_request_step(self, offered_k: int, drafted: int, accepted: int) -> None:
        self.request_steps_per_k[offered_k] += 1
        if offered_k == 0:
            return
        # An empty or short draft (ngram no-match) still counts as offered at every
        # position < K: it is a chance the drafter had and did not take.
        for i in range(min(offered_k, self.num_positions)):
            self.drafted_per_pos[i] += 1
        for i in range(min(accepted, self.num_positions)):
            self.accepted_per_pos[i] += 1
        self.histogram[(drafted, accepted)] += 1

    def record_step(self, batch_size: int, k: int, seconds: float | None) -> None:
        self.engine_steps_per_k[k] += 1
        if seconds is not None:
            key = (step_bucket(batch_size), k)
            self.step_seconds[key] = self.step_seconds.get(key, 0.0) + seconds
            self.steps_timed[key] += 1


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
    lock: threading.Lock = field(default_factory=threading.Lock)
    started_at: float = field(default_factory=time.time)
    current_k: int | None = None
    steps: int = 0
    applied_version: int = 0
    swap_latency_s: float | None = None  # last swap: stored -> first step that used it
    hook_errors: int = 0
    emulation: tuple[float, ...] | None = None
    emulation_enabled: bool = False
    bandit: Any = None  # vllm_patch.bandit.Bandit while the nightjar baseline is on
