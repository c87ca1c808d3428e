"""One step of the sidecar: observe -> believe -> decide -> publish.

:meth:`Controller.tick` reads the engine (observer.py), updates what the sidecar believes
(belief.py), and rebuilds every ``rebuild_every_steps`` engine steps, or at once on a change of
traffic, new pairs, or another k beating the table at the current load. A rebuild chooses
(rebuild.py, arbiter.py), pushes a table that differs (not in dry-run, under a foreign hold or
where the guardrail holds it out), logs one decision line and checkpoints; a push the guardrail
judges lost is rolled back. publish.py builds what it publishes; app.py only loops.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable

from sidecar import checkpoint, probes, profile_fit, publish, scrape_delta
from sidecar.arbiter import Arbiter, surviving
from sidecar.belief import Belief, cell_fields
from sidecar.counters import Stats
from sidecar.decision import BIAS_NOTE, Decision, Outcome
from sidecar.engine_table import EngineTable
from sidecar.guard_watch import GuardWatch, rollback_reason
from sidecar.guardrail import Sample, Verdict
from sidecar.logs import Conditions
from sidecar.model_error import LiveError
from sidecar.observer import Observer, Read
from sidecar.rebuild import Choice, Inputs, choose
from sidecar.settings import SidecarSettings
from sidecar.state import SidecarState
from tuner.core import scrape
from tuner.core.engine_client import EngineClient
from tuner.core.errors import InvalidInput
from tuner.core.profile import Profile
from tuner.core.table import Table

__all__ = ["Controller", "Stats"]

log = logging.getLogger("sidecar")
RECENT_DECISIONS = 10  # kept for /v1/state and `tabletune status`


class Controller:
    def __init__(self, settings: SidecarSettings, profile: Profile, client: EngineClient,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings, self.profile, self.client, self.clock = settings, profile, client, clock
        self.K = profile.K
        profile_fit.check(profile, None, None, settings.model_name)
        if settings.min_k > profile.K:
            raise InvalidInput(f"--min-k={settings.min_k} exceeds the profile's "
                               f"num_speculative_tokens={profile.K}; use 0..{profile.K}")
        self.prior = profile_fit.prior_of(profile)
        self.profile_sha256 = checkpoint.profile_id(profile)  # what the checkpoint belongs to
        self.conditions = Conditions(log, clock)
        self.stats = Stats()
        self.observer = Observer(client, profile, settings.model_name, settings.interval_s,
                                 self.conditions, self.stats, clock)
        self.belief = Belief(settings, profile, self.prior, checkpoint.restore(
            settings.checkpoint, self.prior, settings.prior_weight, self.profile_sha256),
            self.conditions, clock)
        self.engine_table = EngineTable(settings, profile, client, self.conditions, self.stats, clock)
        self.watch = GuardWatch(settings)
        # the table we wanted before a restart: not to be mistaken for the engine's own
        self.saved_table = checkpoint.saved_table(settings.checkpoint, self.profile_sha256)
        self.pairs_seen = 0  # paired runs at the last rebuild: new ones may settle a duel
        self.live_error: dict[int, LiveError] = {}  # the model's error per served bucket
        self.borrowed_error: dict[int, float] = {}  # served buckets between two of live_error
        self.allowed_k: set[int] | None = None
        self.steps_since_rebuild = 0.0
        self.recommended: Table | None = None
        self.last_decision: Decision | None = None
        self.decisions: deque[Decision] = deque(maxlen=RECENT_DECISIONS)  # newest last
        self.beat = probes.Heartbeat(clock(), settings.interval_s)  # what /healthz reads

    # -- the control loop's bookkeeping (sidecar/app.py) -----------------------------------
    def tick_failed(self, exc: Exception) -> None:
        """A tick raised: count it, back off, and say so once. Call it in the except block:
        the condition logs the traceback being handled."""
        self.stats.failed("tick_error")
        self.observer.tick_failed()
        self.conditions.set("tick", f"error: {type(exc).__name__}", "tick failed; carrying on",
                            exc_info=True)

    def tick_succeeded(self) -> None:
        self.conditions.ok("tick", "ticks succeed again")

    def waiting(self, delay_s: float) -> None:
        """The loop sleeps ``delay_s`` before the next tick: its period, for /healthz."""
        self.beat.loop_delay_s = delay_s

    # -- one tick: connect first ----------------------------------------------------------
    async def _connect(self) -> bool:
        """Connect to the engine's admin endpoint; then the k the table may use."""
        if not await self.engine_table.connect():
            return False
        if self.saved_table is not None:
            self.engine_table.resume(self.saved_table)
            self.saved_table = None
        info = self.engine_table.info
        self.allowed_k = profile_fit.allowed_ks(self.settings.allowed_k, self.settings.min_k,
                                                info, self.K)
        self.recommended = self.proposal(None).table
        log.info("connected", extra={"engine_table": info.table if info else None,
                                     "allowed_k": sorted(self.allowed_k or range(self.K + 1)),
                                     "dry_run": self.settings.dry_run})
        return True

    async def tick(self) -> Decision | None:
        """Scrape, estimate, maybe rebuild and push; the Decision if a rebuild happened."""
        self.beat.tick_started = self.clock()
        try:
            self.engine_table.check_hold()
            if not self.engine_table.is_connected and not await self._connect():
                return None
            read = await self.observer.read(self.engine_table.has_admin, self._ring_since())
            if read is None:
                return None
            snap = read.snapshot
            seen = self.observer.advance(snap, self.engine_table.version)
            if seen.restart is not None:
                self._restarted(seen.restart)
            if seen.delta is not None:
                self._feed(seen.delta, snap)
            if seen.kind in ("ok", "rebaseline", "foreign"):  # a version we did not write?
                await self.engine_table.watch(snap.table_version)
            self.watch.foreign(self.stats.foreign_tables)
            if self.engine_table.needs_sync and not self.settings.dry_run:
                await self.engine_table.sync()
            if seen.kind != "ok":
                if seen.kind == "foreign":  # its steps ran tables we did not see: not ours
                    await self._read_ring(read, skip=True)
                return None
            await self._read_ring(read)
            verdict = self.watch.take()
            if verdict is not None:
                return await self.rollback(verdict)
            trigger = self._detect_change()  # first: a due rebuild must not use stale counts
            if trigger is None and self.steps_since_rebuild >= self.settings.rebuild_every_steps:
                trigger = "scheduled"
            trigger = trigger or self._measured_settles() or self._guard_disagrees()
            return await self.rebuild(trigger) if trigger else None
        finally:
            self.beat.tick_ended = self.clock()

    def _restarted(self, reason: str) -> None:
        self.stats.engine_restarted()
        self.engine_table.restarted()
        self.watch.guard.cancel()  # a verdict across two engine runs would compare nothing
        self.belief.accept_windows.clear()
        log.warning("engine restart", extra={
            "reason": reason, "action": "skipping this interval" +
            ("; re-pushing the table and policy" if self.engine_table.needs_sync else "")})

    def _feed(self, d: scrape_delta.SnapshotDelta, snap: scrape.Snapshot) -> None:
        self.belief.observe(d)
        engine_steps = sum(d.engine_steps.values())
        self.steps_since_rebuild += engine_steps if snap.engine_steps else d.num_drafts
        self.stats.stepped(d.explore_steps, d.transition_steps)
        now, before, batch = self.observer.last_ok_at, self.observer.prev_ok_at, self.belief.batch
        if now is not None and before is not None and now > before and batch is not None:
            # realized goodput this interval: every request's token plus the accepted drafts
            tokens = sum(d.request_steps.values()) + d.num_accepted_tokens
            self.watch.observe(Sample(batch, tokens / (now - before), engine_steps, now - before),
                               now, self.belief.goodput)

    def _ring_since(self) -> int | None:
        """The last step read, when the plugin's ring is to be read this tick (only with the
        plugin, deciding by measured goodput, not in dry-run)."""
        if self.settings.decide_by != "measured" or self.settings.dry_run or not self.engine_table.has_admin:
            return None
        return self.belief.goodput.last_seq

    async def _read_ring(self, read: Read, skip: bool = False) -> None:
        """The plugin's per-step ring since the last step read: realized goodput per cell and
        the paired duel runs (nothing without the plugin, or with decide_by=model); it came
        with the counters, or (an older plugin) is read now. ``skip``: only read past it."""
        since = self._ring_since()
        if since is None:
            return
        ring = read.ring if read.ring is not None else await self.observer.ring(since)
        if ring is None:
            self.belief.goodput.pause()  # the model decides everywhere until it can be read
            return
        for p in self.belief.read_ring(self.observer.took(ring), self.engine_table.table, skip):
            # every pair, so the dependence between neighbours can be estimated from real runs
            log.info("pair", extra={"pair": p.logged()})

    # -- immediate rebuilds ---------------------------------------------------------------
    def _measured_settles(self) -> str | None:
        """New paired runs since the last rebuild: a duel may be settled (the rebuild says)."""
        pairs = sum(len(p) for p in self.belief.goodput.pairs.values())
        if self.settings.decide_by != "measured" or pairs == self.pairs_seen:
            return None
        self.pairs_seen = pairs
        return "measured"

    def _detect_change(self) -> str | None:
        """A change of traffic (sidecar/belief.py drops what is stale): the trigger, if any."""
        change = self.belief.detect_change()
        if change.reverted:
            log.info("step-time change taken back",
                     extra={"step_times": cell_fields(change.reverted)})
        if not change.changed:
            return None
        if change.acceptance is not None:
            # goodput before and after a push under other traffic says nothing of the table:
            # no verdict across the change, and what was held out was judged on the old traffic
            self.watch.guard.forget()
        self.stats.traffic_changed()
        log.info("traffic change", extra={
            **change.log_fields(), "action": "stale live counts dropped; rebuilding now"})
        return "change"

    def _guard_disagrees(self) -> str | None:
        """At the current load, does another k beat the table's beyond confidence? (cheap: only
        when the engine's table is known and a rebuild has something new since the last)."""
        B, table, guard = self.belief.batch_size, self.engine_table.table, self.watch.guard
        if (B is None or table is None or not self.settings.guard_window
                or not guard.has_baseline  # to judge the push
                or self.steps_since_rebuild < self.settings.rebuild_every_steps / 4):
            return None
        current = table.k_at(B, self.K)
        if not self.belief.beaten_at(B, current, self.allowed_k):
            return None
        choice = self.proposal(table)
        if guard.is_held(choice.table, self.clock()) is not None:
            return None  # rolled back already: a rebuild would only say so again
        return "guardrail" if choice.table.k_at(B, self.K) != current else None

    # -- rebuild ---------------------------------------------------------------------------
    def proposal(self, old: Table | None, trigger: str = "scheduled") -> Choice:
        """The table a rebuild would push against ``old`` (sidecar/rebuild.py)."""
        s, belief = self.settings, self.belief
        # measured decisions need the plugin's ring (a stock vLLM, an older plugin or a ring
        # that cannot be read leave the model to decide everywhere) and duels (not in dry-run)
        arbiter = None
        if s.decide_by == "measured" and belief.goodput.measuring and not s.dry_run:
            self.live_error = {} if old is None else belief.model_errors(old)
            live = belief.arbiter_errors(self.live_error)
            self.borrowed_error = {b: e for b, e in live.items() if b not in self.live_error}
            arbiter = Arbiter(belief.goodput, dict(belief.goodput.served), s.model_error,
                              s.min_served, s.max_pairs, s.duel_width, duels=self.engine_table.duels,
                              live_error=live, can_duel=s.explore_share > 0,
                              pairable=frozenset(belief.goodput.pairable()),
                              rotation=self.engine_table.rotation)
        inputs = Inputs(tie=s.tie, confidence=s.confidence, allowed_k=self.allowed_k,
                        cliffs=belief.cliffs, prior_steps=belief.w_T,
                        measured=belief.live_T.measured(belief.T_dense.shape[0], belief.w_T),
                        arbiter=arbiter)
        return choose(belief.blend(), belief.T_dense, belief.acceptance, old, self.K, inputs)

    async def rebuild(self, trigger: str = "scheduled") -> Decision:
        """Choose the table for â and T̂ (eq. G), push it if it differs, log and checkpoint."""
        fresh = await self.engine_table.current()
        self.watch.foreign(self.stats.foreign_tables)
        old = self.engine_table.table
        choice = self.proposal(old, trigger)
        until = self.watch.guard.is_held(choice.table, self.clock())
        if until is not None and choice.table != old:
            outcome: Outcome = "unchanged"
            reason = (f"the guardrail rolled this table back: held out for "
                      f"{until - self.clock():.0f} s more")
        else:
            outcome, reason = await self.engine_table.push(choice.table, fresh)
        if outcome == "pushed" and old is not None and self.settings.guard_window:
            # the changes the pairs decided are judged by the pairs (sidecar/guardrail.py)
            self.watch.guard.start(old, choice.table, choice.measured_switches())
        if outcome == "pushed":
            # served since: what a next push may change; duels where it did not change the k go on
            changed = self.belief.pushed(old, choice.table)
            choice = dataclasses.replace(choice, duels=surviving(choice.duels, changed))
        await self.engine_table.set_exploration(
            choice.duels, choice.urgent and not self.belief.settling(), choice.rotation)
        return self._decide(choice, old, outcome, reason, trigger)

    async def rollback(self, verdict: Verdict) -> Decision:
        """The guardrail's second half: put the table before the push back."""
        old, back = verdict.new, verdict.old
        outcome, reason = await self.engine_table.push(back, await self.engine_table.current())
        self.stats.rolled_back()
        changed = self.belief.pushed(old, back) if outcome == "pushed" else set()
        # the pairs that said "switch" lost to the engine's goodput: measure again from here
        self.belief.goodput.forget()
        if outcome == "pushed":
            # a duel where the rollback changed the k duels the old incumbent: it ends; the
            # others run on until the next rebuild plans from what is served again
            t = self.engine_table
            await t.set_exploration(surviving(t.duels, changed), t.urgent, t.rotation)
        choice = self.proposal(back)
        chosen = Choice(back, choice.proposed, choice.G, choice.a_used, choice.a_raw, [])
        return self._decide(chosen, old, "rolled_back" if outcome == "pushed" else outcome,
                            f"{rollback_reason(verdict, self.settings.guard_hold_s)}; {reason}",
                            "rollback")

    def _decide(self, choice: Choice, old: Table | None, outcome: Outcome, reason: str,
                trigger: str) -> Decision:
        acceptance, source = self.belief.acceptance, self.observer.source or "stock"
        decision = Decision(
            **choice.described(old, self.K), time=self.clock(), outcome=outcome, reason=reason,
            source=source, bias_note=BIAS_NOTE if source == "stock" else None,
            steps=self.steps_since_rebuild, accepted=acceptance.accepted.tolist(),
            drafted=acceptance.drafted.tolist(), prior_weight=acceptance.w,
            engine_version=self.engine_table.version, drift=self.belief.drift_cells, trigger=trigger,
            bookkeeping=trigger != "measured" or outcome == "pushed")
        level = logging.WARNING if outcome in ("rejected", "failed") else logging.INFO
        log.log(level, "rebuild", extra={"decision": decision.model_dump(mode="json")})
        self.stats.rebuilt(outcome)
        self.last_decision, self.recommended = decision, choice.table
        self.decisions.append(decision)
        # the per-rebuild halving, decay and checkpoint, not for a rebuild that only looked at
        # new pairs: they come every ~50 steps in a duel, and halving â at each hands it back
        # to the prior
        if decision.bookkeeping:
            self.steps_since_rebuild = 0.0
            self.belief.finish_rebuild()
            self.save_checkpoint()
        return decision

    def save_checkpoint(self) -> None:
        """Atomic write of the estimator state; a failure is logged, never raised."""
        if self.settings.checkpoint is None:
            return
        try:
            checkpoint.save(self.settings.checkpoint, self.belief.acceptance, self.clock(),
                            self.profile_sha256, self.engine_table.wanted())
        except OSError as exc:
            self.stats.failed("checkpoint")
            self.conditions.set("checkpoint", "failing", "cannot write the checkpoint",
                                error=str(exc))
        else:
            self.conditions.ok("checkpoint", "checkpoint written again")

    # -- what the sidecar publishes (sidecar/publish.py) --------------------------------------
    def readiness(self) -> tuple[bool, str]:
        """/readyz (sidecar/probes.py): from a few timestamps and conditions, never the
        snapshot, so a probe stays cheap and cannot fail on what the snapshot computes."""
        seen = self.observer.last_ok_at
        return probes.readiness(self.settings, self.engine_table.is_connected, self.engine_table.has_admin,
                                None if seen is None else self.clock() - seen,
                                self.conditions.states)

    def liveness(self) -> tuple[bool, str]:
        """/healthz (sidecar/probes.py): does the control loop still turn."""
        return probes.liveness(self.settings, self.clock(), self.beat)

    def snapshot(self) -> SidecarState:
        """GET /v1/state, and what /metrics and the probes read, at one moment."""
        return publish.sidecar_state(self, self.clock())
