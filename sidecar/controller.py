"""One step of the sidecar: scrape -> estimate -> maybe rebuild -> maybe push.

:meth:`Controller.tick` is the whole control law of the paper's controller:

1. scrape vLLM's /metrics and take counter deltas since the last complete scrape
   (sidecar/observer.py; a restart re-pushes the live table and policy to the new engine, an
   incomplete scrape is skipped);
2. add the per-position deltas to the estimator, â_i = (w·a_i + accepted_i)/(w + drafted_i)
   (eq. â, sidecar/estimator.py); without the plugin, drafted_i ≈ num_drafts (biased low);
3. add the per-(B bucket, k) step-time deltas to the live step times, T̂ = the profile's T
   blended with the engine's clock (eq. T̂, sidecar/step_times.py);
4. rebuild every ``rebuild_every_steps`` engine steps, and at once when the recent window
   shows a change of acceptance or step time (sidecar/change.py: the stale live counts are
   dropped and w lowered first) or when, at the current load, the table's k loses to another
   beyond confidence (the guardrail's first half). A rebuild chooses with the confidence rule
   from â and T̂ and keeps only the changes whose gain is beyond the tie (sidecar/rebuild.py),
   pushes if that differs from the engine's table (never in dry-run, nor while holding off
   after someone else wrote the table: sidecar/engine_table.py, nor a table the guardrail holds
   out), logs one decision line, halves the live counts, decays w and checkpoints;
5. after a push, the guardrail compares live goodput before and after it and rolls the push
   back when it dropped beyond noise (sidecar/guardrail.py).

Every expected fault (vLLM down, slow, 5xx, garbage, missing series, a 4xx) is handled here
and logged once per state change; the control loop in sidecar/app.py only sleeps and repeats.
The clock is injected so tests can drive ticks directly.

It reads through sidecar/observer.py, believes through sidecar/belief.py (acceptance, step
times, measured goodput, the change tests) and decides and publishes here; each helper
(guardrail, engine table, counters) is changed through its own operations. What it
publishes is one SidecarState (sidecar/state.py) built by :meth:`Controller.snapshot`, which
/v1/state, /metrics, the probes and `tabletune status` read instead of its fields.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from sidecar import checkpoint, probes, profile_fit, scrape_delta
from sidecar.decision import BIAS_NOTE, Decision, Outcome, Source, range_gains
from sidecar.engine_table import EngineTable
from sidecar.estimator import DRAW_PSEUDO, estimate
from sidecar.guardrail import Guardrail, PairBounds, PairKey, Sample, Verdict
from sidecar.logs import Conditions
from sidecar.belief import Belief
from sidecar.model_error import LiveError, live_errors
from sidecar.observer import Observer
from sidecar.arbiter import Arbiter
from sidecar.rebuild import Choice, Inputs, choose, projected
from sidecar.settings import SidecarSettings
from sidecar.state import (ConditionDetail, Estimator, ForeignHold, GuardrailState, HeldOut, LiveCell,
                           ModelError, PredictedGoodput, Process, RecentDecision, SidecarState,
                           StepTimes)
from sidecar.counters import Stats
from sidecar.step_times import Blend
from tuner.core import scrape
from tuner.core.engine_client import EngineClient
from tuner.core.errors import InvalidInput, ProfileMismatch
from tuner.core.confidence import better_at
from tuner.core.goodput import goodput as model_goodput
from tuner.core.profile import Profile
from tuner.core.table import Table

__all__ = ["Controller", "Stats"]

log = logging.getLogger("sidecar")
RECENT_DECISIONS = 10  # kept for /v1/state and `tabletune status`


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
        profile_fit.check(profile, None, None, settings.model_name)
        if settings.min_k > profile.K:
            raise InvalidInput(f"--min-k={settings.min_k} exceeds the profile's "
                               f"num_speculative_tokens={profile.K}; use 0..{profile.K}")
        self.prior = prior_of(profile)
        self.profile_sha256 = checkpoint.profile_id(profile)  # what the checkpoint belongs to
        self.conditions = Conditions(log, clock)
        # what it believes of the traffic: acceptance, step times, measured goodput, changes
        self.belief = Belief(settings, profile, self.prior, checkpoint.restore(
            settings.checkpoint, self.prior, settings.prior_weight, self.profile_sha256),
            self.conditions, clock)
        # the table we wanted before a restart: not to be mistaken for the engine's own
        self.saved_table = checkpoint.saved_table(settings.checkpoint, self.profile_sha256)
        self.pairs_seen = 0  # paired runs at the last rebuild: new ones may settle a duel
        self.live_error: dict[int, LiveError] = {}  # the model's error per served bucket
        self.guard = Guardrail(window=settings.guard_window, drop=settings.guard_drop,
                               hold_s=settings.guard_hold_s, min_steps=settings.guard_min_steps)
        self.pending_rollback: Verdict | None = None
        self.foreign_seen = 0  # foreign table writes the guardrail has already heard of
        self.last_batch: float | None = None  # mean requests per step of the last interval
        self.stats = Stats()
        self.engine = EngineTable(settings, profile, client, self.conditions, self.stats, clock)
        self.allowed_k: set[int] | None = None
        self.steps_since_rebuild = 0.0
        self.recommended: Table | None = None
        self.last_decision: Decision | None = None
        self.decisions: deque[Decision] = deque(maxlen=RECENT_DECISIONS)  # newest last
        # reading the engine: the last complete scrape, its time, the failures since
        self.observer = Observer(client, profile, settings.model_name, settings.interval_s,
                                 self.conditions, self.stats, clock)
        self.started_at = clock()
        self.tick_started: float | None = None
        self.tick_ended: float | None = None
        self.loop_delay_s = settings.interval_s  # the loop's current pause (back-off), for /healthz

    # -- the control loop's bookkeeping (sidecar/app.py) -----------------------------------
    @property
    def prev(self) -> scrape.Snapshot | None:
        return self.observer.prev

    @property
    def source(self) -> Source | None:
        return self.observer.source

    @property
    def last_scrape_ok_at(self) -> float | None:
        return self.observer.last_ok_at

    @property
    def consecutive_failures(self) -> int:
        return self.observer.consecutive_failures

    @property
    def connected(self) -> bool:
        """The engine's admin endpoint (or, in dry-run, its absence) is known."""
        return self.engine.is_connected

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
        self.loop_delay_s = delay_s

    # -- start ---------------------------------------------------------------------------
    async def _connect(self) -> bool:
        """Connect to the engine's admin endpoint; then the k the table may use."""
        if not await self.engine.connect():
            return False
        if self.saved_table is not None:
            self.engine.resume(self.saved_table)
            self.saved_table = None
        info = self.engine.info
        allowed = profile_fit.resolve_allowed_k(self.settings.allowed_k, info, self.K)
        if self.settings.min_k:  # a floor: never fewer drafts than min_k
            allowed = {k for k in (allowed or range(self.K + 1)) if k >= self.settings.min_k}
            if not allowed:
                raise ProfileMismatch(
                    f"--min-k={self.settings.min_k} leaves no k of --allowed-k="
                    f"{self.settings.allowed_k!r} (the engine's: "
                    f"{sorted(info.startup_k) if info and info.startup_k else 'unknown'}); "
                    "lower --min-k or pass --allowed-k all")
        self.allowed_k = allowed
        self.recommended = self.choose(None).table
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
            snap = await self.observer.scrape()
            if snap is None:
                return None
            seen = self.observer.advance(snap)
            if seen.restart is not None:
                self._restarted(seen.restart)
            if seen.delta is not None:
                self._feed(seen.delta, snap)
            kind = seen.kind
            if kind in ("ok", "rebaseline"):  # the same engine run: a version we did not write?
                await self.engine.watch(snap.table_version)
            self._check_foreign()
            if self.engine.needs_sync and not self.settings.dry_run:
                await self.engine.sync()
            if kind != "ok":
                return None
            await self._read_ring()
            if self.pending_rollback is not None:
                return await self.rollback(self.pending_rollback)
            trigger = self._detect_change()  # first: a due rebuild must not use stale counts
            if trigger is None and self.steps_since_rebuild >= self.settings.rebuild_every_steps:
                trigger = "scheduled"
            trigger = trigger or self._measured_settles() or self._guard_disagrees()
            return await self.rebuild(trigger) if trigger else None
        finally:
            self.tick_ended = self.clock()

    def _restarted(self, reason: str) -> None:
        self.stats.engine_restarted()
        self.engine.restarted()
        self.guard.cancel()  # a verdict across two engine runs would compare nothing
        self.belief.accept_windows.clear()
        log.warning("engine restart", extra={
            "reason": reason, "action": "skipping this interval" +
            ("; re-pushing the table and policy" if self.engine.needs_sync else "")})

    def _feed(self, d: scrape_delta.SnapshotDelta, snap: scrape.Snapshot) -> None:
        self.belief.observe(d)
        engine_steps = sum(d.engine_steps.values())
        self.steps_since_rebuild += engine_steps if snap.engine_steps else d.num_drafts
        self.stats.stepped(d.explore_steps, d.transition_steps)
        self._guard_sample(d, engine_steps)

    async def _read_ring(self) -> None:
        """The plugin's per-step ring since the last step read: realized goodput per cell and
        the paired duel runs (nothing without the plugin, or with decide_by=model)."""
        if self.settings.decide_by != "measured" or self.settings.dry_run or not self.engine.has_admin:
            return
        read = await self.observer.ring(self.belief.goodput.last_seq)
        if read is None:
            self.belief.goodput.pause()  # the model decides everywhere until it can be read
            return
        if read.restart_since is not None:
            self.belief.goodput.restart(since=read.restart_since)
        info = self.engine.info
        table = info.parsed_table() if info is not None else None
        dense = table.dense(self.profile.engine.max_num_seqs, self.K) if table is not None else None
        for p in self.belief.goodput.ingest(read.steps, dense):
            # every pair, so the dependence between neighbours can be estimated from real runs
            log.info("pair", extra={"pair": {"seq": p.first, "bucket": p.bucket, "k": p.k,
                                             "ref": p.ref, "log_ratio": round(p.log_ratio, 6),
                                             "steps": p.steps}})

    def _measured_settles(self) -> str | None:
        """New paired runs since the last rebuild: a duel may be settled (the rebuild says)."""
        pairs = sum(len(p) for p in self.belief.goodput.pairs.values())
        if self.settings.decide_by != "measured" or pairs == self.pairs_seen:
            return None
        self.pairs_seen = pairs
        return "measured"

    def _guard_sample(self, d: scrape_delta.SnapshotDelta, engine_steps: float) -> None:
        """One interval of realized goodput for the guardrail: tokens per second this interval,
        with its engine steps and seconds (the guardrail pools intervals into samples)."""
        now, before = self.observer.last_ok_at, self.observer.prev_ok_at
        request_steps = sum(d.request_steps.values())
        if now is None or before is None or now <= before or engine_steps <= 0 or request_steps <= 0:
            self.last_batch = None
            return
        self.last_batch = request_steps / engine_steps
        tokens = request_steps + d.num_accepted_tokens
        if self.settings.guard_window and not self.settings.dry_run:
            scrape = Sample(self.last_batch, tokens / (now - before), engine_steps, now - before)
            verdict = self.guard.observe(scrape, now, self._pair_bounds(self.guard.wanted()))
            if verdict is not None:
                log.info("guardrail verdict", extra={"verdict": {
                    "rolled_back": verdict.rolled_back, "ratio": verdict.ratio, "t": verdict.t,
                    "before": verdict.before, "after": verdict.after,
                    "table": verdict.new_table, "judged_by": verdict.judged_by,
                    "paired": [dataclasses.asdict(c) for c in verdict.paired]}})
                if verdict.rolled_back:
                    self.pending_rollback = verdict

    def _pair_bounds(self, wanted: tuple[PairKey, ...]) -> PairBounds:
        """G(k_new)/G(k_old) from the pairs for each (bucket, k_new, k_old) a guardrail trial
        judges, at the rebuild's confidence split over them (Bonferroni: any of them can roll
        the push back)."""
        alpha = (1.0 - self.settings.confidence) / max(len(wanted), 1)
        out: dict[PairKey, tuple[float, float] | None] = {}
        for key in wanted:
            c = self.belief.goodput.compare(*key, alpha)
            out[key] = None if c is None else (c.low, c.high)
        return out

    def _check_foreign(self) -> None:
        """Someone else wrote the engine's table: a guardrail trial would judge their table."""
        if self.stats.foreign_tables != self.foreign_seen:
            self.foreign_seen = self.stats.foreign_tables
            self.guard.cancel()

    # -- immediate rebuilds ---------------------------------------------------------------
    def _detect_change(self) -> str | None:
        """A change of traffic (sidecar/belief.py drops what is stale): the trigger, if any."""
        change = self.belief.detect_change()
        if change.reverted:
            log.info("step-time change taken back", extra={"step_times": [
                {"batch_size": c.batch_size, "k": c.k, "recent_ms": c.recent_ms,
                 "estimate_ms": c.estimate_ms, "steps": c.steps} for c in change.reverted]})
        if not change.changed:
            return None
        found = change.acceptance
        if found is not None:
            # goodput before and after a push under other traffic says nothing of the table:
            # no verdict across the change, and what was held out was judged on the old traffic
            self.guard.forget()
        self.stats.traffic_changed()
        log.info("traffic change", extra={
            "acceptance": None if found is None else {
                "position": found.position, "recent": found.recent, "older": found.older,
                "reference": found.reference, "drafted": found.drafted, "z": found.z},
            "step_times": [{"batch_size": c.batch_size, "k": c.k, "recent_ms": c.recent_ms,
                            "estimate_ms": c.estimate_ms, "steps": c.steps} for c in change.slow],
            "action": "stale live counts dropped; rebuilding now"})
        return "change"

    def _guard_disagrees(self) -> str | None:
        """At the current load, does another k beat the table's beyond confidence? (cheap: only
        when the engine's table is known and a rebuild has something new since the last)."""
        info = self.engine.info
        if (self.last_batch is None or info is None or not self.settings.guard_window
                or not self.guard.has_baseline  # to judge the push
                or self.steps_since_rebuild < self.settings.rebuild_every_steps / 4):
            return None
        table = info.parsed_table()
        if table is None:
            return None
        B = min(max(int(round(self.last_batch)), 1), self.profile.engine.max_num_seqs)
        current = table.k_at(B, self.K)
        blend = self.blend()
        a_used = projected(self.belief.acceptance)[0]
        s = self.settings
        acceptance = self.belief.acceptance
        found = better_at(B, blend.T[B - 1], blend.sigma[B - 1], a_used,
                          acceptance.w + acceptance.drafted, current, self.allowed_k, s.tie,
                          s.confidence, pseudo=DRAW_PSEUDO)
        if found is None:
            return None
        choice = self.choose(table)
        if self.guard.is_held(choice.table, self.clock()) is not None:
            return None  # rolled back already: a rebuild would only say so again
        return "guardrail" if choice.table.k_at(B, self.K) != current else None

    # -- rebuild ---------------------------------------------------------------------------
    def blend(self) -> Blend:
        return self.belief.blend()

    def choose(self, old: Table | None, trigger: str = "scheduled") -> Choice:
        """The table a rebuild would push against ``old`` (sidecar/rebuild.py)."""
        s = self.settings
        blend = self.blend()
        # measured decisions need the plugin's ring (a stock vLLM, an older plugin or a ring
        # that cannot be read leave the model to decide everywhere) and duels (not in dry-run)
        measuring = s.decide_by == "measured" and self.belief.goodput.measuring and not s.dry_run
        arbiter = None
        if measuring:
            self.live_error = {} if old is None else live_errors(
                self.belief.goodput, old.dense(self.profile.engine.max_num_seqs, self.K)[1:], blend.T,
                projected(self.belief.acceptance)[0])
            # the model switches nothing on the seconds after a change of acceptance: its counts
            # may still hold the change's own transient (one window of new counts first)
            settling = self.belief.settling()
            arbiter = Arbiter(self.belief.goodput, dict(self.belief.goodput.served), s.model_error,
                              s.min_served, s.max_pairs, s.duel_width, duels=self.engine.duels,
                              live_error={} if settling else {
                                  b: e.error for b, e in self.live_error.items()},
                              can_duel=s.explore_share > 0)
        inputs = Inputs(tie=s.tie, confidence=s.confidence, allowed_k=self.allowed_k,
                        cliffs=self.belief.cliffs, prior_steps=self.belief.w_T,
                        measured=self.belief.live_T.measured(self.belief.T_dense.shape[0], self.belief.w_T),
                        arbiter=arbiter)
        return choose(blend, self.belief.T_dense, self.belief.acceptance, old, self.K, inputs)

    async def rebuild(self, trigger: str = "scheduled") -> Decision:
        """Choose the table for â and T̂ (eq. G), push it if it differs, log and checkpoint."""
        fresh = await self.engine.read()
        self._check_foreign()
        known = fresh or self.engine.info
        old = known.parsed_table() if known is not None else None
        choice = self.choose(old, trigger)
        until = self.guard.is_held(choice.table, self.clock())
        if until is not None and choice.table != old:
            outcome: Outcome = "unchanged"
            reason = (f"the guardrail rolled this table back: held out for "
                      f"{until - self.clock():.0f} s more")
        else:
            outcome, reason = await self.engine.push(choice.table, fresh)
        if outcome == "pushed" and old is not None and self.settings.guard_window:
            # the changes the pairs decided are judged by the pairs (sidecar/guardrail.py)
            measured = tuple((c.bucket, c.k_old, c.k) for c in choice.calls
                             if c.status == "switch" and c.decided_by == "measured")
            self.guard.start(old, choice.table, measured)
        if outcome == "pushed":
            self.belief.goodput.mark()  # served since this push: the buckets a next push may change
            choice = dataclasses.replace(choice, duels=())  # the new k's have no verdicts yet
        await self.engine.set_duels(choice.duels)
        return self._decide(choice, old, outcome, reason, trigger)

    async def rollback(self, verdict: Verdict) -> Decision:
        """The guardrail's second half: put the table before the push back."""
        self.pending_rollback = None
        old, back = verdict.new, verdict.old
        outcome, reason = await self.engine.push(back, await self.engine.read())
        self.stats.rolled_back()
        # the pairs that said "switch" lost to the engine's goodput: measure again from here
        self.belief.goodput.forget()
        self.belief.goodput.mark()
        choice = self.choose(back)
        if verdict.judged_by == "pairs":
            lost = "; ".join(f"B band {c.bucket}: k={c.k_new} over k={c.k_old} "
                             f"[{c.low:.4f}, {c.high:.4f}]" for c in verdict.paired
                             if c.high is not None and c.low is not None and c.high < 1.0)
            why = f"guardrail: the pairs at the buckets it changed turned against it ({lost})"
        else:
            why = (f"guardrail: live goodput {verdict.ratio:.3f}x of before (t={verdict.t}, "
                   f"{verdict.before}+{verdict.after} samples)")
        reason = (f"{why} after pushing {verdict.new_table}; "
                  f"held out {self.settings.guard_hold_s:g} s; {reason}")
        chosen = Choice(back, choice.proposed, choice.G, choice.a_used, choice.a_raw, [])
        return self._decide(chosen, old, "rolled_back" if outcome == "pushed" else outcome,
                            reason, "rollback")

    def _decide(self, choice: Choice, old: Table | None, outcome: Outcome, reason: str,
                trigger: str) -> Decision:
        info = self.engine.info
        decision = Decision(
            time=self.clock(), outcome=outcome, reason=reason, source=self.source or "stock",
            bias_note=BIAS_NOTE if self.source == "stock" else None,
            steps=self.steps_since_rebuild, accepted=self.belief.acceptance.accepted.tolist(),
            drafted=self.belief.acceptance.drafted.tolist(), prior_weight=self.belief.acceptance.w,
            a_hat=[round(float(a), 6) for a in choice.a_used],
            a_raw=[round(float(a), 6) for a in choice.a_raw],
            old_table=old.to_list() if old else None, new_table=choice.table.to_list(),
            engine_version=info.version if info is not None else None,
            gains=range_gains(choice.G, old, choice.table, self.K), drift=self.belief.drift_cells,
            trigger=trigger, changes=[c for c in choice.changes if c.kept] or choice.changes,
            calls=list(choice.calls), duels=[[lo, hi, list(ks)] for lo, hi, ks in choice.duels],
            bookkeeping=trigger != "measured" or outcome == "pushed")
        self._finish(decision, choice.table)
        return decision

    def _finish(self, decision: Decision, table: Table) -> None:
        """Log the decision; with its ``bookkeeping`` (not for a rebuild that only looked at new
        pairs and pushed nothing), the per-rebuild halving, decay and checkpoint too: new pairs
        come every ~50 steps during a duel, and halving live acceptance at each would hand â
        back to the prior."""
        level = logging.WARNING if decision.outcome in ("rejected", "failed") else logging.INFO
        log.log(level, "rebuild", extra={"decision": decision.model_dump(mode="json")})
        self.stats.rebuilt(decision.outcome)
        self.last_decision, self.recommended = decision, table
        self.decisions.append(decision)
        if not decision.bookkeeping:
            return
        self.steps_since_rebuild = 0.0
        self.belief.finish_rebuild()
        self.save_checkpoint()

    def _wanted(self) -> checkpoint.SavedTable | None:
        """The table we want the engine to run, and the engine's version while it runs it."""
        desired, info = self.engine.desired, self.engine.info
        if desired is None:
            return None
        ours = info is not None and info.parsed_table() == desired
        return checkpoint.SavedTable(desired, info.version if ours and info else None)

    def save_checkpoint(self) -> None:
        """Atomic write of the estimator state; a failure is logged, never raised."""
        if self.settings.checkpoint is None:
            return
        try:
            checkpoint.save(self.settings.checkpoint, self.belief.acceptance, self.clock(),
                            self.profile_sha256, self._wanted())
        except OSError as exc:
            self.stats.failed("checkpoint")
            self.conditions.set("checkpoint", "failing", "cannot write the checkpoint",
                                error=str(exc))
        else:
            self.conditions.ok("checkpoint", "checkpoint written again")

    # -- what the sidecar publishes (sidecar/state.py) ----------------------------------------
    def readiness(self) -> tuple[bool, str]:
        """/readyz (sidecar/probes.py): from a few timestamps and conditions, never the
        snapshot, so a probe stays cheap and cannot fail on what the snapshot computes."""
        age = None if self.last_scrape_ok_at is None else self.clock() - self.last_scrape_ok_at
        return probes.readiness(self.settings, self.engine.is_connected, self.engine.has_admin,
                                age, self.conditions.states)

    def liveness(self) -> tuple[bool, str]:
        """/healthz (sidecar/probes.py): does the control loop still turn."""
        return probes.liveness(self.settings, self.clock(), self.started_at, self.tick_started,
                               self.tick_ended, self.loop_delay_s)

    def snapshot(self) -> SidecarState:
        """GET /v1/state, and what /metrics and the probes read, at one moment."""
        now = self.clock()
        e, info = self.engine, self.engine.info
        scrape_age = None if self.last_scrape_ok_at is None else now - self.last_scrape_ok_at
        ready, reason = self.readiness()
        healthy, why = self.liveness()

        def age(at: float | None) -> float | None:
            return None if at is None else round(now - at, 3)

        hold = None if not e.holding() or e.hold_until is None else ForeignHold(
            version=e.hold_version, until=e.hold_until, remaining_s=round(e.hold_until - now, 3))
        return SidecarState(
            ready=ready, ready_reason=reason, dry_run=self.settings.dry_run, source=self.source,
            last_scrape_ok_at=self.last_scrape_ok_at, last_scrape_age_s=age(self.last_scrape_ok_at),
            last_admin_ok_at=e.last_ok_at, admin_age_s=age(e.last_ok_at), foreign_hold=hold,
            foreign_tables_seen=self.stats.foreign_tables, conditions=dict(self.conditions.states),
            condition_details={name: ConditionDetail(**d)
                               for name, d in self.conditions.details.items()},
            bias_note=BIAS_NOTE if self.source == "stock" else None,
            estimator=Estimator(**self.belief.acceptance.to_dict()),
            a_hat=estimate(self.belief.acceptance).tolist(),
            a_used=projected(self.belief.acceptance)[0].tolist(),
            steps_since_rebuild=self.steps_since_rebuild,
            explore_steps_seen=self.stats.explore_steps,
            transition_steps_seen=self.stats.transition_steps,
            rebuild_every_steps=self.settings.rebuild_every_steps,
            allowed_k=sorted(self.allowed_k) if self.allowed_k is not None else "all",
            engine_table=info.table if info is not None else None,
            engine_table_version=info.version if info is not None else None,
            recommended_table=self.recommended.to_list() if self.recommended is not None else None,
            last_decision=self.last_decision, drift=list(self.belief.drift_cells),
            step_times=StepTimes(prior_steps=self.belief.w_T, live=[
                LiveCell(batch_size=b, k=k, steps=n, live_ms=self.belief.live_T.live_ms((b, k)))
                for (b, k), n in sorted(self.belief.live_T.steps.items())]),
            model_error=[ModelError(batch_size=e.bucket, k=e.k, predicted_tokens_per_s=e.predicted,
                                    realized_tokens_per_s=e.realized, error=e.error, steps=e.steps)
                         for e in self.live_error.values()],
            guardrail=GuardrailState(
                judging=self.guard.trial is not None,
                held_out=[HeldOut(table=[list(r) for r in ranges], until=until)
                          for ranges, until in self.guard.held.items() if until > now],
                rollbacks=self.stats.rollbacks),
            traffic_changes=self.stats.changes,
            recent_decisions=[RecentDecision(time=d.time, outcome=d.outcome, trigger=d.trigger,
                                             old_table=d.old_table, new_table=d.new_table,
                                             reason=d.reason) for d in self.decisions],
            prior_acceptance=self.prior.tolist(), profile_sha256=self.profile_sha256,
            process=Process(healthy=healthy, health_reason=why, scrape_age_s=scrape_age,
                            stats=self.stats.model_copy(deep=True),
                            goodput=self._predicted_goodput()))

    def _predicted_goodput(self) -> list[PredictedGoodput]:
        """G(B, k) per allowed k at the last interval's mean batch size, from â and T̂."""
        if self.last_batch is None:
            return []
        B = min(max(int(round(self.last_batch)), 1), self.profile.engine.max_num_seqs)
        # eq. G in its one place (tuner/core/goodput.py); T in ms, so tokens per ms
        G = model_goodput(self.blend().T[:B], projected(self.belief.acceptance)[0])[B - 1]
        ks = range(G.size) if self.allowed_k is None else sorted(self.allowed_k)
        return [PredictedGoodput(k=k, batch_size=B, tokens_per_s=float(G[k] * 1000.0)) for k in ks]
