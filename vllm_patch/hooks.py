"""Wrappers around vLLM's Scheduler, installed per instance when EngineCore builds one.

- `dynamic_sd_lookup` becomes a PolicyLookup (hot-swappable table, hysteresis, exploration);
- `schedule` marks the time its output leaves for the workers;
- `update_from_output` counts every request-step and times the step (Counters.record_step:
  bucketed sums of steady steps, a transition count, and an exact per-step sample).

Time semantics (vLLM): K chosen at step t is the length the worker drafts at the end of step t,
verified at t+1. So a request's offered K is the previous step's K, remembered per request, and
a step's time is verify(the previous step's K) + draft(this step's K).
Every wrapper calls vLLM's own method first and does its own bookkeeping in a guard: a failure is
logged once with context and the step goes on as vLLM would have run it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from vllm_patch.policy import PolicyLookup
from vllm_patch.settings import PluginSettings
from vllm_patch.engine_state import LIFETIME_STEPS, Counters, EngineState, Policy, TableState

log = logging.getLogger("vllm.tabletune")
REQUIRED_SCHEDULER_ATTRS = ("dynamic_sd_lookup", "num_spec_tokens", "schedule",
                            "update_from_output", "scheduler_config", "requests")


class Guard:
    """Counts hook failures and logs the first one of each kind, with context."""

    def __init__(self, engine: EngineState) -> None:
        self.engine = engine
        self.seen: set[str] = set()

    def __call__(self, where: str, exc: Exception) -> None:
        self.engine.hook_errors += 1
        key = f"{where}:{type(exc).__name__}"
        if key not in self.seen:
            self.seen.add(key)
            log.exception("TableTune hook %s failed (%s); vLLM's own behaviour is kept for this "
                          "step and later failures of this kind are counted, not logged", where, exc)


def missing_attrs(obj: object, names: tuple[str, ...]) -> list[str]:
    """The names `obj` lacks (a vLLM whose Scheduler is laid out otherwise)."""
    return [n for n in names if not hasattr(obj, n)]


def engine_state(scheduler: Any, settings: PluginSettings) -> EngineState:
    """The plugin's state for this Scheduler: its startup table as version 1, the policy from the settings."""
    from tuner.core.table import Table

    num_spec = int(scheduler.num_spec_tokens or 0)
    max_num_seqs = int(scheduler.scheduler_config.max_num_seqs)
    lookup = scheduler.dynamic_sd_lookup
    table = None
    if lookup is not None:
        dense = tuple(int(k) for k in lookup)
        table = TableState(Table.from_dense(dense[1:]), dense, version=1, swapped_at=time.time())
    try:
        model_name = str(scheduler.vllm_config.model_config.served_model_name)
    except AttributeError:
        model_name = "unknown"
    compilation = getattr(getattr(scheduler, "vllm_config", None), "compilation_config", None)
    sizes = getattr(compilation, "cudagraph_capture_sizes", None)
    budget = getattr(scheduler.scheduler_config, "max_num_batched_tokens", None)
    return EngineState(
        cudagraph_capture_sizes=tuple(int(x) for x in sizes) if sizes is not None else None,
        max_num_batched_tokens=int(budget) if budget else None,
        table=table, policy=Policy(settings.explore_every, settings.hysteresis,
                                         explore_run=settings.explore_run),
        num_speculative_tokens=num_spec, max_num_seqs=max_num_seqs, model_name=model_name,
        startup_k=frozenset(table.dense[1:]) if table else frozenset({num_spec}),
        restrict_k=settings.restrict_k, counters=Counters(num_positions=num_spec),
        emulation=settings.emulate_acceptance if not settings.reject_all else (0.0,) * max(num_spec, 1),
        emulation_enabled=settings.emulation_enabled, applied_version=1,
        runner=runner(getattr(scheduler, "vllm_config", None)))


def runner(vllm_config: Any) -> str:
    """vLLM's model runner: V2 (full CUDA graphs per k of the startup table) or V1. vLLM decides
    it (0.26 picks V2 by itself for EAGLE-style drafters on dense models) and records it on its
    config; older configs without the field follow the environment switch."""
    import os

    try:
        chosen = getattr(vllm_config, "use_v2_model_runner", None)
    except Exception:  # a property of vLLM's that may look at more config than it has here
        chosen = None
    if chosen is None:
        chosen = os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "0") not in ("", "0")
    return "v2" if chosen else "v1"


def install(scheduler: Any, engine: EngineState) -> None:
    """Wrap this Scheduler instance's lookup, schedule and update_from_output."""
    guard = Guard(engine)
    if engine.table is not None:
        scheduler.dynamic_sd_lookup = PolicyLookup(engine, lambda e: guard("lookup", e))
    orig_schedule = scheduler.schedule
    orig_update = scheduler.update_from_output
    marks: dict[str, Any] = {"t_sched": None, "t_update": None, "offered": {}, "arm": None}

    def schedule(*args: Any, **kwargs: Any) -> Any:
        out = orig_schedule(*args, **kwargs)
        marks["t_sched"] = time.perf_counter()
        return out

    def update_from_output(scheduler_output: Any, model_runner_output: Any) -> Any:
        now = time.perf_counter()
        elapsed = None if marks["t_sched"] is None else now - marks["t_sched"]
        # the whole engine cycle since the last step's update: this step's scheduling and
        # execution and the last one's output handling, i.e. what a client's wall clock sees
        # (elapsed leaves out the host's time between steps)
        cycle = None if marks["t_update"] is None else now - marks["t_update"]
        marks["t_sched"], marks["t_update"] = None, now
        try:
            # Lengths before vLLM's update: it trims a finished request's tokens in place.
            num_generated = generated_lengths(scheduler_output, model_runner_output)
        except Exception as exc:
            num_generated = None
            guard("update_from_output", exc)
        result = orig_update(scheduler_output, model_runner_output)
        if num_generated is not None:
            try:
                # what the step delivered: the same lengths after vLLM trimmed the tokens a
                # finishing request sampled past its max_tokens or stop
                emitted = sum(generated_lengths(scheduler_output, model_runner_output).values())
                with engine.lock:
                    marks["offered"] = count_step(engine.counters, scheduler_output,
                                                  num_generated, marks["offered"], elapsed,
                                                  emitted, cycle, 4 * engine.max_num_seqs)
                reward_bandit(engine, marks, num_generated, elapsed)
            except Exception as exc:
                guard("update_from_output", exc)
        return result

    scheduler.schedule = schedule
    scheduler.update_from_output = update_from_output


def reward_bandit(engine: EngineState, marks: dict[str, Any], num_generated: dict[str, int],
                  elapsed: float | None) -> None:
    """Nightjar baseline: this step verified the drafts of the arm chosen one step earlier."""
    bandit = engine.bandit
    if bandit is None or engine.policy.baseline != "nightjar":
        marks["arm"] = None
        return
    if marks["arm"] is not None and elapsed:
        bandit.reward(marks["arm"], sum(num_generated.values()) / elapsed)
    marks["arm"] = bandit.pending


def generated_lengths(so: Any, mro: Any) -> dict[str, int]:
    """Tokens each scheduled request got this step (0 for a prefill chunk)."""
    index = mro.req_id_to_index
    sampled = mro.sampled_token_ids
    if not sampled:
        return dict.fromkeys(so.num_scheduled_tokens, 0)
    n = len(sampled)
    return {r: len(sampled[i]) if (i := index.get(r)) is not None and i < n else 0
            for r in so.num_scheduled_tokens}


def count_step(counters: Counters, so: Any, num_generated: dict[str, int],
               offered: dict[str, int], elapsed: float | None,
               emitted: int | None = None, cycle: float | None = None,
               max_open: int = 4096) -> dict[str, int]:
    """Count this step's request-steps; return the K offered to each request for the next step.

    Runs between two engine steps for every request in the batch, hence the shape: one loop that
    builds keys and adds to each request's own two counts, one C-level Counter.update, one
    dict.fromkeys."""
    scheduled = so.num_scheduled_tokens
    counters.close_lifetimes(getattr(so, "finished_req_ids", ()), max_open)
    if not scheduled:
        return offered
    k_now = int(getattr(so, "num_spec_tokens_to_schedule", 0) or 0)
    spec_get = so.scheduled_spec_decode_tokens.get
    offered_get = offered.get
    lives, life_get = counters.lifetimes, counters.lifetimes.get
    # a prefill chunk generated no token and had no draft proposed after it: skipped
    decoding = [(r, g) for r, g in num_generated.items() if g and r in scheduled]
    keys: list[tuple[int, int, int]] = []
    add = keys.append
    for r, g in decoding:
        k = offered_get(r)
        if k is None:
            continue
        d = len(spec_get(r, ()))
        a = g - 1 if d else 0
        add((k, d, a))
        if d:
            life = life_get(r)
            if life is None:
                lives[r] = [1, a > 0]
            else:
                life[0] += 1
                life[1] += a > 0
                if life[0] >= LIFETIME_STEPS:  # a long request: its life so far, in a piece
                    counters.close(lives.pop(r), request=False)
    if counters.resume_next:  # the first drafts after a K=0 stretch: counted twice (rare)
        counters.resume_request_steps.update(keys)
    counters.request_steps.update(keys)
    next_offered = dict.fromkeys([r for r, _ in decoding], k_now)
    # emitted: every token this step's requests kept (1 + accepted drafts; 1 for a prefill
    # that completed), i.e. what the step delivered, the numerator of realized goodput
    if emitted is None:
        emitted = sum(g for _, g in decoding)
    counters.record_step(len(scheduled), k_now, elapsed, sum(scheduled.values()), emitted, cycle)
    return next_offered
