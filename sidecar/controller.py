"""One step of the sidecar: scrape -> estimate -> maybe rebuild -> maybe push.

:meth:`Controller.tick` is the whole control law of the paper's controller:

1. scrape vLLM's /metrics and take counter deltas since the last complete scrape (a counter
   going down, or a new engine start time, is an engine restart: the live table and policy
   are re-pushed to the new engine; missing series or stale plugin values are an incomplete
   scrape, skipped: sidecar/interval.py);
2. add the per-position deltas to the estimator, â_i = (w·a_i + accepted_i)/(w + drafted_i)
   (eq. â, sidecar/estimator.py); without the plugin, drafted_i ≈ num_drafts (biased low);
3. every ``rebuild_every_steps`` engine steps, choose the table with tuner.goodput.choose_table
   from the profile's step times and â, push it if it differs from the engine's (never in
   dry-run, nor while holding off after someone else wrote the table: sidecar/engine_table.py),
   log one decision line, halve the live counts, decay w and checkpoint.

Every expected fault (vLLM down, slow, 5xx, garbage, missing series, a 4xx) is handled here
and logged once per state change; the control loop in sidecar/app.py only sleeps and repeats.
The clock is injected so tests can drive ticks directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np

from sidecar import checkpoint, compat, interval
from sidecar.decision import BIAS_NOTE, Decision, DriftCell, Source, range_gains
from sidecar.drift import DriftTracker, drifting
from sidecar.engine_table import EngineTable
from sidecar.estimator import decay_prior, estimate, halve_live, observe
from sidecar.logs import Conditions
from sidecar.settings import SidecarSettings
from sidecar.stats import Stats
from tuner import scrape
from tuner.engine_client import EngineClient
from tuner.errors import EngineUnavailable, InvalidInput, ScrapeError
from tuner.goodput import choose_table, interpolate_step_times
from tuner.profile import Profile
from tuner.table import Table

__all__ = ["Controller", "Stats"]

log = logging.getLogger("sidecar")
# plugin values older than this many intervals are stale: not this interval's counts
STALE_INTERVALS = 2.0


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
        self.conditions = Conditions(log, clock)
        self.stats = Stats()
        self.engine = EngineTable(settings, profile, client, self.conditions, self.stats, clock)
        self.allowed_k: set[int] | None = None
        self.prev: scrape.Snapshot | None = None  # the last complete scrape
        self.source: Source | None = None      # known after the first scrape
        self.steps_since_rebuild = 0.0
        self.recommended: Table | None = None
        self.last_decision: Decision | None = None
        self.last_scrape_ok_at: float | None = None  # the last complete scrape
        self.consecutive_failures = 0
        self.started_at = clock()
        self.tick_started: float | None = None
        self.tick_ended: float | None = None
        self.loop_delay_s = settings.interval_s  # the loop's current pause (back-off), for /healthz

    # -- start ---------------------------------------------------------------------------
    async def _connect(self) -> bool:
        """Connect to the engine's admin endpoint; then the k the table may use."""
        if not await self.engine.connect():
            return False
        info = self.engine.info
        self.allowed_k = compat.resolve_allowed_k(self.settings.allowed_k, info, self.K)
        self.recommended = choose_table(self.T_dense, estimate(self.state), self.settings.tie,
                                        self.allowed_k).table
        log.info("connected", extra={"engine_table": info.table if info else None,
                                     "allowed_k": sorted(self.allowed_k or range(self.K + 1)),
                                     "dry_run": self.settings.dry_run})
        return True

    # -- one tick ------------------------------------------------------------------------
    async def tick(self) -> Decision | None:
        """Scrape, estimate, maybe rebuild and push; the Decision if a rebuild happened."""
        self.tick_started = self.clock()
        try:
            self.engine.check_hold()
            if not self.engine.is_connected and not await self._connect():
                return None
            snap = await self._scrape()
            if snap is None:
                return None
            kind = self._advance(snap)
            if kind in ("ok", "rebaseline"):  # the same engine run: a version we did not write?
                await self.engine.watch(snap.table_version)
            if self.engine.needs_sync and not self.settings.dry_run:
                await self.engine.sync()
            if kind != "ok" or self.steps_since_rebuild < self.settings.rebuild_every_steps:
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
        if self.last_scrape_ok_at is None:  # the first scrape: the engine's K, once more
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
        self.last_scrape_ok_at = self.clock()
        self.conditions.ok("scrape", "vLLM /metrics readable and complete again")

    def _advance(self, snap: scrape.Snapshot) -> str:
        """Feed the deltas since the last complete scrape; "ok" if it did, else why not.

        Only a counter going down or a new engine start time is a restart; series missing
        from this scrape, or plugin values older than STALE_INTERVALS, make it incomplete: it
        is skipped and the last complete scrape kept, so the next one covers the gap.
        """
        max_age_s = STALE_INTERVALS * self.settings.interval_s
        prev = self.prev
        if prev is None:
            stale = interval.stale(snap, max_age_s)
            comparison = interval.Comparison(*(("incomplete", stale) if stale is not None
                                             else ("rebaseline", "the first scrape")))
        else:
            comparison = interval.compare(prev, snap, max_age_s)
        if comparison.kind == "restart":
            self._restarted(comparison.reason)
            stale = interval.stale(snap, max_age_s)
            if stale is not None:  # the plugin's values are the old run's: no baseline
                self.prev, comparison = None, interval.Comparison("incomplete", stale)
        if comparison.kind == "incomplete":
            self._scrape_failed("incomplete", "vLLM /metrics incomplete; skipping this "
                                "interval until a complete scrape covers it", comparison.reason)
            return comparison.kind
        self._scrape_complete(snap)
        if comparison.kind == "rebaseline" and prev is not None:
            log.info("new series on vLLM /metrics; counting from this scrape",
                     extra={"reason": comparison.reason})
        if comparison.kind == "ok" and prev is not None:
            self._feed(interval.delta(prev, snap), snap)
        return comparison.kind

    def _restarted(self, reason: str) -> None:
        self.stats.resets += 1
        self.engine.restarted()
        log.warning("engine restart", extra={
            "reason": reason, "action": "skipping this interval" +
            ("; re-pushing the table and policy" if self.engine.needs_sync else "")})

    def _feed(self, d: interval.SnapshotDelta, snap: scrape.Snapshot) -> None:
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

    # -- rebuild ---------------------------------------------------------------------------
    async def rebuild(self) -> Decision:
        """Choose the table for â (eq. G), push it if it differs, log and checkpoint."""
        a_hat = estimate(self.state)
        choice = choose_table(self.T_dense, a_hat, self.settings.tie, self.allowed_k)
        fresh = await self.engine.read()
        known = fresh or self.engine.info
        old = known.parsed_table() if known is not None else None
        outcome, reason = await self.engine.push(choice.table, fresh)
        info = self.engine.info
        decision = Decision(
            time=self.clock(), outcome=outcome, reason=reason, source=self.source or "stock",
            bias_note=BIAS_NOTE if self.source == "stock" else None,
            steps=self.steps_since_rebuild, accepted=self.state.accepted.tolist(),
            drafted=self.state.drafted.tolist(), prior_weight=self.state.w,
            a_hat=[round(float(a), 6) for a in a_hat], old_table=old.to_list() if old else None,
            new_table=choice.table.to_list(),
            engine_version=info.version if info is not None else None,
            gains=range_gains(choice.G, old, choice.table, self.K), drift=self.drift_cells)
        self._finish(decision, choice.table)
        return decision

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
