"""Per-step K: the table, bent by edge hysteresis and the exploration step.

vLLM's scheduler does `K = self.dynamic_sd_lookup[B]` once per step. PolicyLookup is a list (so
every other use of the lookup sees vLLM's own dense layout) whose indexing applies the policy, so
the choice happens exactly where vLLM makes it, for the sync and the async scheduler alike.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import SupportsIndex, overload

from vllm_patch.bandit import Bandit
from vllm_patch.state import EngineState, Policy

log = logging.getLogger("vllm.tabletune")


def choose_k(dense: tuple[int, ...], batch_size: int, current_k: int | None, step: int,
             policy: Policy, explore_k: int) -> tuple[int, bool]:
    """(K for this step, whether it is an exploration step). Pure."""
    if policy.explore_every and step % policy.explore_every == policy.explore_every - 1:
        return explore_k, True
    k = dense[batch_size]
    h = policy.hysteresis
    if h and current_k is not None and k != current_k:
        lo, hi = max(1, batch_size - h), min(len(dense) - 1, batch_size + h)
        # Still within h of a batch size where the table says current_k: hold it.
        if current_k in dense[lo:hi + 1]:
            return current_k, False
    return k, False


class PolicyLookup(list[int]):
    """vLLM's dense lookup with the policy applied on indexing by batch size."""

    def __init__(self, engine: EngineState, on_error: Callable[[Exception], None]) -> None:
        assert engine.table is not None
        super().__init__(engine.table.dense)
        self._engine = engine
        self._on_error = on_error

    def _bandit(self) -> Bandit:
        engine = self._engine
        if engine.bandit is None:
            arms = sorted(engine.startup_k) if engine.restrict_k else list(
                range(engine.num_speculative_tokens + 1))
            engine.bandit = Bandit(arms=tuple(arms))
        bandit: Bandit = engine.bandit
        return bandit

    @overload
    def __getitem__(self, i: SupportsIndex) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: SupportsIndex | slice) -> int | list[int]:
        if isinstance(i, slice):
            return list.__getitem__(self, i)
        engine = self._engine
        state = engine.table
        try:
            assert state is not None
            explore_k = max(engine.startup_k) if engine.restrict_k else engine.num_speculative_tokens
            if engine.policy.baseline == "nightjar":
                k, explored = self._bandit().choose(int(i)), False
            else:
                k, explored = choose_k(state.dense, int(i), engine.current_k, engine.steps,
                                       engine.policy, explore_k)
            engine.steps += 1
            if state.version != engine.applied_version:  # first step on a swapped table
                # latency first: a reader that sees the new version must see its latency
                engine.swap_latency_s = max(0.0, time.time() - state.swapped_at)
                engine.applied_version = state.version
            if explored:
                engine.counters.explore_steps += 1
            else:
                engine.current_k = k
            return k
        except Exception as exc:  # never raise into the scheduler: fall back to vLLM's table
            self._on_error(exc)
            return list.__getitem__(self, i)
