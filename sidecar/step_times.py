"""Live step times: the profile's T(B, k) blended with what the engine's clock measures.

The plugin times every steady engine step per (B bucket, k) under real traffic, prefill of the
requests that replace finished ones included: ``tabletune_step_seconds_total`` /
``tabletune_steps_timed_total``, buckets exact for B <= 16, then the next multiple of 8
(tuner/core/buckets.step_bucket). The profile timed pure decode steps, which can miss what serving
brings (a CUDA-graph limit crossed by prefill tokens, a runner whose serving steps are slower).
So step times are estimated like acceptance (sidecar/estimator.py), per cell:

    T̂(B, k) = T_prof(B, k) · ρ_k,    log ρ_k = (w_T · λ_k + n_k · log r_k) / (w_T + n_k)    (eq. T̂)
    λ_k = Σ_{j≠k} n_j · log r_j / (w_T + Σ_{j≠k} n_j)     the level the other k's measured

where r_k = T_live / T_prof over the bucket (live mean step over the profile's mean over the B
the bucket holds), n_k the live steps behind it and w_T the profile's weight in steps. The
profile is a prior on the *shape* across k as much as on the level: serving steps can run at
half the pure-decode profile for every k alike (docs/sidecar.md), so a k that only exploration
visits should move with the level its neighbours measured, not stay at the profile's absolute
time while the table's k is corrected (a corrected time against an uncorrected one is a gain
that is only bias). A k with its own steps
departs from the level as its evidence grows, each step counted once (λ_k leaves k's own steps out);
with no other k seen, λ_k = 0 and ρ_k is the profile blended with k's live mean in log space. After
each rebuild a cell holding more than ``step_memory`` steps is scaled down to that many (old steps
fade; a cell only exploration feeds keeps its few), and a detected change of step time keeps a
cell's recent steps alone (sidecar/change.py), so the estimate follows the engine. Between two
buckets with evidence the correction is interpolated (log ρ linear in B); outside them the profile
stands: a load never served says nothing about its own step time. Each row is projected onto T
non-decreasing in k (tuner/core/monotone.py), weighted by the evidence. Not in B: the dense rows are
interpolated from a few grid points, so a least-squares fit along B would let many rows of one
profile point outvote a bucket of live steps; the profile is already monotone in B, and only its
correction could break that.

Its spread (for the confidence rule, tuner/core/confidence.py), on log T:

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
from tuner.core.admin_api import BucketK
from tuner.core.buckets import step_bucket_rows
from tuner.core.monotone import nondecreasing

__all__ = ["Blend", "LiveStepTimes", "MIN_STEPS", "drifting"]

FloatArray = npt.NDArray[np.float64]

# fewer timed steps than this in a cell give no drift ratio: one slow step is noise, not drift
MIN_STEPS = 5.0


def _rows(bucket: int, max_b: int) -> npt.NDArray[np.int64]:
    """The batch sizes (1-based) of a step bucket (tuner/core/buckets.py), as an index array."""
    return np.asarray(step_bucket_rows(bucket, max_b), dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Blend:
    """Dense [B, K+1] arrays (row b-1 is B=b): T̂ in ms, σ̂ of log T̂, live steps behind each."""

    T: FloatArray
    sigma: FloatArray
    steps: FloatArray    # interpolated rows: the weaker of the two buckets beside them


@dataclass(slots=True)
class LiveStepTimes:
    """Live (seconds, steps) per (B bucket, k), capped at each rebuild."""

    seconds: dict[BucketK, float] = field(default_factory=dict)
    steps: dict[BucketK, float] = field(default_factory=dict)

    def observe(self, step_time: Mapping[BucketK, tuple[float, float]]) -> None:
        """Add one scrape's (seconds, count) deltas per (B bucket, k)."""
        for key, (seconds, count) in step_time.items():
            if count > 0 and seconds >= 0:
                self.seconds[key] = self.seconds.get(key, 0.0) + seconds
                self.steps[key] = self.steps.get(key, 0.0) + count

    def cap(self, max_steps: float) -> dict[BucketK, float]:
        """Scale every cell holding more than ``max_steps`` steps down to that many: old steps
        fade where evidence is plentiful, while a k that only exploration visits (a few steps
        a rebuild) keeps what it has. Halving at every rebuild, as for acceptance, would hold
        such a cell near the steps of one rebuild, forever outweighed by the profile. Returns
        the factor applied per scaled cell."""
        factors = {}
        for key, count in self.steps.items():
            if count > max_steps:
                factors[key] = max_steps / count
                self.seconds[key] *= factors[key]
                self.steps[key] = max_steps
        return factors

    def replace(self, recent: Mapping[BucketK, tuple[float, float]]) -> None:
        """Forget the live counts of the cells in ``recent`` and keep only those (a detected
        change of step time: sidecar/change.py)."""
        for key, (seconds, count) in recent.items():
            self.seconds[key], self.steps[key] = seconds, count

    def measured(self, max_b: int, min_steps: float) -> tuple[tuple[int, int], ...]:
        """(first, last) batch size of each bucket where live steps measured at least two k's
        with ``min_steps`` each (live against live, not against the profile)."""
        ks: dict[int, int] = {}
        for (bucket, _), n in self.steps.items():
            if n >= min_steps and bucket >= 1:
                ks[bucket] = ks.get(bucket, 0) + 1
        spans = (_rows(bucket, max_b) for bucket, count in sorted(ks.items()) if count >= 2)
        return tuple((int(r[0]), int(r[-1])) for r in spans if r.size)

    def live_ms(self, cell: BucketK) -> float | None:
        count = self.steps.get(cell, 0.0)
        return 1000.0 * self.seconds[cell] / count if count > 0 else None

    def blend(self, T_prof: FloatArray, sigma_prof: FloatArray, w_T: float,
              step_cv: float) -> Blend:
        """eq. T̂ and σ̂ over every B = 1..max_num_seqs, each row non-decreasing in k."""
        max_b, num_k = T_prof.shape
        log_rho = np.zeros_like(T_prof)
        steps = np.zeros_like(T_prof)
        seen = np.zeros(max_b, dtype=bool)     # rows of a bucket with live steps at any k
        buckets = sorted({b for (b, k), n in self.steps.items()
                          if n > 0 and 0 <= k < num_k and b >= 1 and _rows(b, max_b).size})
        centres, at = [], []   # each seen bucket's mean B, and one of its rows
        for bucket in buckets:
            rows = _rows(bucket, max_b)
            n = np.array([self.steps.get((bucket, k), 0.0) for k in range(num_k)])
            seconds = np.array([self.seconds.get((bucket, k), 0.0) for k in range(num_k)])
            # an unseen k (n = 0), or w_T = 0 with nothing seen beside it: no log, no departure
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = 1000.0 * seconds / n / np.mean(T_prof[rows - 1], axis=0)
                log_r = np.where(n > 0, np.log(ratio), 0.0)
                others_n = np.sum(n) - n                   # per k: the other k's steps
                others = np.sum(n * log_r) - n * log_r
                level = np.where(w_T + others_n > 0, others / (w_T + others_n), 0.0)
                log_rho[rows - 1] = np.where(w_T + n > 0, (w_T * level + n * log_r) / (w_T + n), 0.0)
            steps[rows - 1] = n
            seen[rows - 1] = True
            centres.append(float(np.mean(rows)))
            at.append(int(rows[0]) - 1)
        if len(centres) > 1:  # between two seen buckets: interpolated, per k
            B = np.arange(1, max_b + 1)
            gaps = (B > centres[0]) & (B < centres[-1]) & ~seen
            right = np.searchsorted(centres, B[gaps])
            for k in range(num_k):
                log_rho[gaps, k] = np.interp(B[gaps], centres, log_rho[at, k])
                # an interpolated row is as well supported as the weaker bucket beside it
                counts = steps[at, k]
                steps[gaps, k] = np.minimum(counts[right - 1], counts[right])
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
            rows = _rows(bucket, max_b) if bucket >= 1 else np.arange(0)
            if count < MIN_STEPS or not 0 <= k < num_k or not rows.size:
                continue
            live_ms = 1000.0 * self.seconds[(bucket, k)] / count
            profile_ms = float(np.mean(T_prof[rows - 1, k]))
            out.append(DriftCell(batch_size=bucket, k=k, live_ms=round(live_ms, 4),
                                 profile_ms=round(profile_ms, 4),
                                 ratio=round(live_ms / profile_ms, 4), steps=count))
        return out


# a warning needs this many steady steps in a cell: the first seconds of a run (bursts, prefill
# steps against a pure-decode profile) read 2-4x on 5-18 steps and are gone a minute later
WARN_STEPS = 50


def drifting(cells: list[DriftCell], drift_warn: float) -> list[DriftCell]:
    """The cells whose live step, over at least WARN_STEPS steps, is more than ``drift_warn``
    (relative) slower than profiled."""
    return [cell for cell in cells if cell.ratio > 1.0 + drift_warn and cell.steps >= WARN_STEPS]


def drift_words(cells: list[DriftCell]) -> str:
    """The slowest cells in words, e.g. 'B=4 k=3: 2.1x the profile's 13.2 ms over 120 steps'."""
    worst = sorted(cells, key=lambda c: -c.ratio)[:3]
    more = f" (and {len(cells) - 3} more)" if len(cells) > 3 else ""
    return "; ".join(f"B={c.batch_size} k={c.k}: {c.ratio:.1f}x the profile's {c.profile_ms:.1f} ms "
                     f"over {c.steps:.0f} steps" for c in worst) + more
