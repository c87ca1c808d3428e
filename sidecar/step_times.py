"""Live step times: the profile's T(B, k) blended with what the engine's clock measures.

The plugin times every steady engine step per (B bucket, k) under real traffic, prefill of the
requests that replace finished ones included: ``tabletune_step_seconds_total`` /
``tabletune_steps_timed_total``, buckets exact for B <= 16, then the next multiple of 8
(vllm_patch/state.step_bucket). The profile timed pure decode steps, which can miss what serving
brings (a CUDA-graph limit crossed by prefill tokens, a runner whose serving steps are slower).
So step times are estimated like acceptance (sidecar/estimator.py), per cell:

    T̂(B, k) = T_prof(B, k) · ρ(bucket, k),   ρ = (w_T · 1 + n · r) / (w_T + n)        (eq. T̂)

where r = T_live / T_prof over the bucket (live mean step over the profile's mean over the B the
bucket holds), n the live steps behind it and w_T the profile's weight in steps. After each
rebuild a cell holding more than ``step_memory`` steps is scaled down to that many (old steps
fade; a cell only exploration feeds keeps its few), and a detected change of step time keeps a
cell's recent steps alone (sidecar/change.py), so the estimate follows the engine. Between two buckets with evidence the correction is
interpolated (log ρ linear in B); outside them the profile stands: a load never served says
nothing about its own step time. Each row is projected onto T non-decreasing in k
(tuner/monotone.py), weighted by the evidence. Not in B: the dense rows are interpolated from
a few grid points, so a least-squares fit along B would let many rows of one profile point
outvote a bucket of live steps; the profile is already monotone in B, and only its
correction could break that.

Its spread (for the confidence rule, tuner/confidence.py), on log T:

    σ̂² = (w_T² σ_prof² + n c²) / (w_T + n)²

the variance of a weighted mean of the profile's estimate (σ_prof from its interval) and n steps
with a per-step log spread c.

Pure: the tracker accumulates counter deltas; the functions return arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sidecar.decision import DriftCell
from tuner.monotone import nondecreasing

__all__ = ["Blend", "LiveStepTimes", "MIN_STEPS", "drifting", "rows_of"]

FloatArray = npt.NDArray[np.float64]
Cell = tuple[int, int]  # (B bucket, k)

# fewer timed steps than this in a cell give no drift ratio: one slow step is noise, not drift
MIN_STEPS = 5.0


def rows_of(bucket: int, max_b: int) -> npt.NDArray[np.int64]:
    """Batch sizes (1-based) a bucket holds, cut at max_num_seqs."""
    low = bucket if bucket <= 16 else max(bucket - 7, 17)
    return np.arange(min(low, max_b), min(bucket, max_b) + 1)


@dataclass(frozen=True, slots=True)
class Blend:
    """Dense [B, K+1] arrays (row b-1 is B=b): T̂ in ms, σ̂ of log T̂, live steps behind each."""

    T: FloatArray
    sigma: FloatArray
    steps: FloatArray    # interpolated rows: the weaker of the two buckets beside them


@dataclass(slots=True)
class LiveStepTimes:
    """Live (seconds, steps) per (B bucket, k), capped at each rebuild."""

    seconds: dict[Cell, float] = field(default_factory=dict)
    steps: dict[Cell, float] = field(default_factory=dict)

    def observe(self, step_time: Mapping[Cell, tuple[float, float]]) -> None:
        """Add one scrape's (seconds, count) deltas per (B bucket, k)."""
        for key, (seconds, count) in step_time.items():
            if count > 0 and seconds >= 0:
                self.seconds[key] = self.seconds.get(key, 0.0) + seconds
                self.steps[key] = self.steps.get(key, 0.0) + count

    def cap(self, max_steps: float) -> dict[Cell, float]:
        """Scale every cell holding more than ``max_steps`` steps down to that many: old steps
        fade where evidence is plentiful, while a k that only exploration visits (a few steps
        a rebuild) keeps what it has. Halving at every rebuild, as for acceptance, would hold
        such a cell near the steps of one rebuild, forever outweighed by the profile. Returns
        the factor applied per scaled cell (the change test's window scales by it too)."""
        factors = {}
        for key, count in self.steps.items():
            if count > max_steps:
                factors[key] = max_steps / count
                self.seconds[key] *= factors[key]
                self.steps[key] = max_steps
        return factors

    def replace(self, recent: Mapping[Cell, tuple[float, float]]) -> None:
        """Forget the live counts of the cells in ``recent`` and keep only those (a detected
        change of step time: sidecar/change.py)."""
        for key, (seconds, count) in recent.items():
            self.seconds[key], self.steps[key] = seconds, count

    def measured_rows(self, max_b: int, min_steps: float) -> frozenset[int]:
        """Batch sizes of the buckets where live steps measured at least two k's with
        ``min_steps`` each (live against live, not against the profile)."""
        ks: dict[int, int] = {}
        for (bucket, _), n in self.steps.items():
            if n >= min_steps and bucket >= 1:
                ks[bucket] = ks.get(bucket, 0) + 1
        return frozenset(int(b) for bucket, count in ks.items() if count >= 2
                         for b in rows_of(bucket, max_b))

    def live_ms(self, cell: Cell) -> float | None:
        count = self.steps.get(cell, 0.0)
        return 1000.0 * self.seconds[cell] / count if count > 0 else None

    def blend(self, T_prof: FloatArray, sigma_prof: FloatArray, w_T: float,
              step_cv: float) -> Blend:
        """eq. T̂ and σ̂ over every B = 1..max_num_seqs, each row non-decreasing in k."""
        max_b, num_k = T_prof.shape
        log_rho = np.zeros_like(T_prof)
        steps = np.zeros_like(T_prof)
        for k in range(num_k):
            known = sorted((bucket, n) for (bucket, kk), n in self.steps.items()
                           if kk == k and n > 0 and 1 <= bucket and rows_of(bucket, max_b).size)
            if not known:
                continue
            centres, values, counts = [], [], []
            for bucket, n in known:
                rows = rows_of(bucket, max_b)
                ratio = (1000.0 * self.seconds[(bucket, k)] / n) / float(np.mean(T_prof[rows - 1, k]))
                rho = (w_T + n * ratio) / (w_T + n)
                log_rho[rows - 1, k] = np.log(rho)
                steps[rows - 1, k] = n
                centres.append(float(np.mean(rows)))
                values.append(float(np.log(rho)))
                counts.append(n)
            B = np.arange(1, max_b + 1)
            gaps = (B > centres[0]) & (B < centres[-1]) & (steps[:, k] == 0)
            log_rho[gaps, k] = np.interp(B[gaps], centres, values)
            # an interpolated row is as well supported as the weaker bucket beside it
            right = np.searchsorted(centres, B[gaps])
            steps[gaps, k] = np.minimum(np.asarray(counts)[right - 1], np.asarray(counts)[right])
        T = T_prof * np.exp(log_rho)
        with np.errstate(invalid="ignore", divide="ignore"):  # w_T = 0 and no live steps
            sigma = np.sqrt(w_T ** 2 * sigma_prof ** 2 + steps * step_cv ** 2) / (w_T + steps)
        sigma = np.where(steps > 0, sigma, sigma_prof)  # no live steps: the profile's own spread
        weights = 1.0 / np.maximum(sigma, 1e-6) ** 2
        for b in range(max_b):  # more drafted tokens never make a step cheaper
            T[b] = nondecreasing(T[b], weights[b])
        return Blend(T, sigma, steps)

    def cells(self, T_prof: FloatArray) -> list[DriftCell]:
        """Ratio live / profile per cell with enough steps; T_prof[b-1, k] in ms.

        A bucket above 16 holds B in (bucket-8, bucket], so it is compared with the mean T
        over those B (cut at max_num_seqs); a k the profile did not measure is skipped.
        """
        out = []
        max_b, num_k = T_prof.shape
        for (bucket, k), count in sorted(self.steps.items()):
            rows = rows_of(bucket, max_b) if bucket >= 1 else np.arange(0)
            if count < MIN_STEPS or not 0 <= k < num_k or not rows.size:
                continue
            live_ms = 1000.0 * self.seconds[(bucket, k)] / count
            profile_ms = float(np.mean(T_prof[rows - 1, k]))
            out.append(DriftCell(batch_size=bucket, k=k, live_ms=round(live_ms, 4),
                                 profile_ms=round(profile_ms, 4),
                                 ratio=round(live_ms / profile_ms, 4), steps=count))
        return out


def drifting(cells: list[DriftCell], drift_warn: float) -> list[DriftCell]:
    """The cells whose live step is more than ``drift_warn`` (relative) slower than profiled."""
    return [cell for cell in cells if cell.ratio > 1.0 + drift_warn]
