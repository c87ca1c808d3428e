"""One step of the sidecar: scrape -> estimate -> maybe rebuild -> maybe push.

:meth:`Controller.tick` is the whole control law of the paper's controller:

1. scrape vLLM's /metrics and take counter deltas since the last complete scrape (a counter
   going down, or a new engine start time, is an engine restart: the live table and policy
   are re-pushed to the new engine; missing series or stale plugin values are an incomplete
   scrape, skipped: tuner.scrape.compare);
2. add the per-position deltas to the estimator, â_i = (w·a_i + accepted_i)/(w + drafted_i)
   (eq. â, sidecar/estimator.py); without the plugin, drafted_i ≈ num_drafts (biased low);
3. every ``rebuild_every_steps`` engine steps, choose the table with tuner.goodput.choose_table
   from the profile's step times and â, push it if it differs from the engine's (never in
   dry-run), log one decision line, halve the live counts, decay w and checkpoint.

Every expected fault (vLLM down, slow, 5xx, garbage, missing series, a 4xx) is handled here
and logged once per state change; the control loop in sidecar/app.py only sleeps and repeats.
The clock is injected so tests can drive ticks directly.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sidecar import checkpoint, compat
from tuner import scrape
from sidecar.decision import BIAS_NOTE, Decision, DriftCell, Outcome, Source, range_gains
from sidecar.drift import DriftTracker, drifting
from sidecar.estimator import decay_prior, estimate, halve_live, observe
from sidecar.logs import Conditions
from sidecar.settings import SidecarSettings
from tuner.engine_client import AdminRejected, EngineClient, TableInfo
from tuner.errors import EngineUnavailable, InvalidInput, ScrapeError
from tuner.goodput import choose_table, interpolate_step_times
from tuner.profile import Profile
from tuner.table import Table

__all__ = ["Controller", "Stats"]

log = logging.getLogger("sidecar")
# plugin values older than this many intervals are stale: not this interval's counts
STALE_INTERVALS = 2.0


@dataclass(slots=True)
class Stats:
    """Counters for the sidecar's own /metrics."""

    rebuilds: Counter[str] = field(default_factory=Counter)  # by outcome
    failures: Counter[str] = field(default_factory=Counter)  # by kind
    pushes: int = 0
    resets: int = 0
    scrapes: int = 0
    scrape_seconds: float = 0.0  # sum over successful scrapes
    last_scrape_seconds: float | None = None
    explore_steps: float = 0.0  # the plugin's exploration steps seen (at the largest K)
    transition_steps: float = 0.0  # steps whose verified and drafted k differ (not timed)


def prior_of(profile: Profile) -> np.ndarray:
    if profile.acceptance is None:
        raise InvalidInput("profile has no acceptance (a_i); finish `tabletune tune` so the "
                           "sidecar has a prior")
    if len(profile.acceptance.a) != profile.K:
        raise InvalidInput(f"profile: acceptance has {len(profile.acceptance.a)} values but "
                           f"num_speculative_tokens={profile.K}; re-run `tabletune tune`")
    return np.asarray(profile.acceptance.a, dtype=np.float64)


class Controller:
    def __init__(self, settings: SidecarSettings, profile: Profile, client: EngineClient,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings, self.profile, self.client, self.clock = settings, profile, client, clock
        self.K = profile.K
        compat.check(profile, None, None, settings.model_name)
        self.prior = prior_of(profile)
        # step times always come from the profile: interpolated once (ms, row b-1 is B=b)
        self.T_dense = interpolate_step_times(profile.grid, profile.step_time_matrix(),
                                              profile.engine.max_num_seqs)
        self.state = checkpoint.restore(settings.checkpoint, self.prior, settings.prior_weight)
        self.drift = DriftTracker()
        self.drift_cells: list[DriftCell] = []
        self.conditions = Conditions(log)
        self.stats = Stats()
        self.info: TableInfo | None = None    # the engine's table, as last read or pushed
        self.has_admin = False
        self.is_connected = False
        self.allowed_k: set[int] | None = None
        self.prev: scrape.Snapshot | None = None
        self.source: Source | None = None      # known after the first scrape
        self.steps_since_rebuild = 0.0
        self.desired: Table | None = None       # what we want the engine to run
        self.needs_sync = False
        self.recommended: Table | None = None
        self.last_decision: Decision | None = None
        self.last_scrape_ok: float | None = None
        self.consecutive_failures = 0
        self.started_at = clock()
        self.tick_started: float | None = None
        self.tick_ended: float | None = None
        self.loop_delay_s = settings.interval_s  # the loop's current pause (back-off), for /healthz

    # -- start ---------------------------------------------------------------------------
    async def _connect(self) -> bool:
        """Read the engine's table, check the profile, set the plugin's policy."""
        try:
            info = await self.client.get_table()
        except EngineUnavailable as exc:
            if not self.settings.dry_run:
                self.stats.failures["admin_unavailable"] += 1
                self.conditions.set("admin", "unavailable", "waiting for the plugin's admin "
                                    "endpoint", error=str(exc))
                return False
            self.conditions.set("admin", "absent", "no admin endpoint: dry-run reads vLLM's "
                                "stock counters only", logging.INFO, error=str(exc))
            info = None
        compat.check(self.profile, info, None, self.settings.model_name)
        if info is not None and not self.settings.dry_run and not await self._put_policy():
            return False
        self.info, self.has_admin, self.is_connected = info, info is not None, True
        self.allowed_k = compat.resolve_allowed_k(self.settings.allowed_k, info, self.K)
        self.recommended = choose_table(self.T_dense, estimate(self.state), self.settings.tie,
                                        self.allowed_k).table
        if info is not None:
            self.conditions.ok("admin", "admin endpoint is back")
        log.info("connected", extra={"engine_table": info.table if info else None,
                                     "allowed_k": sorted(self.allowed_k or range(self.K + 1)),
                                     "dry_run": self.settings.dry_run})
        return True

    async def _put_policy(self) -> bool:
        try:
            await self.client.put_policy(explore_every=self.settings.explore_every,
                                         hysteresis=self.settings.hysteresis)
        except AdminRejected as exc:
            self.stats.failures["policy_rejected"] += 1
            log.error("policy rejected; the engine keeps its own", extra={"error": str(exc)})
            return True  # a 4xx will not change on retry: carry on without it
        except EngineUnavailable as exc:
            self.stats.failures["admin_unavailable"] += 1
            self.conditions.set("admin", "unavailable", "cannot set the plugin's policy",
                                error=str(exc))
            return False
        return True

    # -- one tick ------------------------------------------------------------------------
    async def tick(self) -> Decision | None:
        """Scrape, estimate, maybe rebuild and push; the Decision if a rebuild happened."""
        self.tick_started = self.clock()
        try:
            if not self.is_connected and not await self._connect():
                return None
            snap = await self._scrape()
            if snap is None:
                return None
            is_new = self._advance(snap)
            if self.needs_sync and not self.settings.dry_run:
                await self._sync()
            if not is_new or self.steps_since_rebuild < self.settings.rebuild_every_steps:
                return None
            return await self.rebuild()
        finally:
            self.tick_ended = self.clock()

    async def _scrape(self) -> scrape.Snapshot | None:
        """vLLM's /metrics, parsed; None (and the condition logged) if it cannot be read."""
        started = time.perf_counter()
        try:
            snap = scrape.parse(await self.client.get_metrics(), self.settings.model_name)
        except (EngineUnavailable, ScrapeError) as exc:
            kind = "unavailable" if isinstance(exc, EngineUnavailable) else "unreadable"
            self._scrape_failed(kind, f"vLLM /metrics {kind}; backing off, the engine keeps "
                                "its table", str(exc))
            return None
        if self.last_scrape_ok is None:  # the first scrape: the engine's K, once more
            compat.check(self.profile, None, len(snap.accepted_per_pos))
        elif len(snap.accepted_per_pos) != self.K:
            self.conditions.set("scrape", "mismatch", "the engine now has another K than "
                                "the profile; ignoring its counters",
                                positions=len(snap.accepted_per_pos))
            return None
        elapsed = time.perf_counter() - started
        self.stats.scrapes += 1
        self.stats.scrape_seconds += elapsed
        self.stats.last_scrape_seconds = elapsed
        return snap

    def _scrape_failed(self, kind: str, message: str, error: str) -> None:
        self.stats.failures[f"scrape_{kind}"] += 1
        self.consecutive_failures += 1
        self.conditions.set("scrape", kind, message, error=error)

    def _scrape_complete(self, snap: scrape.Snapshot) -> None:
        self.prev = snap
        self.source = "plugin" if snap.has_plugin else "stock"
        self.consecutive_failures = 0
        self.last_scrape_ok = self.clock()
        self.conditions.ok("scrape", "vLLM /metrics readable and complete again")

    def _advance(self, snap: scrape.Snapshot) -> bool:
        """Feed the deltas since the last complete scrape; False when there are none to feed.

        Only a counter going down or a new engine start time is a restart; series missing
        from this scrape, or plugin values older than STALE_INTERVALS, make it incomplete: it
        is skipped and the last complete scrape kept, so the next one covers the gap.
        """
        max_age_s = STALE_INTERVALS * self.settings.interval_s
        if self.prev is None:
            comparison = scrape.Comparison("rebaseline", "the first scrape")
            stale = scrape.stale(snap, max_age_s)
            if stale is not None:
                comparison = scrape.Comparison("incomplete", stale)
        else:
            comparison = scrape.compare(self.prev, snap, max_age_s)
        if comparison.kind == "restart":
            self._restarted(comparison.reason)
            stale = scrape.stale(snap, max_age_s)
            if stale is not None:  # the plugin's values are the old run's: no baseline
                self.prev, comparison = None, scrape.Comparison("incomplete", stale)
        if comparison.kind == "incomplete":
            self._scrape_failed("incomplete", "vLLM /metrics incomplete; skipping this "
                                "interval until a complete scrape covers it", comparison.reason)
            return False
        prev = self.prev
        self._scrape_complete(snap)
        if comparison.kind == "rebaseline" and prev is not None:
            log.info("new series on vLLM /metrics; counting from this scrape",
                     extra={"reason": comparison.reason})
        if comparison.kind != "ok" or prev is None:
            return False
        self._feed(scrape.delta(prev, snap), snap)
        return True

    def _restarted(self, reason: str) -> None:
        self.stats.resets += 1
        self.needs_sync = self.has_admin
        log.warning("engine restart", extra={
            "reason": reason, "action": "skipping this interval" +
            ("; re-pushing the table and policy" if self.needs_sync else "")})

    def _feed(self, d: scrape.SnapshotDelta, snap: scrape.Snapshot) -> None:
        drafted = (np.asarray(d.drafted_per_pos) if d.drafted_per_pos is not None
                   else np.full(self.K, d.num_drafts))  # stock fallback: biased low
        # a position cannot be kept more often than drafted; stock counters may disagree
        accepted = np.minimum(np.asarray(d.accepted_per_pos), drafted)
        observe(self.state, accepted, drafted)
        engine_steps = sum(d.engine_steps.values())
        self.steps_since_rebuild += engine_steps if snap.engine_steps else d.num_drafts
        self.stats.explore_steps += d.explore_steps
        self.stats.transition_steps += d.transition_steps
        self.drift.observe(d.step_time)
        self._check_drift()

    def _check_drift(self) -> None:
        self.drift_cells = self.drift.cells(self.T_dense)
        slow = drifting(self.drift_cells, self.settings.drift_warn)
        if slow:
            self.conditions.set("drift", "slow", "live step times are slower than the "
                                "profile: the table is built on wrong T",
                                drift_warn=self.settings.drift_warn,
                                cells=[c.model_dump() for c in slow])
        else:
            self.conditions.ok("drift", "live step times are back within drift_warn")

    async def _sync(self) -> None:
        """After an engine restart or a failed push: policy and table back into the engine."""
        try:
            info = await self.client.get_table()
            diffs = compat.mismatches(self.profile, info, None, None)
            if diffs:
                self.needs_sync = False
                log.error("the restarted engine does not match the profile; not pushing",
                          extra={"differences": diffs})
                return
            await self.client.put_policy(explore_every=self.settings.explore_every,
                                         hysteresis=self.settings.hysteresis)
            if self.desired is not None and info.parsed_table() != self.desired:
                info = await self.client.put_table(self.desired)
                self.stats.pushes += 1
                log.info("table re-pushed", extra={"table": info.table, "version": info.version})
            self.info, self.needs_sync = info, False
            self.conditions.ok("sync", "the engine runs our table and policy again")
        except AdminRejected as exc:
            self.needs_sync = False
            self.stats.failures["push_rejected"] += 1
            log.error("re-push rejected", extra={"error": str(exc)})
        except EngineUnavailable as exc:
            self.stats.failures["push_failed"] += 1
            self.conditions.set("sync", "pending", "cannot re-push yet; retrying next tick",
                                error=str(exc))

    # -- rebuild ---------------------------------------------------------------------------
    async def rebuild(self) -> Decision:
        """Choose the table for â (eq. G), push it if it differs, log and checkpoint."""
        a_hat = estimate(self.state)
        choice = choose_table(self.T_dense, a_hat, self.settings.tie, self.allowed_k)
        fresh = await self._engine_table()
        known = fresh or self.info
        old = known.parsed_table() if known is not None else None
        outcome, reason = await self._apply(choice.table, fresh)
        decision = Decision(
            time=self.clock(), outcome=outcome, reason=reason, source=self.source or "stock",
            bias_note=BIAS_NOTE if self.source == "stock" else None,
            steps=self.steps_since_rebuild, accepted=self.state.accepted.tolist(),
            drafted=self.state.drafted.tolist(), prior_weight=self.state.w,
            a_hat=[round(float(a), 6) for a in a_hat], old_table=old.to_list() if old else None,
            new_table=choice.table.to_list(),
            engine_version=self.info.version if self.info is not None else None,
            gains=range_gains(choice.G, old, choice.table, self.K), drift=self.drift_cells)
        self._finish(decision, choice.table)
        return decision

    async def _engine_table(self) -> TableInfo | None:
        """The engine's current table (fresh), None without the admin endpoint or on error."""
        if not self.has_admin:
            return None
        try:
            self.info = await self.client.get_table()
        except EngineUnavailable as exc:
            self.conditions.set("admin", "unavailable", "cannot read the engine's table",
                                error=str(exc))
            return None
        return self.info

    async def _apply(self, new: Table, fresh: TableInfo | None) -> tuple[Outcome, str]:
        current = fresh.parsed_table() if fresh is not None else None
        if self.settings.dry_run:
            same = "; the engine already runs it" if current == new else ""
            return "dry_run", f"dry-run: recommended only, nothing written to the engine{same}"
        if fresh is not None and current == new:
            self.desired = new
            return "unchanged", f"the engine already runs this table (v{fresh.version})"
        try:
            self.info = await self.client.put_table(new)
        except AdminRejected as exc:
            self.stats.failures["push_rejected"] += 1
            return "rejected", str(exc)
        except EngineUnavailable as exc:
            self.stats.failures["push_failed"] += 1
            self.desired, self.needs_sync = new, True
            return "failed", f"{exc}; the engine keeps its table, the push is retried"
        self.stats.pushes += 1
        self.desired = new
        before = f"v{fresh.version}" if fresh is not None else "unknown"
        return "pushed", f"engine table {before} -> v{self.info.version}"

    def _finish(self, decision: Decision, table: Table) -> None:
        level = logging.WARNING if decision.outcome in ("rejected", "failed") else logging.INFO
        log.log(level, "rebuild", extra={"decision": decision.model_dump(mode="json")})
        self.stats.rebuilds[decision.outcome] += 1
        self.last_decision, self.recommended = decision, table
        self.steps_since_rebuild = 0.0
        halve_live(self.state)
        self.drift.halve()
        if self.settings.prior_decay < 1:
            decay_prior(self.state, self.settings.prior_decay)
        self.save_checkpoint()

    def save_checkpoint(self) -> None:
        """Atomic write of the estimator state; a failure is logged, never raised."""
        if self.settings.checkpoint is None:
            return
        try:
            checkpoint.save(self.settings.checkpoint, self.state, self.clock())
        except OSError as exc:
            self.stats.failures["checkpoint"] += 1
            self.conditions.set("checkpoint", "failing", "cannot write the checkpoint",
                                error=str(exc))
        else:
            self.conditions.ok("checkpoint", "checkpoint written again")
