"""What the sidecar believes of the engine's traffic, updated from each observation (issue #37:
the controller's believing half, between what it reads and what it decides).

- acceptance: â_i = (w·a_i + accepted_i)/(w + drafted_i) (eq. â, sidecar/estimator.py);
- step times: the profile's T blended with the engine's clock (eq. T̂, sidecar/step_times.py);
- realized goodput from the plugin's step ring, in paired runs (sidecar/measured.py);
- whether the traffic changed: acceptance in two windows that both left the recent past
  (sidecar/acceptance_change.py), step times that both left a cell's level (sidecar/change.py).
  A change drops the stale live counts and makes the new traffic's estimate the prior; what
  that means for a guardrail trial and the logs is the controller's.

It writes only through its helpers' own operations, and logs nothing: conditions (the resume
drop, step-time drift) are set on the shared Conditions, changes returned as values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from sidecar.acceptance_change import MIN_CHANGE_DRAFTS, AcceptanceChange, AcceptanceWindows
from sidecar.change import StepTimeChange, StepTimeWindow
from sidecar.decision import DriftCell
from sidecar.estimator import (DRAW_PSEUDO, EstimatorState, decay_prior, halve_live, observe,
                               projected, rebase, restart)
from sidecar.logs import Conditions
from sidecar.measured import MeasuredGoodput, Pair, changed_buckets
from sidecar.model_error import LiveError, bracketed, live_errors
from sidecar.observer import RingRead
from sidecar.resume import ResumeTracker
from sidecar.settings import SidecarSettings
from sidecar.step_times import Blend, LiveStepTimes, drift_words, drifting
from sidecar.scrape_delta import SnapshotDelta
from tuner.core.confidence import better_at
from tuner.core.goodput import cliffs, interpolate_step_times
from tuner.core.profile import Profile
from tuner.core.table import Table

__all__ = ["REBASE_REBUILDS", "Belief", "TrafficChange", "cell_fields"]

# rebuilds after a detected change of acceptance whose estimate becomes the prior
REBASE_REBUILDS = 3


@dataclass(frozen=True, slots=True)
class TrafficChange:
    """What the change tests found this interval: a change of acceptance, step-time cells that
    moved (``slow``), and earlier step-time changes that went back (``reverted``)."""

    acceptance: AcceptanceChange | None
    slow: list[StepTimeChange]
    reverted: list[StepTimeChange]

    @property
    def changed(self) -> bool:
        return self.acceptance is not None or bool(self.slow)

    def log_fields(self) -> dict[str, object]:
        """The "traffic change" log line's figures."""
        found = self.acceptance
        return {"acceptance": None if found is None else {
                    "position": found.position, "recent": found.recent, "older": found.older,
                    "reference": found.reference, "drafted": found.drafted, "z": found.z},
                "step_times": cell_fields(self.slow)}


def cell_fields(cells: list[StepTimeChange]) -> list[dict[str, object]]:
    return [{"batch_size": c.batch_size, "k": c.k, "recent_ms": c.recent_ms,
             "estimate_ms": c.estimate_ms, "steps": c.steps} for c in cells]


class Belief:
    """The estimator's acceptance, live step times, measured goodput and the change tests'
    windows, with the bookkeeping a rebuild does to them."""

    def __init__(self, settings: SidecarSettings, profile: Profile, prior: np.ndarray,
                 acceptance: EstimatorState, conditions: Conditions,
                 clock: Callable[[], float]) -> None:
        self.settings, self.K, self.prior = settings, profile.K, prior
        self.conditions, self.clock = conditions, clock
        # the profile's step times, interpolated once (ms, row b-1 is B=b), and their spread
        n = profile.engine.max_num_seqs
        self.T_dense = interpolate_step_times(profile.grid, profile.step_time_matrix(), n)
        self.sigma_dense = interpolate_step_times(profile.grid, profile.step_time_sigma(), n)
        self.cliffs = cliffs(profile.grid, profile.step_time_matrix(monotone=False))
        if (note := profile.unmeasured_top()) is not None:
            conditions.set("profile_grid", "short", f"the profile: {note}; live step times "
                           "correct them only as their steps come (--step-prior-weight)")
        self.acceptance = acceptance  # eq. â's state (sidecar/estimator.py)
        self.w_T = settings.step_prior_weight
        self.live_T = LiveStepTimes()
        # realized goodput from the plugin's step ring: what decides at the buckets the engine
        # serves, once tighter than the model (sidecar/arbiter.py)
        self.goodput = MeasuredGoodput(variance_factor=settings.pair_variance_factor,
                                       window=3 * settings.duel_run)
        self.recent = StepTimeWindow(settings.interval_s)
        self.accept_windows = AcceptanceWindows(settings.change_window, settings.interval_s,
                                                settings.change_window_s)
        self.changed_at: float | None = None  # the last detected change of acceptance
        self.rebase_left = 0  # rebuilds after a change that still take the estimate as prior
        self.resume = ResumeTracker()
        self.drift_cells: list[DriftCell] = []
        self.batch: float | None = None  # mean requests per engine step of the last interval
        self.max_seqs = n

    def blend(self) -> Blend:
        return self.live_T.blend(self.T_dense, self.sigma_dense, self.w_T, self.settings.step_cv)

    def observe(self, d: SnapshotDelta) -> None:
        """One interval's counts: acceptance, step times, the change tests' windows."""
        drafted = (np.asarray(d.drafted_per_pos) if d.drafted_per_pos is not None
                   else np.full(self.K, d.num_drafts))  # stock fallback: biased low
        # a position cannot be kept more often than drafted; stock counters may disagree
        accepted = np.minimum(np.asarray(d.accepted_per_pos), drafted)
        observe(self.acceptance, accepted, drafted)
        engine_steps, request_steps = sum(d.engine_steps.values()), sum(d.request_steps.values())
        self.batch = request_steps / engine_steps if engine_steps > 0 and request_steps > 0 else None
        self.live_T.observe(d.step_time)
        self.recent.add(d.step_time)
        # the change test reads whole request lives (sidecar/acceptance_change.py), else what
        # the drafter proposed per step, else (stock vLLM) what K offered
        if d.finished is not None:
            self.accept_windows.add(np.array([d.finished[1]]), np.array([d.finished[0]]),
                                     accepted, drafted)
        else:
            proposed = d.proposed_per_pos if d.proposed_per_pos is not None else drafted
            self.accept_windows.add(accepted, np.maximum(np.asarray(proposed), accepted),
                                     accepted, drafted)
        self._check_resume(d, float(accepted[0]), float(drafted[0]))
        self._check_drift()

    def _check_resume(self, d: SnapshotDelta, accepted: float, drafted: float) -> None:
        if d.resume_accepted_per_pos is None or d.resume_drafted_per_pos is None:
            return
        self.resume.observe(d.resume_accepted_per_pos[0], d.resume_drafted_per_pos[0],
                            accepted, drafted)
        found = self.resume.drop()
        if found is not None:
            self.conditions.set("resume", "low", "acceptance right after a K=0 stretch is below "
                                "steady state: the drafter loses its state while nothing is "
                                "drafted; keep drafting alive with --min-k 1",
                                resume_rate=found.resume_rate, steady_rate=found.steady_rate,
                                resume_drafts=found.resume_drafts, z=found.z)
        elif self.resume.resume[1] >= 50:
            self.conditions.ok("resume", "acceptance after K=0 stretches is back at steady state")

    def _check_drift(self) -> None:
        self.drift_cells = self.live_T.cells(self.T_dense)
        slow = drifting(self.drift_cells, self.settings.drift_warn)
        if slow:
            self.conditions.set("drift", "slow", "live step times are slower than the "
                                "profile, so the table rests on wrong step times: "
                                + drift_words(slow),
                                drift_warn=self.settings.drift_warn,
                                cells=[c.model_dump() for c in slow])
        else:
            self.conditions.ok("drift", "live step times are back within drift_warn")

    def detect_change(self) -> TrafficChange:
        """Run the change tests; on a change, drop what is stale: a step-time cell takes the
        level the test found, a change of acceptance keeps only the new traffic's counts (the
        prior's weight at most change_prior_weight) and makes their estimate the prior."""
        s = self.settings
        found = self.accept_windows.test(z=s.change_z, min_delta=s.change_min_delta)
        slow = self.recent.step_time_changes(ratio=s.change_step_ratio)
        reverted = [c for c in slow if c.reverted]  # a transient the test had called a change
        if reverted:  # went back: the cell's level is the older one again, no new change
            newer = self.recent.newer_step_time()
            self.live_T.replace({(c.batch_size, c.k): newer[(c.batch_size, c.k)]
                                 for c in reverted})
            slow = [c for c in slow if not c.reverted]
        if found is not None:
            acc, dra = self.accept_windows.since_change()
            restart(self.acceptance, acc, dra, s.change_prior_weight)
            # and the prior becomes what the new traffic shows: the profile's a_i described the
            # old traffic, and a table that drafts little would let the old prior win back
            self.rebase_prior()
            self.goodput.forget()  # what each k delivered under the old traffic
            # the windows that found the change may hold its first seconds: the next rebuilds
            # settle the prior on the new traffic alone (finish), and the model pushes nothing
            # until the counts after the change span a window (the controller's choose)
            self.rebase_left = REBASE_REBUILDS
            self.accept_windows.restart()
            self.changed_at = self.clock()
        if slow:
            newer = self.recent.newer_step_time()  # the level the change test found
            self.live_T.replace({(c.batch_size, c.k): newer[(c.batch_size, c.k)] for c in slow})
        return TrafficChange(found, slow, reverted)

    @property
    def batch_size(self) -> int | None:
        """The last interval's batch as a table's B (1..max_num_seqs)."""
        return None if self.batch is None else min(max(int(round(self.batch)), 1), self.max_seqs)

    def beaten_at(self, B: int, current: int, allowed_k: set[int] | None) -> bool:
        """At B, does another k beat ``current`` beyond confidence, by the model (eq. G)?"""
        blend, a, s = self.blend(), self.acceptance, self.settings
        return better_at(B, blend.T[B - 1], blend.sigma[B - 1], projected(a)[0], a.w + a.drafted,
                         current, allowed_k, s.tie, s.confidence, pseudo=DRAW_PSEUDO) is not None

    def read_ring(self, read: RingRead, table: Table | None, skip: bool = False) -> list[Pair]:
        """The plugin's steps since the last read: realized goodput per cell, and the paired
        runs they complete (``table``: the engine's, to tell its own edges from duels).
        ``skip``: they ran under tables the sidecar did not see run: read on past them."""
        if skip:
            if read.steps:
                self.goodput.restart(since=read.steps[-1].seq)
            return []
        if read.restart_since is not None:
            self.goodput.restart(since=read.restart_since)
        dense = table.dense(self.max_seqs, self.K) if table is not None else None
        return self.goodput.ingest(read.steps, dense)

    def pushed(self, old: Table | None, new: Table) -> set[int] | None:
        """A push: the buckets it changed (None: all) count their served steps again
        (sidecar/measured.py), and the change test's reference starts again; the buckets are
        returned, as the duels there have no verdicts yet."""
        changed = None if old is None else changed_buckets(
            old.dense(self.max_seqs, self.K)[1:], new.dense(self.max_seqs, self.K)[1:])
        self.goodput.mark(changed)
        if changed is None or changed:
            # which steps of a request's life propose moved with the table (under bursts, B
            # follows request age): the change test's reference starts again from the push
            self.accept_windows.clear()
        return changed

    def model_errors(self, table: Table) -> dict[int, LiveError]:
        """The model's error per served bucket for the k ``table`` runs there (eq. G against
        the ring)."""
        return live_errors(self.goodput, table.dense(self.max_seqs, self.K)[1:], self.blend().T,
                           projected(self.acceptance)[0])

    def arbiter_errors(self, own: Mapping[int, LiveError]) -> dict[int, float]:
        """The live errors a switch by the model must beat: each bucket's ``own``, and between
        two measured buckets the larger of theirs (``bracketed``); none in the seconds after a
        change of acceptance, whose counts may still hold the change's own transient (one
        window of new counts first)."""
        return {} if self.settling() else bracketed({b: e.error for b, e in own.items()},
                                                    self.goodput.served)

    def settling(self) -> bool:
        """Since the last change of acceptance, less than one change window has passed."""
        return (self.changed_at is not None and self.clock() - self.changed_at
                < self.accept_windows.size * self.settings.interval_s)

    def rebase_prior(self) -> None:
        """The current estimate (projected non-increasing) becomes the prior; positions with
        no live evidence behind it (unmeasured) get the largest value the one before allows."""
        prior = np.clip(projected(self.acceptance)[0], 0.0, 1.0)
        unmeasured = self.acceptance.drafted < MIN_CHANGE_DRAFTS
        # a position with no live evidence gets the one before it: the largest value a_i <=
        # a_{i-1} allows, so the model ranks the k that drafts it as high as it can be and the
        # duels measure it first (optimism where nothing is known)
        for i in range(1, prior.size):
            if unmeasured[i] and not unmeasured[i - 1]:
                prior[i] = prior[i - 1]
            elif unmeasured[i]:
                prior[i] = min(prior[i], prior[i - 1])
        rebase(self.acceptance, prior)

    def finish_rebuild(self) -> None:
        """A rebuild's bookkeeping: the prior settles on the new traffic after a change, live
        counts are halved (recent traffic weighs more), step memory capped, priors decayed."""
        drafted = self.acceptance.drafted
        if self.rebase_left and drafted.size and drafted[0] >= MIN_CHANGE_DRAFTS:
            self.rebase_prior()
            self.rebase_left -= 1
        halve_live(self.acceptance)
        self.resume.halve()
        self.live_T.cap(self.settings.step_memory)
        if self.settings.prior_decay < 1:
            decay_prior(self.acceptance, self.settings.prior_decay)
        self.w_T *= self.settings.step_prior_decay
