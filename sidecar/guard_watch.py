"""What a tick hands the guardrail (sidecar/guardrail.py holds its rule): a sample of realized
goodput per interval with the pairs' bounds for the buckets its trial judges, the foreign writes
that void a trial, and the rollback a verdict asks for."""

from __future__ import annotations

import dataclasses
import logging

from sidecar.guardrail import Guardrail, PairBounds, PairKey, Sample, Verdict
from sidecar.measured import MeasuredGoodput
from sidecar.settings import SidecarSettings

__all__ = ["GuardWatch", "pair_bounds", "rollback_reason"]

log = logging.getLogger("sidecar")


def pair_bounds(goodput: MeasuredGoodput, wanted: tuple[PairKey, ...],
                confidence: float) -> PairBounds:
    """G(k_new)/G(k_old) from the pairs for each (bucket, k_new, k_old) a trial judges, at the
    rebuild's confidence split over them (Bonferroni: any of them can roll the push back)."""
    alpha = (1.0 - confidence) / max(len(wanted), 1)
    out: dict[PairKey, tuple[float, float] | None] = {}
    for key in wanted:
        c = goodput.compare(*key, alpha)
        out[key] = None if c is None else (c.low, c.high)
    return out


def rollback_reason(verdict: Verdict, hold_s: float) -> str:
    """Why a push is taken back, in the words of the side that judged it."""
    if verdict.judged_by == "pairs":
        lost = "; ".join(f"B band {c.bucket}: k={c.k_new} over k={c.k_old} "
                         f"[{c.low:.4f}, {c.high:.4f}]" for c in verdict.paired
                         if c.high is not None and c.low is not None and c.high < 1.0)
        why = f"guardrail: the pairs at the buckets it changed turned against it ({lost})"
    else:
        why = (f"guardrail: live goodput {verdict.ratio:.3f}x of before (t={verdict.t}, "
               f"{verdict.before}+{verdict.after} samples)")
    return f"{why} after pushing {verdict.new_table}; held out {hold_s:g} s"


class GuardWatch:
    """The guardrail, the rollback it asked for (``pending``) and the foreign writes it heard."""

    def __init__(self, settings: SidecarSettings) -> None:
        self.settings = settings
        self.guard = Guardrail(window=settings.guard_window, drop=settings.guard_drop,
                               hold_s=settings.guard_hold_s, min_steps=settings.guard_min_steps)
        self.pending: Verdict | None = None
        self.foreign_seen = 0  # foreign table writes already heard of

    @property
    def on(self) -> bool:
        return bool(self.settings.guard_window) and not self.settings.dry_run

    def observe(self, sample: Sample, now: float, goodput: MeasuredGoodput) -> None:
        """One interval's realized goodput; a verdict that rolls back becomes ``pending``."""
        if not self.on:
            return
        bounds = pair_bounds(goodput, self.guard.wanted(), self.settings.confidence)
        verdict = self.guard.observe(sample, now, bounds)
        if verdict is None:
            return
        log.info("guardrail verdict", extra={"verdict": {
            "rolled_back": verdict.rolled_back, "ratio": verdict.ratio, "t": verdict.t,
            "before": verdict.before, "after": verdict.after, "table": verdict.new_table,
            "judged_by": verdict.judged_by,
            "paired": [dataclasses.asdict(c) for c in verdict.paired]}})
        if verdict.rolled_back:
            self.pending = verdict

    def take(self) -> Verdict | None:
        """The rollback asked for, once."""
        verdict, self.pending = self.pending, None
        return verdict

    def foreign(self, written: int) -> None:
        """Someone else wrote the engine's table: a trial would judge their table."""
        if written != self.foreign_seen:
            self.foreign_seen = written
            self.guard.cancel()
