"""Drift check: live engine step times against the profile's T(B, k).

The plugin times every engine step per (B bucket, k): ``tabletune_step_seconds_total`` /
``tabletune_steps_timed_total``, buckets exact for B <= 16, then the next multiple of 8
(vllm_patch/state.step_bucket). The controller only updates acceptance; step times always
come from the profile (paper, "The controller"), so a live step much slower than profiled
means the table is built on wrong T and cannot be fully trusted (paper, "Limitations").

Pure: the tracker accumulates counter deltas and compares them with an array.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sidecar.decision import DriftCell

__all__ = ["DriftTracker", "MIN_STEPS"]

# fewer timed steps than this in a cell give no ratio: one slow step is noise, not drift
MIN_STEPS = 5.0


@dataclass(slots=True)
class DriftTracker:
    """Live (seconds, steps) per (B bucket, k); halved at each rebuild like acceptance."""

    seconds: dict[tuple[int, int], float] = field(default_factory=dict)
    steps: dict[tuple[int, int], float] = field(default_factory=dict)

    def observe(self, step_time: Mapping[tuple[int, int], tuple[float, float]]) -> None:
        """Add one scrape's (seconds, count) deltas per (B bucket, k)."""
        for key, (seconds, count) in step_time.items():
            if count > 0:
                self.seconds[key] = self.seconds.get(key, 0.0) + seconds
                self.steps[key] = self.steps.get(key, 0.0) + count

    def halve(self) -> None:
        self.seconds = {key: value / 2 for key, value in self.seconds.items()}
        self.steps = {key: value / 2 for key, value in self.steps.items()}

    def cells(self, T_dense_ms: npt.NDArray[np.float64]) -> list[DriftCell]:
        """Ratio live / profile per cell with enough steps; T_dense_ms[b-1, k] in ms.

        A bucket above 16 holds B in (bucket-8, bucket], so it is compared with the mean T
        over those B (cut at max_num_seqs); a k the profile did not measure is skipped.
        """
        out = []
        max_b, num_k = T_dense_ms.shape
        for (bucket, k), count in sorted(self.steps.items()):
            if count < MIN_STEPS or not 0 <= k < num_k or bucket < 1:
                continue
            live_ms = 1000.0 * self.seconds[(bucket, k)] / count
            profile_ms = _profile_ms(T_dense_ms, bucket, k)
            out.append(DriftCell(batch_size=bucket, k=k, live_ms=round(live_ms, 4),
                                 profile_ms=round(profile_ms, 4),
                                 ratio=round(live_ms / profile_ms, 4), steps=count))
        return out


def _profile_ms(T_dense_ms: npt.NDArray[np.float64], bucket: int, k: int) -> float:
    """Mean profiled T over the batch sizes a bucket holds (see vllm_patch/state.step_bucket)."""
    max_b = T_dense_ms.shape[0]
    low = bucket if bucket <= 16 else max(bucket - 7, 17)
    rows = np.arange(min(low, max_b), min(bucket, max_b) + 1)
    return float(np.mean(T_dense_ms[rows - 1, k]))


def drifting(cells: list[DriftCell], drift_warn: float) -> list[DriftCell]:
    """The cells whose live step is more than ``drift_warn`` (relative) slower than profiled."""
    return [cell for cell in cells if cell.ratio > 1.0 + drift_warn]
