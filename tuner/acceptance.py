"""Acceptance a_i from counter deltas.

Legend (the paper's symbols; positions are 0-based in arrays, so a[i-1] holds a_i):

    a_i          probability that the first i drafts of a step are all accepted
    drafted_i    how many drafts had a token at position i (drafted at least i+1 tokens)
    accepted_i   how many drafts kept position i (kept at least i+1 tokens: verification
                 stops at the first wrong draft, so the kept tokens are always the leading ones)

a_i = accepted_i / drafted_i feeds tau(k) = 1 + sum_{i<=k} a_i (the paper's eq. tau).

Pure: takes sequences, returns numpy arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tuner.core.errors import InvalidInput

__all__ = ["from_histogram", "monotone", "per_position", "stock_estimate"]

FloatArray = npt.NDArray[np.float64]
# counts arrive as tuples (scrape deltas) or arrays (from_histogram)
Counts = Sequence[float] | npt.NDArray[np.floating[Any]]


def _counts(name: str, values: Any) -> FloatArray:
    """``values`` as a 1-D array of finite, non-negative counts, else InvalidInput."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{name}: not numeric ({exc})") from exc
    if array.ndim != 1:
        raise InvalidInput(f"{name}: expected a 1-D sequence of counts, got shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise InvalidInput(f"{name}: counts must be finite and >= 0, got {array.tolist()}")
    return array


def per_position(accepted: Counts, drafted: Counts) -> FloatArray:
    """a_i = accepted_i / drafted_i for i = 1..K (input to eq. tau).

    Positions nobody drafted (0/0) come back as nan, meaning "not observed", never 0: a
    table that ran short lengths has simply not seen the later positions. The result is
    raw; see :func:`monotone`.
    """
    acc = _counts("accepted", accepted)
    dra = _counts("drafted", drafted)
    if acc.shape != dra.shape:
        raise InvalidInput(f"accepted has {acc.size} positions but drafted has {dra.size}; "
                           "pass deltas of the same counters")
    if np.any(acc > dra):
        raise InvalidInput(f"accepted={acc.tolist()} exceeds drafted={dra.tolist()} at some "
                           "position; a position cannot be kept more often than drafted")
    out = np.full(acc.shape, np.nan)
    np.divide(acc, dra, out=out, where=dra > 0)
    return out


def monotone(a: Counts) -> FloatArray:
    """Make a_1 >= a_2 >= ... (cumulative minimum), as a_i must be (eq. tau).

    a_i is the probability of a nested event ("the first i drafts were all kept"), so it
    cannot grow with i; sampling noise can make it do so. nan (unobserved) positions stay
    nan and do not break the running minimum.
    """
    arr = np.asarray(a, dtype=np.float64)
    missing = np.isnan(arr)
    running = np.minimum.accumulate(np.where(missing, np.inf, arr))
    return np.where(missing, np.nan, running)


def _histogram_array(H: Mapping[tuple[int, int], float] | Any) -> FloatArray:
    """A joint histogram H[d][acc] as a square float array, validated."""
    if isinstance(H, Mapping):
        if not H:
            raise InvalidInput("H: empty histogram; need at least one {(d, acc): count}")
        size = max(d for d, _ in H) + 1
        if min(min(key) for key in H) < 0:
            raise InvalidInput(f"H: negative draft or accept length in {sorted(H)}")
        array = np.zeros((size, max(size, max(acc for _, acc in H) + 1)))
        for (d, acc), count in H.items():
            array[d, acc] += count
    else:
        try:
            array = np.asarray(H, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"H: not a rectangular numeric array H[d][acc] ({exc})") from exc
        if array.ndim != 2 or array.size == 0:
            raise InvalidInput(f"H: expected a 2-D array H[d][acc], got shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise InvalidInput("H: counts must be finite and >= 0")
    d_index, acc_index = np.nonzero(array)
    if np.any(acc_index > d_index):
        raise InvalidInput("H: some draft keeps more tokens than it drafted (acc > d)")
    # square it: acc <= d, so columns beyond the last d are zero and columns may be missing
    size = array.shape[0]
    square = np.zeros((size, size))
    square[:, : min(size, array.shape[1])] = array[:, :size]
    return square


def from_histogram(H: Mapping[tuple[int, int], float] | Any) -> tuple[FloatArray, FloatArray]:
    """(drafted_i, accepted_i) for positions i = 0..K-1 from a joint histogram.

    ``H[(d, acc)]`` counts drafts of length d that kept acc tokens. A draft has position i
    iff d > i and kept it iff acc > i (0-based), so drafted_i = sum_{d>i} H and
    accepted_i = sum_{acc>i} H; K is the longest draft length seen. These are the counts
    behind a_i in eq. tau (and accepted_i, drafted_i in the estimator's eq. â).
    """
    array = _histogram_array(H)
    per_d = array.sum(axis=1)
    per_acc = array.sum(axis=0)
    # reverse cumulative sums: entry i counts all lengths >= i; drop i=0 to get "> i"
    drafted = np.cumsum(per_d[::-1])[::-1][1:]
    accepted = np.cumsum(per_acc[::-1])[::-1][1:]
    return drafted, accepted


def stock_estimate(accepted_per_pos: Counts, num_drafts: float) -> FloatArray:
    """vLLM's stock per-position rate: accepted_i / num_drafts (its Grafana panel).

    Biased low whenever draft lengths vary (ngram finding no match, dynamic SD running a
    shorter K): the denominator counts drafts that never had position i, so it is a lower
    bound on a_i. Equal to :func:`per_position` only when every draft has length K.
    All nan when there were no drafts.
    """
    acc = _counts("accepted_per_pos", accepted_per_pos)
    if not np.isfinite(num_drafts) or num_drafts < 0:
        raise InvalidInput(f"num_drafts={num_drafts} must be finite and >= 0")
    if num_drafts == 0:
        return np.full(acc.shape, np.nan)
    return acc / num_drafts
