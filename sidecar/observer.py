"""What the sidecar sees of the engine each tick: one read of its counters, and the counter
deltas since the last complete read (issue #37: the controller's reading half, apart from what
it believes and decides).

Where the plugin's admin endpoint answered at start, a tick reads GET /v1/stats once: the
plugin's exact counters and, in the same reply, the step ring since the last step read
(tuner/core/scrape.from_stats). vLLM's /metrics is read only without it (a stock vLLM, or the
plugin without its admin port): there the plugin's series, when present, come through the API
server's collector and may be stale, which scrape_delta.py checks.

A read that fails, or whose engine now has another K, is a failure (the condition says which);
a complete one is compared with the last complete one (sidecar/scrape_delta.py): a counter
going down or a new engine start time is a restart, missing series or stale plugin values an
incomplete scrape that is skipped (the last complete one kept, so the next covers the gap). The
observer keeps only that bookkeeping; what a restart or a delta means is the controller's to
act on, from the Observation it returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sidecar import profile_fit, scrape_delta
from sidecar.counters import Stats
from sidecar.decision import Source
from sidecar.logs import Conditions
from tuner.core.admin_api import NO_STEPS, StatsReply, Step
from tuner.core.engine_client import EngineClient
from tuner.core.errors import EngineUnavailable, ScrapeError
from tuner.core.profile import Profile
from tuner.core.scrape import Snapshot, from_stats, has_counters, parse

__all__ = ["STALE_INTERVALS", "Observation", "Observer", "Read", "RingRead"]

log = logging.getLogger("sidecar")
# plugin values older than this many intervals are stale: not this interval's counts
STALE_INTERVALS = 2.0


@dataclass(frozen=True, slots=True)
class Observation:
    """One scrape against the last complete one: ``kind`` is "ok" (``delta`` holds the counts
    since), "rebaseline" (counting from this scrape), "foreign" (the engine's table version
    moved to one the sidecar did not write: steps under tables it did not see run, skipped) or
    "incomplete" (skipped); ``restart``: why the engine restarted since, if it did."""

    kind: str
    delta: scrape_delta.SnapshotDelta | None = None
    restart: str | None = None


@dataclass(frozen=True, slots=True)
class RingRead:
    """The plugin's engine steps after the seq asked for; ``restart_since``: count from this
    seq instead (the first read starts at the newest step; a new engine run from 0)."""

    steps: list[Step]
    restart_since: int | None
    started_at: float  # the engine run the seqs belong to


@dataclass(frozen=True, slots=True)
class Read:
    """One tick's read of the engine: its counters, and (from the plugin, when asked) the
    steps its ring holds since the last one read."""

    snapshot: Snapshot
    ring: RingRead | None = None


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
        # where the counters come from, known at the first read: "plugin" (/v1/stats, with
        # the ring) or "metrics" (vLLM's /metrics)
        self.road: Literal["plugin", "metrics"] | None = None

    async def read(self, admin: bool, ring_since: int | None) -> Read | None:
        """The engine's counters: from the plugin's /v1/stats where its admin endpoint answered
        at start (``admin``) and its reply carries them (with the ring after ``ring_since``
        unless None), else from vLLM's /metrics. None (and the condition logged) if they
        cannot be read."""
        started = time.perf_counter()
        where = "the plugin's /v1/stats" if self.road == "plugin" or (
            self.road is None and admin) else "vLLM /metrics"
        try:
            if self.road is None and admin:
                self.road = "plugin" if has_counters(await self.client.get_stats()) else "metrics"
            if self.road == "plugin":
                stats, ring = await self._stats(ring_since)
                snap = from_stats(stats)
                read = Read(snap, ring)
            else:
                snap = parse(await self.client.get_metrics(), self.model_name)
                read = Read(snap)
        except (EngineUnavailable, ScrapeError) as exc:
            kind = "unavailable" if isinstance(exc, EngineUnavailable) else "unreadable"
            self.failed(kind, f"{where} {kind}; backing off, the engine keeps its table",
                        str(exc))
            return None
        self.road = self.road or "metrics"
        if self.last_ok_at is None:  # the first read: the engine's K, once more
            profile_fit.check(self.profile, None, len(snap.accepted_per_pos))
        elif len(snap.accepted_per_pos) != self.profile.K:
            self.conditions.set("scrape", "mismatch", "the engine now has another K than "
                                "the profile; ignoring its counters",
                                positions=len(snap.accepted_per_pos))
            return None
        self.stats.scraped(time.perf_counter() - started)
        return read

    async def _stats(self, ring_since: int | None) -> tuple[StatsReply, RingRead | None]:
        """One GET /v1/stats: the counters, and the ring after ``ring_since`` (the first read
        starts at the newest step: what ran before the sidecar ran tables it did not choose;
        a new engine run is read again from its first step)."""
        if ring_since is None:
            return await self.client.get_stats(since=NO_STEPS), None
        started_at = self.ring_started_at
        stats = await self.client.get_stats(since=NO_STEPS if started_at is None else ring_since)
        restart: int | None = None
        if started_at is None:
            restart = stats.engine_steps
        elif stats.started_at != started_at:  # a new engine run numbers from 1 again
            stats, restart = await self.client.get_stats(since=0), 0
        return stats, RingRead(stats.recent_steps, restart, stats.started_at)

    def took(self, ring: RingRead) -> RingRead:
        """The ring's steps were read into the belief: later reads continue its engine run (a
        ring fetched but not taken, in a tick that ended early, is fetched again)."""
        self.ring_started_at = ring.started_at
        return ring

    def tick_failed(self) -> None:
        """A whole tick raised: it counts toward the loop's back-off like a failed scrape."""
        self.consecutive_failures += 1

    def failed(self, kind: str, message: str, error: str) -> None:
        self.stats.failed(f"scrape_{kind}")
        self.consecutive_failures += 1
        self.conditions.set("scrape", kind, message, error=error)

    def advance(self, snap: Snapshot, ours: int | None = None) -> Observation:
        """``snap`` against the last complete scrape; it becomes the last complete one unless
        it is incomplete. ``ours``: the table version the sidecar knows (its last push or
        read); a scrape whose version moved past it since the last one is "foreign"."""
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
            self.failed("incomplete", "the engine's counters incomplete; skipping this interval "
                        "until a complete read covers it", comparison.reason)
            return Observation("incomplete", restart=restart)
        self._complete(snap)
        if comparison.kind == "rebaseline" and prev is not None:
            log.info("new counter series; counting from this read",
                     extra={"reason": comparison.reason})
        if comparison.kind == "ok" and prev is not None:
            if None not in (prev.table_version, snap.table_version) and \
                    snap.table_version not in (prev.table_version, ours):
                # e.g. a bench that froze the sidecar, ran other tables and put its table back
                log.info("the engine ran a table version we did not write; skipping its steps",
                         extra={"versions": [prev.table_version, snap.table_version, ours]})
                return Observation("foreign", restart=restart)
            return Observation("ok", scrape_delta.delta(prev, snap), restart)
        return Observation(comparison.kind, restart=restart)

    def _complete(self, snap: Snapshot) -> None:
        self.prev = snap
        self.source = "plugin" if snap.has_plugin else "stock"
        self.consecutive_failures = 0
        self.prev_ok_at, self.last_ok_at = self.last_ok_at, self.clock()
        self.conditions.ok("scrape", "the engine's counters readable and complete again")

    async def ring(self, last_seq: int) -> RingRead | None:
        """The plugin's per-step ring after ``last_seq``, read apart from the counters (a plugin
        whose /v1/stats does not carry them); None (the condition says why) when it cannot be
        read."""
        try:
            _, ring = await self._stats(last_seq)
        except EngineUnavailable as exc:
            self.conditions.set("ring", "unreadable", "the plugin's step ring cannot be read; "
                                "deciding by the model until it can", error=str(exc))
            return None
        self.conditions.ok("ring", "the plugin's step ring is readable again")
        return ring
