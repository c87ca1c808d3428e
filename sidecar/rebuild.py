"""What a rebuild chooses: live acceptance and live step times, split only with confidence (pure).

1. â (sidecar/estimator.py) projected onto a_1 >= a_2 >= ... (tuner/core/monotone.py), weighted by
   the evidence behind each position (w + drafted_i): a position the table never drafts keeps
   the prior, but cannot sit above a better-observed earlier one.
2. T̂ and its spread from the profile and the live steps (sidecar/step_times.py).
3. The confident table (tuner/core/confidence.py): a k changes along B only where the gain beats the
   tie at the confidence level; ranges narrower than the minimum width merge unless a cliff
   forces them or they hold a bucket live steps measured (``measured``: the min-width rule is
   made for ranges between interpolated grid points, not for a bucket the engine timed).
4. Against the table in force: each run of B where the choice differs is kept only if its gain
   over the engine's k beats the tie at the confidence level (confident_changes); elsewhere the
   engine's k stays, unless that k is no longer allowed (``--allowed-k``, ``--min-k``). A
   rebuild therefore pushes nothing that only reshuffles near-ties.
5. When a push happens anyway, a range narrower than the minimum width that the engine's table
   did not have (what is left of an old range where only part changed with confidence) merges
   into the neighbour whose k does better there (merge_remnants), logged as a ``merged``
   change: no range of one batch size split on a near-tie.

With an arbiter (decisions by measurement, the default), steps 3-5 apply only with no engine
table to compare with; otherwise the table changes only at the buckets the engine served since
the last push, each decided by measured goodput (sidecar/arbiter.py): where the plugin can duel,
the model only orders the duels; where it cannot, the model decides beyond its error measured
live (sidecar/model_error.py). A bucket not served keeps its k: an edge is
never moved on evidence from elsewhere, not even after a change of traffic (docs/sidecar.md
tells the H200 run that taught it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sidecar.arbiter import Arbiter, Verdicts, arbitrate
from sidecar.decision import Call, RangeChange, StepEvidence, range_gains
from sidecar.estimator import DRAW_PSEUDO, EstimatorState, projected
from sidecar.step_times import Blend
from tuner.core.confidence import Change, choose_confident, confident_changes, merge_remnants
from tuner.core.goodput import Cliff
from tuner.core.incumbent import drop_futile, is_futile
from tuner.core.table import Table
from tuner.core.admin_api import Duel

__all__ = ["Choice", "Inputs", "choose"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Inputs:
    tie: float
    confidence: float
    allowed_k: set[int] | None
    cliffs: list[Cliff]
    prior_steps: float     # w_T, for the decision's evidence
    width: int = 4
    replicates: int = 200
    measured: tuple[tuple[int, int], ...] = ()   # (first, last) B of each measured bucket
    # decisions by measured goodput (sidecar/arbiter.py); None: the model alone everywhere
    arbiter: Arbiter | None = None


@dataclass(frozen=True, slots=True)
class Choice:
    table: Table            # what to run: the engine's table with only the confident changes
    proposed: Table         # the confident table from scratch, before comparing with the engine's
    G: FloatArray           # median goodput [B, K+1]
    a_used: FloatArray      # â after the projection
    a_raw: FloatArray
    changes: list[RangeChange]
    calls: tuple[Call, ...] = ()
    duels: tuple[Duel, ...] = ()
    urgent: bool = False    # a duel the model is sure of (sidecar/arbiter.py): a larger share
    ratio_error: float | None = None  # the model's, where pairs checked it (sidecar/model_error.py)
    rotation: tuple[int, ...] = ()    # the k's the rotation visits (sidecar/arbiter.py); (): all

    def measured_switches(self) -> tuple[tuple[int, int, int], ...]:
        """(bucket, k_old, k) of every switch the pairs decided."""
        return tuple((c.bucket, c.k_old, c.k) for c in self.calls
                     if c.status == "switch" and c.decided_by == "measured")

    def described(self, old: Table | None, K: int) -> dict[str, Any]:
        """The decision line's fields that come from this choice (sidecar/decision.py)."""
        return {"a_hat": [round(float(a), 6) for a in self.a_used],
                "a_raw": [round(float(a), 6) for a in self.a_raw],
                "old_table": old.to_list() if old else None, "new_table": self.table.to_list(),
                "gains": range_gains(self.G, old, self.table, K),
                "changes": [c for c in self.changes if c.kept] or self.changes,
                "calls": list(self.calls), "duels": self.duels,
                "urgent": self.urgent, "model_ratio_error": self.ratio_error}


def _evidence(blend: Blend, T_prof: FloatArray, start: int, end: int, k: int,
              prior_steps: float) -> StepEvidence:
    rows = slice(start - 1, end)
    return StepEvidence(k=k, profile_ms=round(float(np.mean(T_prof[rows, k])), 4),
                        used_ms=round(float(np.mean(blend.T[rows, k])), 4),
                        live_steps=round(float(np.max(blend.steps[rows, k])), 1),
                        prior_steps=prior_steps)


def choose(blend: Blend, T_prof: FloatArray, state: EstimatorState, old: Table | None,
           num_speculative_tokens: int, inputs: Inputs) -> Choice:
    """The table a rebuild pushes (see the module), with the evidence for every change."""
    a_used, a_raw = projected(state)
    drafts = state.w + state.drafted
    confident = choose_confident(blend.T, blend.sigma, a_used, drafts, tie=inputs.tie,
                                 confidence=inputs.confidence, allowed_k=inputs.allowed_k,
                                 cliffs=inputs.cliffs, width=inputs.width,
                                 replicates=inputs.replicates, measured=inputs.measured,
                                 pseudo=DRAW_PSEUDO)
    arb = inputs.arbiter
    if old is None:
        v = _verdicts(arb, confident.ks, confident.G_reps, inputs) if arb else None
        return Choice(confident.table, confident.table, confident.G, a_used, a_raw, [], (),
                      v.duels if v else (), v.urgent if v else False,
                      v.ratio_error if v else None, v.rotation if v else ())
    max_b = blend.T.shape[0]
    old_ks = old.dense(max_b, num_speculative_tokens)[1:]
    if arb is not None:
        return _by_measure(blend, T_prof, old, old_ks, confident.G, confident.G_reps,
                           confident.table, confident.ks, a_used, a_raw, inputs, arb)
    ks, found = confident_changes(confident.G_reps, old_ks, confident.ks, inputs.tie,
                                  inputs.confidence)
    # but no incumbent whose extra drafts buy nothing (acceptance ~0): tuner/core/incumbent.py
    ks, found = drop_futile(ks, found, blend.T, blend.sigma, a_used, inputs.tie, inputs.confidence)
    if inputs.allowed_k is not None:  # a k no longer allowed (e.g. below --min-k) always goes
        banned = np.isin(np.asarray(old_ks), sorted(inputs.allowed_k), invert=True)
        ks[banned] = confident.ks[banned]
        found = [dataclasses.replace(c, kept=True) if c.k_old not in inputs.allowed_k else c
                 for c in found]
    merged: list[Change] = []
    if any(c.kept for c in found):  # a push happens anyway: no narrow remnant rides along
        merged_ks = merge_remnants(ks, old_ks, confident.G, inputs.cliffs, inputs.width,
                                   measured=inputs.measured)
        # each remnant's own gain over the engine's k (ks there is still the engine's k), every
        # run listed: a tie of -1 keeps them all, whatever their bound says (a near-tie)
        _, merged = confident_changes(confident.G_reps, ks, merged_ks, -1.0, inputs.confidence)
        ks = merged_ks
    # a change left out that a merge now covers is superseded by the merge's own line
    found = [c for c in found if c.kept or not any(m.start <= c.end and c.start <= m.end
                                                   for m in merged)]
    def line(c: Change, is_merged: bool) -> RangeChange:
        return RangeChange(batch_size_start=c.start, batch_size_end=c.end, k_old=c.k_old,
                           k_new=c.k_new, gain=round(c.gain, 6), gain_low=round(c.gain_low, 6),
                           kept=c.kept, merged=is_merged,
                           step_times=[_evidence(blend, T_prof, c.start, c.end, k, inputs.prior_steps)
                                       for k in (c.k_old, c.k_new)])

    changes = [line(c, False) for c in found] + [line(c, True) for c in merged]
    table = Table.from_dense(ks.tolist())
    # the engine's table may reach past max_num_seqs or carry gaps: keep it as it is if equal
    if table == Table.from_dense(old_ks):
        table = old
    v = _verdicts(arb, ks, confident.G_reps, inputs) if arb else None
    return Choice(table, confident.table, confident.G, a_used, a_raw, changes, (),
                  v.duels if v else (), v.urgent if v else False, v.ratio_error if v else None,
                  v.rotation if v else ())


def _verdicts(arb: Arbiter, ks: npt.NDArray[np.int64], G_reps: FloatArray,
              inputs: Inputs, blend: Blend | None = None, a_used: FloatArray | None = None) -> Verdicts:
    futile = None
    if blend is not None and a_used is not None:
        T, sigma, a = blend.T, blend.sigma, a_used

        def futile(start: int, end: int, k: int, c: int) -> bool:
            return is_futile(Change(start, end, k, c, 0.0, 0.0, False), T, sigma, a,
                             inputs.tie, inputs.confidence)
    return arbitrate(np.asarray(ks), G_reps, arb.goodput, arb.served, inputs.allowed_k,
                     tie=inputs.tie, confidence=inputs.confidence, model_error=arb.model_error,
                     min_served=arb.min_served, max_pairs=arb.max_pairs,
                     duel_width=arb.duel_width, futile=futile, previous=arb.duels,
                     live_error=arb.live_error, can_duel=arb.can_duel, pairable=arb.pairable,
                     rotating=arb.rotation)


def _by_measure(blend: Blend, T_prof: FloatArray, old: Table, old_ks: list[int], G: FloatArray,
                G_reps: FloatArray, proposed: Table, model_ks: npt.NDArray[np.int64],
                a_used: FloatArray, a_raw: FloatArray, inputs: Inputs, arb: Arbiter) -> Choice:
    """Only the served buckets change, each as sidecar/arbiter.py decides; a k no longer
    allowed still goes (to the model's choice there)."""
    verdicts = _verdicts(arb, np.asarray(old_ks), G_reps, inputs, blend, a_used)
    ks = verdicts.ks
    if inputs.allowed_k is not None:
        banned = np.isin(np.asarray(old_ks), sorted(inputs.allowed_k), invert=True)
        ks[banned] = model_ks[banned]
    changes = []
    for c in verdicts.switches():
        used = c.measured if c.decided_by == "measured" and c.measured is not None else c.model
        changes.append(RangeChange(
            batch_size_start=c.batch_size_start, batch_size_end=c.batch_size_end, k_old=c.k_old,
            k_new=c.k, gain=round(used.ratio - 1.0, 6), gain_low=round(used.low - 1.0, 6),
            kept=True, decided_by=c.decided_by, model=c.model, measured=c.measured,
            step_times=[_evidence(blend, T_prof, c.batch_size_start, c.batch_size_end, k,
                                  inputs.prior_steps) for k in (c.k_old, c.k)]))
    table = Table.from_dense(ks.tolist())
    if table == Table.from_dense(old_ks):
        table = old
    return Choice(table, proposed, G, a_used, a_raw, changes, tuple(verdicts.calls),
                  verdicts.duels, verdicts.urgent, verdicts.ratio_error, verdicts.rotation)
