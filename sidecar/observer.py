"""What the sidecar sees of the engine each tick: vLLM's /metrics, parsed, and the counter deltas
since the last complete scrape (issue #37: the controller's reading half, apart from what it
believes and decides).

A scrape that cannot be read, or whose engine now has another K, is a failure (the condition
says which); a complete one is compared with the last complete one (sidecar/scrape_delta.py):
a counter going down or a new engine start time is a restart, missing series or stale plugin
values an incomplete scrape that is skipped (the last complete one kept, so the next covers
the gap). The observer keeps only that bookkeeping; what a restart or a delta means is the
controller's to act on, from the Observation it returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sidecar import profile_fit, scrape_delta
from sidecar.counters import Stats
from sidecar.decision import Source
from sidecar.logs import Conditions
from tuner.core.admin_api import Step
from tuner.core.engine_client import EngineClient
from tuner.core.errors import EngineUnavailable, ScrapeError
from tuner.core.profile import Profile
from tuner.core.scrape import Snapshot, parse

__all__ = ["STALE_INTERVALS", "Observation", "Observer", "RingRead"]

log = logging.getLogger("sidecar")
# plugin values older than this many intervals are stale: not this interval's counts
STALE_INTERVALS = 2.0


@dataclass(frozen=True, slots=True)
class Observation:
    """One scrape against the last complete one: ``kind`` is "ok" (``delta`` holds the counts
    since), "rebaseline" (counting from this scrape), or "incomplete" (skipped);
    ``restart``: why the engine restarted since, if it did."""

    kind: str
    delta: scrape_delta.SnapshotDelta | None = None
    restart: str | None = None


@dataclass(frozen=True, slots=True)
class RingRead:
    """The plugin's engine steps after the seq asked for; ``restart_since``: count from this
    seq instead (the first read starts at the newest step; a new engine run from 0)."""

    steps: list[Step]
    restart_since: int | None = None


class Observer:
    """The last complete scrape, when it and the one before it were taken, and the failures
    since: the state of reading the engine."""

    def __init__(self, client: EngineClient, profile: Profile, model_name: str | None,
                 interval_s: float, conditions: Conditions, stats: Stats,
                 clock: Callable[[], float]) -> None:
        self.client, self.profile, self.model_name = client, profile, model_name
        self.max_age_s = STALE_INTERVALS * interval_s
        self.conditions, self.stats, self.clock = conditions, stats, clock
        self.prev: Snapshot | None = None  # the last complete scrape
        self.source: Source | None = None      # known after the first scrape
        self.last_ok_at: float | None = None   # the last complete scrape
        self.prev_ok_at: float | None = None   # the complete scrape before it
        self.consecutive_failures = 0
        self.ring_started_at: float | None = None  # the engine run the ring's seqs belong to

    async def scrape(self) -> Snapshot | None:
        """vLLM's /metrics, parsed; None (and the condition logged) if it cannot be read."""
        started = time.perf_counter()
        try:
            snap = parse(await self.client.get_metrics(), self.model_name)
        except (EngineUnavailable, ScrapeError) as exc:
            kind = "unavailable" if isinstance(exc, EngineUnavailable) else "unreadable"
            self.failed(kind, f"vLLM /metrics {kind}; backing off, the engine keeps its table",
                        str(exc))
            return None
        if self.last_ok_at is None:  # the first scrape: the engine's K, once more
            profile_fit.check(self.profile, None, len(snap.accepted_per_pos))
        elif len(snap.accepted_per_pos) != self.profile.K:
            self.conditions.set("scrape", "mismatch", "the engine now has another K than "
                                "the profile; ignoring its counters",
                                positions=len(snap.accepted_per_pos))
            return None
        self.stats.scraped(time.perf_counter() - started)
        return snap

    def tick_failed(self) -> None:
        """A whole tick raised: it counts toward the loop's back-off like a failed scrape."""
        self.consecutive_failures += 1

    def failed(self, kind: str, message: str, error: str) -> None:
        self.stats.failed(f"scrape_{kind}")
        self.consecutive_failures += 1
        self.conditions.set("scrape", kind, message, error=error)

    def advance(self, snap: Snapshot) -> Observation:
        """``snap`` against the last complete scrape; it becomes the last complete one unless
        it is incomplete."""
        prev = self.prev
        restart = None
        if prev is None:
            stale = scrape_delta.stale(snap, self.max_age_s)
            comparison = scrape_delta.ScrapeContinuity(*(("incomplete", stale) if stale is not None
                                                   else ("rebaseline", "the first scrape")))
        else:
            comparison = scrape_delta.compare(prev, snap, self.max_age_s)
        if comparison.kind == "restart":
            restart = comparison.reason
            stale = scrape_delta.stale(snap, self.max_age_s)
            if stale is not None:  # the plugin's values are the old run's: no baseline
                self.prev, comparison = None, scrape_delta.ScrapeContinuity("incomplete", stale)
        if comparison.kind == "incomplete":
            self.failed("incomplete", "vLLM /metrics incomplete; skipping this interval until "
                        "a complete scrape covers it", comparison.reason)
            return Observation("incomplete", restart=restart)
        self._complete(snap)
        if comparison.kind == "rebaseline" and prev is not None:
            log.info("new series on vLLM /metrics; counting from this scrape",
                     extra={"reason": comparison.reason})
        if comparison.kind == "ok" and prev is not None:
            return Observation("ok", scrape_delta.delta(prev, snap), restart)
        return Observation(comparison.kind, restart=restart)

    def _complete(self, snap: Snapshot) -> None:
        self.prev = snap
        self.source = "plugin" if snap.has_plugin else "stock"
        self.consecutive_failures = 0
        self.prev_ok_at, self.last_ok_at = self.last_ok_at, self.clock()
        self.conditions.ok("scrape", "vLLM /metrics readable and complete again")

    async def ring(self, last_seq: int) -> RingRead | None:
        """The plugin's per-step ring after ``last_seq``; None (the condition says why) when it
        cannot be read."""
        try:
            started_at, since, restart = self.ring_started_at, last_seq, None
            if started_at is None:  # from the newest step on: what ran before the sidecar
                # started ran tables it did not choose (and the whole ring is ~0.5 MB)
                first = await self.client.get_stats()
                started_at, since = first.started_at, first.engine_steps
                restart = since
            stats = await self.client.get_stats(since=since)
            if stats.started_at != started_at:  # a new engine run numbers from 1 again
                started_at, restart = stats.started_at, 0
                stats = await self.client.get_stats(since=0)  # past the old run's last seq
        except EngineUnavailable as exc:
            self.conditions.set("ring", "unreadable", "the plugin's step ring cannot be read; "
                                "deciding by the model until it can", error=str(exc))
            return None
        self.ring_started_at = started_at
        self.conditions.ok("ring", "the plugin's step ring is readable again")
        return RingRead(stats.recent_steps, restart)
