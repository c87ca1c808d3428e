"""Two scrapes of vLLM's /metrics -> the counts of the interval between them, if it has any.

:func:`compare` says whether the later scrape continues the earlier one (the same engine run,
the same series, fresh plugin values) and, if not, why: a restart, an incomplete scrape, or new
series. Only then does :func:`delta` subtract them; the deltas are the accepted_i and drafted_i
of the estimator's â_i = (w·a_i^prior + accepted_i) / (w + drafted_i) (eq. â,
sidecar/estimator.py).

Pure: takes Snapshots (tuner/core/scrape.py), returns values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from tuner.core.errors import ScrapeError
from tuner.core.scrape import Snapshot

__all__ = ["ScrapeContinuity", "SnapshotDelta", "compare", "delta", "is_reset", "stale"]

# counters whose label sets grow during one engine run (a k or cell first used counts from 0)
_OPEN_FAMILIES = ("engine_steps[", "request_steps[", "step_seconds[", "steps_timed[")


@dataclass(slots=True, frozen=True)
class SnapshotDelta:
    """Counter increments between two snapshots of the same engine run."""

    accepted_per_pos: tuple[float, ...]
    drafted_per_pos: tuple[float, ...] | None
    num_drafts: float
    num_draft_tokens: float
    num_accepted_tokens: float
    engine_steps: dict[int, float]
    request_steps: dict[int, float]
    step_time: dict[tuple[int, int], tuple[float, float]]
    explore_steps: float = 0.0
    transition_steps: float = 0.0
    resume_accepted_per_pos: tuple[float, ...] | None = None  # right after a K=0 stretch
    resume_drafted_per_pos: tuple[float, ...] | None = None
    proposed_per_pos: tuple[float, ...] | None = None  # drafts the drafter made (see Snapshot)
    finished: tuple[float, float] | None = None  # (proposed, kept first) of finished requests


@dataclass(slots=True, frozen=True)
class ScrapeContinuity:
    """What two scrapes are to each other, and why.

    ok          same engine run, same series: :func:`delta` gives this interval's counts
    restart     a new engine run: a counter went down, the engine's start time changed, or the
                number of positions (num_speculative_tokens) did
    incomplete  series of ``prev`` are missing from ``cur``, or the plugin's values are stale:
                skip ``cur`` and keep ``prev`` (the next complete scrape covers the gap)
    rebaseline  ``cur`` has series ``prev`` lacked (the plugin's appeared): nothing to subtract
                them from; start again from ``cur``
    """

    kind: Literal["ok", "restart", "incomplete", "rebaseline"]
    reason: str


def _monotone_pairs(snapshot: Snapshot) -> dict[str, float]:
    """Every monotone counter of a snapshot, flattened to name -> value for comparison."""
    pairs = {"num_drafts": snapshot.num_drafts, "num_draft_tokens": snapshot.num_draft_tokens,
             "num_accepted_tokens": snapshot.num_accepted_tokens}
    source = snapshot.accepted_source
    pairs.update({f"{source}_accepted[{i}]": v for i, v in enumerate(snapshot.accepted_per_pos)})
    if source == "plugin":
        pairs.update({f"stock_accepted[{i}]": v
                      for i, v in enumerate(snapshot.stock_accepted_per_pos)})
    pairs.update({f"drafted[{i}]": v for i, v in enumerate(snapshot.drafted_per_pos or ())})
    pairs.update({f"proposed[{i}]": v for i, v in enumerate(snapshot.proposed_per_pos or ())})
    pairs.update({f"finished[{i}]": v for i, v in enumerate(snapshot.finished or ())})
    pairs.update({f"resume_drafted[{i}]": v
                  for i, v in enumerate(snapshot.resume_drafted_per_pos or ())})
    pairs.update({f"resume_accepted[{i}]": v
                  for i, v in enumerate(snapshot.resume_accepted_per_pos or ())})
    pairs.update({f"engine_steps[{k}]": v for k, v in snapshot.engine_steps.items()})
    pairs.update({f"request_steps[{k}]": v for k, v in snapshot.request_steps.items()})
    if snapshot.explore_steps is not None:
        pairs["explore_steps"] = snapshot.explore_steps
    if snapshot.transition_steps is not None:
        pairs["transition_steps"] = snapshot.transition_steps
    for (B, k), (seconds, count) in snapshot.step_time.items():
        pairs[f"step_seconds[{B},{k}]"] = seconds
        pairs[f"steps_timed[{B},{k}]"] = count
    return pairs


def stale(cur: Snapshot, max_stats_age_s: float | None) -> str | None:
    """Why the plugin's values in ``cur`` are too old to count as this interval's, or None."""
    if max_stats_age_s is None or cur.stats_age_s is None or cur.stats_age_s <= max_stats_age_s:
        return None
    return (f"the plugin's values are {cur.stats_age_s:.1f} s old (> {max_stats_age_s:.1f} s): "
            "its engine stats fetch is failing")


def _restart(prev: Snapshot, cur: Snapshot, before: dict[str, float],
             after: dict[str, float]) -> str | None:
    if (prev.engine_started_at is not None and cur.engine_started_at is not None
            and prev.engine_started_at != cur.engine_started_at):
        return (f"the engine's start time changed ({prev.engine_started_at:.3f} -> "
                f"{cur.engine_started_at:.3f})")
    if len(prev.accepted_per_pos) != len(cur.accepted_per_pos):
        return (f"the number of draft positions changed ({len(prev.accepted_per_pos)} -> "
                f"{len(cur.accepted_per_pos)})")
    down = sorted(name for name, value in before.items() if after.get(name, value) < value)
    if down:
        return f"counters went down: {', '.join(down[:5])}"
    return None


def compare(prev: Snapshot, cur: Snapshot, max_stats_age_s: float | None = None) -> ScrapeContinuity:
    """Whether ``cur`` continues ``prev`` (see :class:`ScrapeContinuity`); restart is checked first.

    ``table_version``, ``num_requests_running`` and ``stats_age_s`` are gauges: not compared.
    """
    before, after = _monotone_pairs(prev), _monotone_pairs(cur)
    restart = _restart(prev, cur, before, after)
    if restart is not None:
        return ScrapeContinuity("restart", restart)
    missing = sorted(before.keys() - after.keys())
    if prev.engine_started_at is not None and cur.engine_started_at is None:
        missing.append("engine_started_at")
    if missing:
        return ScrapeContinuity("incomplete", f"series missing from this scrape: "
                                        f"{', '.join(missing[:5])}")
    too_old = stale(cur, max_stats_age_s)
    if too_old is not None:
        return ScrapeContinuity("incomplete", too_old)
    new = sorted(name for name in after.keys() - before.keys()
                 if not name.startswith(_OPEN_FAMILIES))
    if new or (prev.engine_started_at is None and cur.engine_started_at is not None):
        return ScrapeContinuity("rebaseline", f"new series in this scrape: "
                                        f"{', '.join(new[:5]) or 'engine_started_at'}")
    return ScrapeContinuity("ok", "same engine run")


def is_reset(prev: Snapshot, cur: Snapshot) -> bool:
    """True if the engine restarted between the scrapes (see :func:`compare`)."""
    return compare(prev, cur).kind == "restart"


def delta(prev: Snapshot, cur: Snapshot) -> SnapshotDelta:
    """cur - prev for every counter; ScrapeError unless :func:`compare` says "ok"."""
    comparison = compare(prev, cur)
    if comparison.kind != "ok":
        raise ScrapeError(f"cannot subtract these scrapes ({comparison.kind}: "
                          f"{comparison.reason})")
    drafted = None
    if prev.drafted_per_pos is not None and cur.drafted_per_pos is not None:
        drafted = _diff(cur.drafted_per_pos, prev.drafted_per_pos)
    return SnapshotDelta(
        accepted_per_pos=_diff(cur.accepted_per_pos, prev.accepted_per_pos),
        drafted_per_pos=drafted,
        num_drafts=cur.num_drafts - prev.num_drafts,
        num_draft_tokens=cur.num_draft_tokens - prev.num_draft_tokens,
        num_accepted_tokens=cur.num_accepted_tokens - prev.num_accepted_tokens,
        engine_steps=_diff_map(cur.engine_steps, prev.engine_steps),
        request_steps=_diff_map(cur.request_steps, prev.request_steps),
        step_time={key: (s - prev.step_time.get(key, (0.0, 0.0))[0],
                         c - prev.step_time.get(key, (0.0, 0.0))[1])
                   for key, (s, c) in cur.step_time.items()},
        explore_steps=_optional_diff(cur.explore_steps, prev.explore_steps),
        transition_steps=_optional_diff(cur.transition_steps, prev.transition_steps),
        resume_accepted_per_pos=_optional_diffs(cur.resume_accepted_per_pos,
                                                prev.resume_accepted_per_pos),
        resume_drafted_per_pos=_optional_diffs(cur.resume_drafted_per_pos,
                                               prev.resume_drafted_per_pos),
        proposed_per_pos=_optional_diffs(cur.proposed_per_pos, prev.proposed_per_pos),
        finished=None if cur.finished is None or prev.finished is None else (
            cur.finished[0] - prev.finished[0], cur.finished[1] - prev.finished[1]),
    )


def _optional_diffs(cur: tuple[float, ...] | None,
                    prev: tuple[float, ...] | None) -> tuple[float, ...] | None:
    return None if cur is None or prev is None else _diff(cur, prev)


def _optional_diff(cur: float | None, prev: float | None) -> float:
    return 0.0 if cur is None or prev is None else cur - prev


def _diff(cur: tuple[float, ...], prev: tuple[float, ...]) -> tuple[float, ...]:
    """Element-wise cur - prev."""
    return tuple(c - p for c, p in zip(cur, prev, strict=True))


def _diff_map(cur: Mapping[int, float], prev: Mapping[int, float]) -> dict[int, float]:
    """cur - prev per key; keys new in cur count from 0 (a k first used since prev)."""
    return {key: value - prev.get(key, 0.0) for key, value in cur.items()}
