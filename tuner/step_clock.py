"""The plugin's step clock, read between two /v1/stats snapshots (pure).

Every timing in TableTune that does not come from a client's stopwatch comes from here: the
tuner's cells, the bench's per-cell step columns and the load generator's probe. Differences
of exact totals, so steps that ramp up or down at the window's edges cancel.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.core.admin_api import StatsReply

__all__ = ["EngineClock", "StepLoad", "engine_clock", "implausible", "last_seq", "steady_steps", "step_load"]


@dataclass(frozen=True, slots=True)
class EngineClock:
    seconds: float      # summed step wall time, all batch-size buckets
    steps: int          # timed steps
    full_drafts: int    # request-steps whose draft had >= k tokens
    request_steps: int  # request-steps that were offered a draft


def engine_clock(stats: StatsReply, k: int) -> EngineClock:
    """Totals over all batch-size buckets (ramp-up steps cancel in the difference)."""
    seconds = sum(row[2] for row in stats.step_times)
    steps = sum(row[3] for row in stats.step_times)
    hist = stats.histogram
    return EngineClock(seconds, steps, sum(n for d, _, n in hist if k and d >= k),
                       sum(n for _, _, n in hist))


@dataclass(frozen=True, slots=True)
class StepLoad:
    """What an engine's steps carried between two /v1/stats snapshots (exact totals)."""

    steps: int
    step_ms: float | None      # engine step clock, all batch sizes
    requests_per_step: float   # decodes and prefills scheduled per step
    tokens_per_step: float     # decode, draft and prefill tokens per step


def step_load(before: StatsReply, after: StatsReply) -> StepLoad | None:
    """None when no step ran between the two snapshots, or the plugin predates the totals."""
    if None in (before.scheduled_requests, before.scheduled_tokens, after.scheduled_requests,
                after.scheduled_tokens):
        return None
    steps = after.engine_steps - before.engine_steps
    if steps <= 0:
        return None
    c0, c1 = engine_clock(before, 0), engine_clock(after, 0)
    timed = c1.steps - c0.steps
    assert after.scheduled_requests is not None and before.scheduled_requests is not None
    assert after.scheduled_tokens is not None and before.scheduled_tokens is not None
    return StepLoad(steps, (c1.seconds - c0.seconds) / timed * 1e3 if timed > 0 else None,
                    (after.scheduled_requests - before.scheduled_requests) / steps,
                    (after.scheduled_tokens - before.scheduled_tokens) / steps)


def last_seq(stats: StatsReply | None) -> int:
    """The newest step in the stats' per-step samples (-1: none): the cursor for `since`."""
    if stats is None or not stats.recent_steps:
        return -1
    return stats.recent_steps[-1][0]


def steady_steps(stats: StatsReply | None, after: int, k: int, batch: int | None = None,
                 min_batch: float | None = None, max_batch: int | None = None,
                 max_tokens: int | None = None) -> list[float]:
    """Times (ms) of the steps after seq ``after`` that ran at a steady k (verified and drafted
    k: a step's time is verify(previous k) + draft(this k)), with exactly ``batch`` requests, or
    between ``min_batch`` and ``max_batch``, and at most ``max_tokens`` tokens (a pure-decode
    cell leaves out the prefill step that admitted its requests)."""
    if stats is None:
        return []
    out = []
    for seq, b, k_verified, k_drafted, seconds, tokens, *_ in stats.recent_steps:
        if seq <= after or k_verified != k or k_drafted != k:
            continue
        if batch is not None and b != batch:
            continue
        if (min_batch is not None and b < min_batch) or (max_batch is not None and b > max_batch):
            continue
        if max_tokens is not None and tokens > max_tokens:
            continue
        out.append(seconds * 1e3)
    return out


def implausible(tokens: float, steps: StepLoad | None) -> str | None:
    """Why a window's generated-token count cannot be right, or None.

    Each generated token is the decode or an accepted draft of a request in some step, so a
    window generates at most the tokens its steps carried (the plugin's exact totals, read
    just outside the window's two reads: an upper bound), and at least one token once a few
    steps ran; the counter never goes down on one engine."""
    if tokens < 0:
        return f"the generated-token counter went down by {-tokens:.0f} inside the window"
    if steps is None:
        return None
    carried = steps.steps * steps.tokens_per_step
    if tokens > 1.1 * carried + steps.tokens_per_step:
        return (f"{tokens:.0f} tokens generated where the window's {steps.steps} engine steps "
                f"carried {carried:.0f}")
    if tokens == 0 and steps.steps >= 5:
        return f"no token generated in {steps.steps} engine steps"
    return None
