"""Live acceptance estimate: the offline prior blended with live counts.

Legend (the paper's symbols; positions are 0-based in arrays, so index i-1 holds a_i):

    a_i^prior    the tuner's offline acceptance, worth ``w`` observations
    accepted_i   live count of drafts that kept position i (since the last halving)
    drafted_i    live count of drafts that had position i
    â_i          the estimate: â_i = (w·a_i^prior + accepted_i) / (w + drafted_i)   (eq. â)

The paper's controller starts with w = 2000, halves the live counts after each rebuild so
recent traffic dominates, and may halve w at each rebuild so the prior fades ("decay").

Pure: the state is a small mutable dataclass; the functions below update it in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tuner.core.errors import InvalidInput
from tuner.core.monotone import nonincreasing

__all__ = ["DRAW_PSEUDO", "EstimatorState", "decay_prior", "estimate", "halve_live", "observe",
           "projected", "rebase", "restart"]

# â's uncertainty for the confidence rule is Beta(â·n, (1 - â)·n), n = w + drafted: the prior
# is already in â and n, so the draws add no pseudo-counts of their own
# (tuner/core/confidence.draw_acceptance, ``pseudo``)
DRAW_PSEUDO = 0.0

FloatArray = npt.NDArray[np.float64]


def _vector(name: str, values: Any, size: int | None = None) -> FloatArray:
    """A finite, non-negative 1-D float copy of ``values``, else InvalidInput."""
    try:
        array = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{name}: not numeric ({exc})") from exc
    if array.ndim != 1 or (size is not None and array.size != size):
        want = "a 1-D sequence" if size is None else f"{size} positions"
        raise InvalidInput(f"{name}: expected {want}, got shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise InvalidInput(f"{name}: values must be finite and >= 0, got {array.tolist()}")
    return array


@dataclass(slots=True)
class EstimatorState:
    """Prior a_i, its weight w and the live counts for positions 1..K (eq. â)."""

    prior: FloatArray
    w: float = 2000.0
    # empty means "no live counts yet": filled with zeros of the prior's length
    accepted: FloatArray = field(default_factory=lambda: np.zeros(0))
    drafted: FloatArray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        """Validate once at construction; copies, so callers' arrays are never mutated."""
        self.prior = _vector("prior", self.prior)
        if self.prior.size == 0 or np.any(self.prior > 1):
            raise InvalidInput(f"prior: need 1..K probabilities in [0, 1], got "
                               f"{self.prior.tolist()}")
        if not np.isfinite(self.w) or self.w < 0:
            raise InvalidInput(f"w={self.w} must be finite and >= 0")
        self.w = float(self.w)
        size = self.prior.size
        self.accepted = _vector("accepted", self.accepted if len(self.accepted) else
                                np.zeros(size), size)
        self.drafted = _vector("drafted", self.drafted if len(self.drafted) else
                               np.zeros(size), size)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form for checkpointing (see sidecar/checkpoint.py)."""
        return {"prior": self.prior.tolist(), "w": self.w,
                "accepted": self.accepted.tolist(), "drafted": self.drafted.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EstimatorState:
        """Inverse of :meth:`to_dict`; InvalidInput on missing or unknown keys."""
        expected = {"prior", "w", "accepted", "drafted"}
        if set(data) != expected:
            raise InvalidInput(f"estimator state: keys {sorted(data)} != {sorted(expected)}; "
                               "the checkpoint is from another version or corrupt")
        return cls(prior=np.asarray(data["prior"]), w=float(data["w"]),
                   accepted=np.asarray(data["accepted"]), drafted=np.asarray(data["drafted"]))


def observe(state: EstimatorState, accepted_delta: Any, drafted_delta: Any) -> None:
    """Add one scrape's per-position count deltas to the live counts (eq. â's counts).

    Deltas must be >= 0: the caller detects counter resets (tuner/core/scrape.is_reset) and
    skips that interval instead of feeding negative counts.
    """
    size = state.prior.size
    acc = _vector("accepted_delta", accepted_delta, size)
    dra = _vector("drafted_delta", drafted_delta, size)
    if np.any(acc > dra):
        raise InvalidInput(f"accepted_delta={acc.tolist()} exceeds drafted_delta="
                           f"{dra.tolist()}; a position cannot be kept more often than drafted")
    state.accepted += acc
    state.drafted += dra


def estimate(state: EstimatorState) -> FloatArray:
    """â_i = (w·a_i^prior + accepted_i) / (w + drafted_i) (eq. â), for i = 1..K.

    With w = 0 and no live drafts at a position there is nothing to divide; the prior is
    returned there rather than nan, since it is the only information we have.
    """
    numerator = state.w * state.prior + state.accepted
    denominator = state.w + state.drafted
    out = state.prior.copy()
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def projected(state: EstimatorState) -> tuple[FloatArray, FloatArray]:
    """(â projected non-increasing, â as estimated), and the evidence weights are w + drafted_i."""
    raw = estimate(state)
    return nonincreasing(raw, state.w + state.drafted), raw


def halve_live(state: EstimatorState) -> None:
    """Halve the live counts after a rebuild so recent traffic dominates (paper, controller)."""
    state.accepted *= 0.5
    state.drafted *= 0.5


def decay_prior(state: EstimatorState, factor: float = 0.5) -> None:
    """w *= factor: the prior fades so stale offline acceptance cannot pin the table (eq. â)."""
    if not 0 <= factor <= 1:
        raise InvalidInput(f"factor={factor} must be in [0, 1]")
    state.w *= factor


def restart(state: EstimatorState, accepted: Any, drafted: Any, max_weight: float) -> None:
    """Keep only these live counts, and the prior's weight at most ``max_weight``: a detected
    change of traffic (sidecar/change.py) made the older counts describe other traffic."""
    size = state.prior.size
    state.accepted = _vector("accepted", accepted, size)
    state.drafted = _vector("drafted", drafted, size)
    state.w = min(state.w, max_weight)


def rebase(state: EstimatorState, prior: Any) -> None:
    """A new prior a_i, e.g. the current estimate after a change of traffic (its weight stays)."""
    new = _vector("prior", prior, state.prior.size)
    if np.any(new > 1):
        raise InvalidInput(f"prior: need probabilities in [0, 1], got {new.tolist()}")
    state.prior = new
