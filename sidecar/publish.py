"""What the sidecar publishes at one moment: the SidecarState (sidecar/state.py) that /v1/state,
/metrics, the probes and `tabletune status` read instead of the controller's fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sidecar.belief import Belief
from sidecar.decision import BIAS_NOTE
from sidecar.estimator import estimate, projected
from sidecar.settings import SidecarSettings
from sidecar.state import (BorrowedError, ConditionDetail, DuelPower, Estimator, Exploration, ForeignHold,
                           GuardrailState,
                           HeldOut, LiveCell, ModelError, PredictedGoodput, Process,
                           RecentDecision, SidecarState, StepTimes)
from tuner.core.goodput import goodput as model_goodput

if TYPE_CHECKING:
    from sidecar.controller import Controller

__all__ = ["duel_power", "predicted_goodput", "sidecar_state"]


def predicted_goodput(belief: Belief, allowed_k: set[int] | None) -> list[PredictedGoodput]:
    """G(B, k) per allowed k at the last interval's mean batch size, from â and T̂."""
    B = belief.batch_size
    if B is None:
        return []
    # eq. G in its one place (tuner/core/goodput.py); T in ms, so tokens per ms
    G = model_goodput(belief.blend().T[:B], projected(belief.acceptance)[0])[B - 1]
    ks = range(G.size) if allowed_k is None else sorted(allowed_k)
    return [PredictedGoodput(k=k, batch_size=B, tokens_per_s=float(G[k] * 1000.0)) for k in ks]


def _step_times(belief: Belief) -> StepTimes:
    live = belief.live_T
    return StepTimes(prior_steps=belief.w_T, live=[
        LiveCell(batch_size=b, k=k, steps=n, live_ms=live.live_ms((b, k)))
        for (b, k), n in sorted(live.steps.items())])


def duel_power(belief: Belief, s: SidecarSettings) -> list[DuelPower]:
    """Each comparison's reach at the rebuild's level for one challenger (Bonferroni over more
    challengers only raises the figure)."""
    return [DuelPower(batch_size=p.bucket, k=p.k, ref=p.ref, pairs=p.pairs, max_pairs=s.max_pairs,
                      sd=round(p.sd, 6), smallest_gain=round(p.smallest_gain, 6))
            for p in belief.goodput.power(1.0 - s.confidence, s.max_pairs)]


def _between(bucket: int, measured: Mapping[int, object]) -> list[int]:
    """The nearest measured buckets below and above ``bucket``."""
    return [max(b for b in measured if b < bucket), min(b for b in measured if b > bucket)]


def sidecar_state(c: Controller, now: float) -> SidecarState:
    """The controller's parts as one SidecarState at ``now``."""
    e, info, belief, guard = c.engine_table, c.engine_table.info, c.belief, c.watch.guard
    seen = c.observer.last_ok_at
    ready, reason = c.readiness()
    healthy, why = c.liveness()

    def age(at: float | None) -> float | None:
        return None if at is None else round(now - at, 3)

    pairable = belief.goodput.pairable()
    hold = None if not e.holding() or e.hold_until is None else ForeignHold(
        version=e.hold_version, until=e.hold_until, remaining_s=round(e.hold_until - now, 3))
    return SidecarState(
        ready=ready, ready_reason=reason, dry_run=c.settings.dry_run, source=c.observer.source,
        last_scrape_ok_at=seen, last_scrape_age_s=age(seen),
        last_admin_ok_at=e.last_ok_at, admin_age_s=age(e.last_ok_at), foreign_hold=hold,
        foreign_tables_seen=c.stats.foreign_tables, conditions=dict(c.conditions.states),
        condition_details={name: ConditionDetail(**d) for name, d in c.conditions.details.items()},
        bias_note=BIAS_NOTE if c.observer.source == "stock" else None,
        estimator=Estimator(**belief.acceptance.to_dict()),
        a_hat=estimate(belief.acceptance).tolist(),
        a_used=projected(belief.acceptance)[0].tolist(),
        steps_since_rebuild=c.steps_since_rebuild,
        explore_steps_seen=c.stats.explore_steps, transition_steps_seen=c.stats.transition_steps,
        rebuild_every_steps=c.settings.rebuild_every_steps,
        allowed_k=sorted(c.allowed_k) if c.allowed_k is not None else "all",
        engine_table=info.table if info is not None else None, engine_table_version=e.version,
        recommended_table=c.recommended.to_list() if c.recommended is not None else None,
        last_decision=c.last_decision, drift=list(belief.drift_cells),
        step_times=_step_times(belief),
        model_error=[ModelError(batch_size=m.bucket, k=m.k, predicted_tokens_per_s=m.predicted,
                                realized_tokens_per_s=m.realized, error=m.error, steps=m.steps,
                                pairable=m.bucket in pairable,
                                unpaired_runs=belief.goodput.unpaired[m.bucket],
                                lined_up=m.bucket in belief.goodput.lined_up,
                                startable=m.bucket in belief.goodput.startable)
                     for m in c.live_error.values()],
        borrowed_error=[BorrowedError(batch_size=b, error=e, between=_between(b, c.live_error),
                                      pairable=b in pairable,
                                      unpaired_runs=belief.goodput.unpaired[b],
                                      lined_up=b in belief.goodput.lined_up,
                                      startable=b in belief.goodput.startable)
                        for b, e in sorted(c.borrowed_error.items())],
        duel_power=duel_power(belief, c.settings),
        exploration=Exploration(duels=list(e.duels),
                                urgent=e.urgent, rotation=list(e.rotation)),
        guardrail=GuardrailState(
            judging=guard.trial is not None,
            held_out=[HeldOut(table=[list(r) for r in ranges], until=until)
                      for ranges, until in guard.held.items() if until > now],
            rollbacks=c.stats.rollbacks),
        traffic_changes=c.stats.changes,
        recent_decisions=[RecentDecision(time=d.time, outcome=d.outcome, trigger=d.trigger,
                                         old_table=d.old_table, new_table=d.new_table,
                                         reason=d.reason) for d in c.decisions],
        prior_acceptance=c.prior.tolist(), profile_sha256=c.profile_sha256,
        process=Process(healthy=healthy, health_reason=why,
                        scrape_age_s=None if seen is None else now - seen,
                        stats=c.stats.model_copy(deep=True),
                        goodput=predicted_goodput(belief, c.allowed_k)))
