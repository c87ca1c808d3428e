"""What one rebuild decided, and why: the sidecar's decision log line and /v1/state.

``Decision`` is logged once per rebuild as ``{"event": "rebuild", "decision": {...}}``.
Its ``gains`` say, for each range of the new table, the predicted goodput change against the
old table over that range: mean over B in the range of G(B, k_new) / G(B, k_old(B)) - 1, with
G(B, k) = B·tau(k)/T(B, k) (eq. G, tuner/core/goodput.py) at the current estimate â.

Pure: the functions take arrays and tables and return values.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from tuner.core.admin_api import Duel
from tuner.core.table import Table

__all__ = ["BIAS_NOTE", "Call", "Decision", "DriftCell", "Figures", "RangeChange", "GainOverOld", "Outcome",
           "Source", "StepEvidence", "range_gains"]

Outcome = Literal["pushed", "dry_run", "held", "unchanged", "rejected", "failed", "rolled_back"]
Source = Literal["plugin", "stock"]  # where accepted_i / drafted_i came from

BIAS_NOTE = (
    "no TableTune plugin series: drafted_i is approximated by vLLM's num_drafts, so "
    "â_i = accepted_i / num_drafts is biased low when draft lengths vary (ngram no-match, "
    "empty drafts, DSD K changes between batch sizes); install the plugin for exact counts")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GainOverOld(_Record):
    """One range of the new table and its predicted goodput change (None: old unknown)."""

    batch_size_start: int
    batch_size_end: int
    k: int
    gain: float | None


class DriftCell(_Record):
    """Live step time at one (B bucket, k) against the profile's T at that B."""

    batch_size: int
    k: int
    live_ms: float
    profile_ms: float
    ratio: float
    steps: float


class StepEvidence(_Record):
    """The step time a rebuild used for one k over one range, and what stands behind it."""

    k: int
    profile_ms: float    # the profile's T, mean over the range
    used_ms: float       # T̂ (eq. T̂, sidecar/step_times.py), mean over the range
    live_steps: float    # live steps behind T̂ over the range (0: the profile alone)
    prior_steps: float   # w_T: the profile's weight in steps


class Figures(_Record):
    """G(k_new)/G(k_old) over a range with its interval: the model's, or the measured one
    (paired runs of realized goodput, sidecar/measured.py)."""

    ratio: float
    low: float
    high: float
    pairs: int = 0
    steps: int = 0


class RangeChange(_Record):
    """A run of batch sizes where the rebuild's choice differs from the engine's table."""

    batch_size_start: int
    batch_size_end: int
    k_old: int
    k_new: int
    gain: float          # median predicted goodput change, new k over old
    gain_low: float      # its lower bound at the confidence level
    kept: bool           # part of the pushed table: beyond the tie with confidence, or merged
    step_times: list[StepEvidence]
    # a remnant narrower than the minimum width, merged into its neighbour's k (a near-tie
    # either way) because the push happened anyway (sidecar/rebuild.py, step 5)
    merged: bool = False
    # at a bucket the engine served: which decided (sidecar/arbiter.py) and both sides' figures
    decided_by: Literal["model", "measured"] = "model"
    model: Figures | None = None
    measured: Figures | None = None


class Call(_Record):
    """One challenger k against the engine's k (k_old) at one bucket the engine served, and
    where the comparison stands (sidecar/arbiter.py): switch (k wins beyond the tie), keep (k
    cannot win: worse beyond its interval), tie (indistinguishable after the most pairs we
    spend), open (a duel is running or due)."""

    bucket: int
    batch_size_start: int
    batch_size_end: int
    k_old: int
    k: int
    decided_by: Literal["model", "measured"]
    status: Literal["switch", "keep", "tie", "open"]
    model: Figures
    measured: Figures | None = None


class Decision(_Record):
    """One rebuild: inputs, old and new table, predicted change, outcome and reason."""

    event: Literal["rebuild"] = "rebuild"
    time: float
    outcome: Outcome
    reason: str
    source: Source
    bias_note: str | None
    steps: float
    accepted: list[float]
    drafted: list[float]
    prior_weight: float
    a_hat: list[float]
    old_table: list[list[int]] | None
    new_table: list[list[int]]
    engine_version: int | None
    gains: list[GainOverOld]
    drift: list[DriftCell]
    trigger: str = "scheduled"   # scheduled | change | guardrail | rollback
    a_raw: list[float] | None = None   # â before the non-increasing projection
    changes: list[RangeChange] = []
    calls: list[Call] = []               # at the buckets served since the last push changed them
    duels: tuple[Duel, ...] = ()   # asked of the plugin after this rebuild
    urgent: bool = False    # the model is sure a dueled challenger wins: run at urgent_share
    # the model's error on ratios where pairs checked it (None: unchecked; sidecar/model_error.py)
    model_ratio_error: float | None = None
    # did its bookkeeping (halve the live counts, cap the live steps at step_memory): every
    # rebuild but a measured one that pushed nothing (it only looked at new pairs)
    bookkeeping: bool = True


def range_gains(G: npt.NDArray[np.float64], old: Table | None, new: Table,
                num_speculative_tokens: int) -> list[GainOverOld]:
    """Per range of ``new``: mean of G(B, k_new) / G(B, k_old(B)) - 1 over its B (eq. G).

    ``G[b-1, k]`` is eq. G at B=b; k_old is looked up as vLLM does (clamped to K).
    """
    max_b = G.shape[0]
    gains = []
    for start, end, k in new.ranges:
        rows = np.arange(start, min(end, max_b) + 1)
        gain: float | None = None
        if old is not None and rows.size:
            k_new = min(k, num_speculative_tokens)
            k_old = np.array([old.k_at(int(b), num_speculative_tokens) for b in rows])
            gain = round(float(np.mean(G[rows - 1, k_new] / G[rows - 1, k_old] - 1.0)), 6)
        gains.append(GainOverOld(batch_size_start=start, batch_size_end=end, k=k, gain=gain))
    return gains
