"""Where the engine's step time jumps before anyone measures it: CUDA-graph boundaries (pure).

A vLLM step runs a captured CUDA graph when its token count fits a captured size, and eager (or
piecewise) past the largest one; with `max_num_batched_tokens` the scheduler also splits work.
A decode step at batch size B and draft length k carries B·(k+1) tokens, plus the prefill a
serving workload brings per step (B·τ(k)/output_tokens prompts of prompt_tokens each). A grid
that does not straddle a graph limit finds the jump only after the fact (docs/tuner.md), so
the grid gets points on both sides of every such B, and table edges that fall near one snap
to it.

Graph sizes are a GPU notion (the CPU engine captures none): these functions take the sizes
read from the engine's config and are tested against sizes given by hand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tuner.core.table import Table

__all__ = ["Boundary", "boundaries", "grid_points", "snap_edges"]


@dataclass(frozen=True, slots=True)
class Boundary:
    """At draft length k, batch size B_last is the last whose step fits ``tokens``."""

    k: int
    B_last: int
    tokens: int  # the captured size (or the token budget) the step crosses after B_last


def _tokens(B: int, k: int, prefill_per_request: float) -> float:
    return B * (k + 1) + B * prefill_per_request


def boundaries(capture_sizes: Iterable[int], max_num_batched_tokens: int | None, K: int,
               max_num_seqs: int, prefill_per_request: Sequence[float] | None = None) -> list[Boundary]:
    """Per k, the last B whose step fits the largest captured graph and the token budget.

    Only the largest captured size is a cliff (past it a step leaves the graphs); smaller
    captured sizes are steps of padding, a few percent, which the grid's points already span.
    ``prefill_per_request[k]``: prefill tokens a step carries per request at k (0: pure decode).
    """
    limits = sorted({s for s in capture_sizes if s > 0})
    caps = ([limits[-1]] if limits else []) + ([max_num_batched_tokens] if max_num_batched_tokens else [])
    out = []
    for k in range(K + 1):
        extra = prefill_per_request[k] if prefill_per_request is not None else 0.0
        for cap in sorted(set(caps)):
            B_last = math.floor(cap / ((k + 1) + extra))
            if 1 <= B_last < max_num_seqs:
                out.append(Boundary(k, B_last, cap))
    return sorted(set(out), key=lambda b: (b.B_last, b.k))


def grid_points(grid: Sequence[int], found: Iterable[Boundary], max_num_seqs: int) -> list[int]:
    """The grid with both sides of every boundary (B_last and B_last + 1) added."""
    extra = {b for x in found for b in (x.B_last, x.B_last + 1) if 1 <= b <= max_num_seqs}
    return sorted(set(grid) | extra)


def snap_edges(table: Table, found: Iterable[Boundary], within: float = 0.1) -> Table:
    """Move a table edge that lies within ``within`` (relative) of a boundary of one of its two
    k's onto that boundary: interpolation put it near a jump the engine has exactly there."""
    ranges = table.to_list()
    marks = {(b.k, b.B_last) for b in found}
    for i in range(len(ranges) - 1):
        end, k_before, k_after = ranges[i][1], ranges[i][2], ranges[i + 1][2]
        near = [B for (k, B) in marks if k in (k_before, k_after)
                and abs(B - end) <= max(1, within * end)
                and ranges[i][0] <= B < ranges[i + 1][1]]
        if near:
            new_end = min(near, key=lambda B: abs(B - end))
            ranges[i][1], ranges[i + 1][0] = new_end, new_end + 1
    return Table.from_list(ranges)
