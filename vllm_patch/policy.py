"""Per-step K: the table, bent by edge hysteresis and exploration runs.

vLLM's scheduler does `K = self.dynamic_sd_lookup[B]` once per step. PolicyLookup is a list (so
every other use of the lookup sees vLLM's own dense layout) whose indexing applies the policy, so
the choice happens exactly where vLLM makes it, for the sync and the async scheduler alike.

Exploration: the steps are cut into cycles of `explore_every`; the last `explore_run` steps of
cycle c run at allowed[c % len(allowed)] (allowed: the startup table's K set under restrict_k,
else 0..K, narrowed to the policy's explore_ks when set), so the k's take turns and each gets
live step times and acceptance at the loads that occur. A run keeps its k whatever B does, so
its middle steps are steady (verify and draft the same k); a cycle whose k is the table's k at
that B runs the table. Exploration steps never become the hysteresis memory (current_k). While
the sidecar has set duels (vllm_patch/duel.py), those replace the rotation: runs of one
challenger at the batch sizes it asked about, paced by a share of steps over a horizon.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import SupportsIndex, overload

from vllm_patch.bandit import Bandit
from vllm_patch.duel import DuelClock
from vllm_patch.engine_state import EngineState, Policy

log = logging.getLogger("vllm.tabletune")


def explore_k(policy: Policy, step: int, allowed: tuple[int, ...]) -> int | None:
    """The k that step `step` explores, or None outside the runs. Pure."""
    every = policy.explore_every
    if not every or step % every < every - policy.explore_run or not allowed:
        return None
    return allowed[(step // every) % len(allowed)]


def step_k(dense: tuple[int, ...], batch_size: int, current_k: int | None, step: int,
             policy: Policy, allowed: tuple[int, ...] = ()) -> tuple[int, bool]:
    """(K for this step, whether it is an exploration step). Pure."""
    k = dense[batch_size]
    explored = explore_k(policy, step, allowed)
    if explored is not None and explored != k:
        return explored, True
    h = policy.hysteresis
    if h and current_k is not None and k != current_k:
        # a range of fewer than 2h+1 batch sizes would never be entered: B stays within h of
        # the k on either side (bursts of 4 held k=0 over a pushed [3, 4] -> 3 for whole runs)
        h = min(h, (range_width(dense, batch_size, 2 * h) - 1) // 2)
        lo, hi = max(1, batch_size - h), min(len(dense) - 1, batch_size + h)
        # Still within h of a batch size where the table says current_k: hold it.
        if h and current_k in dense[lo:hi + 1]:
            return current_k, False
    return k, False


def range_width(dense: tuple[int, ...], batch_size: int, cap: int) -> int:
    """How many batch sizes around `batch_size` the table gives its k (dense[0] is no batch
    size), counting at most `cap` on each side. Pure."""
    k, n = dense[batch_size], len(dense)
    left = right = 0
    while left < cap and batch_size - left - 1 >= 1 and dense[batch_size - left - 1] == k:
        left += 1
    while right < cap and batch_size + right + 1 < n and dense[batch_size + right + 1] == k:
        right += 1
    return 1 + left + right


class PolicyLookup(list[int]):
    """vLLM's dense lookup with the policy applied on indexing by batch size."""

    def __init__(self, engine: EngineState, on_error: Callable[[Exception], None]) -> None:
        assert engine.table is not None
        super().__init__(engine.table.dense)
        self._engine = engine
        self._on_error = on_error
        self._allowed = engine.runnable_k  # fixed at startup: K, restrict_k and startup_k are
        self._duel = DuelClock()
        self._duel_policy: Policy | None = None  # the policy the duel clock runs for
        # the budget's clock: steps under a policy that may explore, so a plain policy's steps
        # (a bench's table arms beside a frozen sidecar) never make room for more exploration
        self._budget_steps = 0
        self._rotation: tuple[Policy | None, tuple[int, ...]] = (None, self._allowed)

    def _rotated(self, policy: Policy) -> tuple[int, ...]:
        """The k's the rotation visits under ``policy`` (computed once per policy object)."""
        if self._rotation[0] is not policy:
            ks = tuple(k for k in self._allowed if k in policy.explore_ks) or self._allowed
            self._rotation = (policy, ks)
        return self._rotation[1]

    def _duel_k(self, dense: tuple[int, ...], batch_size: int, policy: Policy) -> tuple[int, bool]:
        if policy is not self._duel_policy:  # a new policy (rebound, never mutated)
            old = self._duel_policy
            # new runs only if the duels changed: a PUT of the same duels beside another
            # rotation or share would cut a run and lose its pair
            if old is None or (old.duels, old.duel_run) != (policy.duels, policy.duel_run):
                self._duel.reset()
            self._duel_policy = policy
        table_k, _ = step_k(dense, batch_size, self._engine.current_k, self._engine.steps,
                              Policy(hysteresis=policy.hysteresis))
        allowed = set(self._allowed)
        k = self._duel.k_for_step(policy.duels, batch_size, table_k, self._budget_steps,
                                  policy.duel_run, policy.duel_share, policy.duel_horizon)
        if k is None or k == table_k or k not in allowed:
            return table_k, False
        return k, True

    def _bandit(self) -> Bandit:
        engine = self._engine
        if engine.bandit is None:
            engine.bandit = Bandit(arms=self._allowed)
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
            policy = engine.policy
            if policy.baseline == "nightjar":
                self._duel.unseen()  # steps the duels' clock does not see: no run's reference
                k, explored = self._bandit().k_for(int(i)), False
            elif policy.duels:
                k, explored = self._duel_k(state.dense, int(i), policy)
            else:
                self._duel.unseen()
                k, explored = step_k(state.dense, int(i), engine.current_k, engine.steps,
                                       policy, self._rotated(policy))
                if explored and not self._duel.charge(self._budget_steps, policy.duel_share,
                                                      policy.duel_horizon):
                    # the rotation shares the duels' budget: over the horizon, all exploration
                    # together stays within duel_share
                    k, explored = step_k(state.dense, int(i), engine.current_k, engine.steps,
                                           Policy(hysteresis=policy.hysteresis))
            engine.steps += 1
            if policy.duels or policy.explore_every:
                self._budget_steps += 1
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
