"""The draft-length table: vLLM's ``num_speculative_tokens_per_batch_size``.

A table is a list of inclusive ranges ``[[start_bs, end_bs, K], ...]``: a step with batch
size B drafts K tokens, where K comes from the range holding B. TableTune fills it with the k
maximising the paper's goodput G(B, k) = B·tau(k)/T(B, k) (eq. G, see tuner/core/goodput.py).
vLLM expands it into a dense lookup (``build_dynamic_sd_schedule_lookup``); :meth:`Table.dense`
reproduces that expansion exactly, and :meth:`Table.from_dense` compacts a per-B choice back.

The validator accepts exactly the sorted tables vLLM's
``validate_and_normalize_dynamic_sd_schedule`` accepts; it refuses unsorted ones, which vLLM
would silently sort, because an unsorted table pushed by hand is almost surely a typo.
:func:`fit_to_engine` then cuts a valid table to ``max_num_seqs`` as vLLM's lookup does.

stdlib + pydantic only: this module is imported inside the vLLM engine process.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from tuner.core.errors import InvalidInput, InvalidTable

__all__ = ["Fitted", "Table", "check_for_engine", "documented_table", "fit_to_engine", "shrink"]

Range = tuple[int, int, int]

# vLLM's documented example table (docs, "Dynamic Speculative Decoding").
DOCUMENTED_RANGES: tuple[Range, ...] = ((1, 64, 3), (65, 128, 1), (129, 512, 0))


def _range_problem(index: int, rng: Range, previous: Range | None) -> str | None:
    """The first reason range ``index`` is invalid, or None (vLLM's rules, in vLLM's order)."""
    start_bs, end_bs, k = rng
    where = f"ranges[{index}]"
    if start_bs < 1:
        return f"{where}: start_bs={start_bs} is below 1; batch sizes start at 1"
    if start_bs > end_bs:
        return (f"{where}: start_bs={start_bs} > end_bs={end_bs}; "
                "write each range as [start_bs, end_bs, K] with start_bs <= end_bs")
    if k < 0:
        return f"{where}: K={k} is negative; use K >= 0 (0 turns drafting off)"
    if previous is not None and start_bs < previous[0]:
        return (f"{where}: start_bs={start_bs} comes after start_bs={previous[0]} of "
                f"ranges[{index - 1}]; sort the ranges by start_bs")
    if previous is not None and start_bs <= previous[1]:
        return (f"{where}: start_bs={start_bs} overlaps the previous range ending at "
                f"{previous[1]}; ranges must not overlap")
    if previous is None and start_bs != 1:
        return (f"{where}: start_bs={start_bs} but the first range must start at 1 "
                "so every batch size has a K")
    return None


def _table_problem(ranges: Sequence[Range]) -> str | None:
    """The first reason ``ranges`` is not a valid table, or None."""
    if not ranges:
        return "ranges: empty; give at least one [start_bs, end_bs, K] range starting at 1"
    previous: Range | None = None
    for index, rng in enumerate(ranges):
        problem = _range_problem(index, rng, previous)
        if problem is not None:
            return problem
        previous = rng
    return None


def _message(exc: ValidationError) -> str:
    """One line naming the field and the fix, from pydantic's first error."""
    error = exc.errors()[0]
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, InvalidTable):
        return str(cause)
    # a type error: pydantic's loc is ("ranges", i, j); render it as ranges[i][j]
    path = "".join(f"[{part}]" for part in error["loc"][1:])
    return (f"ranges{path}: {error['msg']}; "
            "a table is a list of [start_bs, end_bs, K] integer triples")


def _require_at_least_one(**values: int) -> None:
    """InvalidInput naming the first engine setting below 1 (vLLM refuses those too)."""
    for name, value in values.items():
        if value < 1:
            raise InvalidInput(f"{name}={value} must be >= 1")


class Table(BaseModel):
    """A validated, immutable ``num_speculative_tokens_per_batch_size``: k per B for eq. G."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ranges: tuple[tuple[int, int, int], ...]

    @field_validator("ranges")
    @classmethod
    def _check_ranges(cls, ranges: tuple[Range, ...]) -> tuple[Range, ...]:
        """vLLM's schedule rules; see :func:`_range_problem`."""
        # InvalidTable is a ValueError, so pydantic wraps it into its ValidationError
        problem = _table_problem(ranges)
        if problem is not None:
            raise InvalidTable(problem)
        return ranges

    @classmethod
    def parse_list(cls, obj: object) -> Table:
        """Validate untrusted JSON-like ``obj`` (vLLM's list form); raise InvalidTable."""
        if not isinstance(obj, list | tuple):
            raise InvalidTable(f"ranges: got {type(obj).__name__}; "
                               "a table is a list of [start_bs, end_bs, K] integer triples")
        try:
            return cls.model_validate({"ranges": obj})
        except ValidationError as exc:
            raise InvalidTable(_message(exc)) from exc

    @classmethod
    def from_list(cls, ranges: Iterable[Sequence[int]]) -> Table:
        """Build from vLLM's ``[[start_bs, end_bs, K], ...]``; raise InvalidTable."""
        return cls.parse_list([list(rng) for rng in ranges])

    @classmethod
    def from_dense(cls, ks: Sequence[int], start: int = 1) -> Table:
        """Compact a per-batch-size choice: ``ks[i]`` is K at B = start + i (eq. G).

        Entries below B=1 are dropped, so vLLM's own lookup (index 0 unused) can be passed
        with ``start=0``. Equal neighbours merge into one range; the last range ends at the
        last B given.
        """
        skip = max(0, 1 - start)
        batch_size = start + skip
        ranges: list[list[int]] = []
        for k, run in itertools.groupby(ks[skip:]):
            length = sum(1 for _ in run)
            ranges.append([batch_size, batch_size + length - 1, int(k)])
            batch_size += length
        return cls.parse_list(ranges)

    def to_list(self) -> list[list[int]]:
        """vLLM's JSON form ``[[start_bs, end_bs, K], ...]``."""
        return [list(rng) for rng in self.ranges]

    def k_at(self, batch_size: int, num_speculative_tokens: int | None = None) -> int:
        """K for one batch size, as vLLM looks it up (gaps and the tail carry K forward).

        With ``num_speculative_tokens`` the result is clamped as vLLM clamps it.
        """
        if batch_size < 1:
            raise InvalidInput(f"batch_size={batch_size} must be >= 1")
        # the last range starting at or below B owns B: it either holds B or B sits in
        # the gap (or tail) after it, where vLLM carries that range's K forward
        index = bisect.bisect_right(self.ranges, batch_size, key=lambda rng: rng[0]) - 1
        k = self.ranges[index][2]
        return k if num_speculative_tokens is None else min(k, num_speculative_tokens)

    def dense(self, max_num_seqs: int, num_speculative_tokens: int) -> list[int]:
        """vLLM 0.32's ``build_dynamic_sd_schedule_lookup``: index B holds K(B), index 0 is 0.

        K is clamped to ``num_speculative_tokens``; ranges beyond ``max_num_seqs`` are cut.
        """
        _require_at_least_one(max_num_seqs=max_num_seqs,
                              num_speculative_tokens=num_speculative_tokens)
        lookup = [0] * (max_num_seqs + 1)
        starts = [rng[0] for rng in self.ranges[1:]] + [max_num_seqs + 1]
        for (start_bs, _, k), next_start in zip(self.ranges, starts, strict=True):
            # a range's K holds until the next range starts (gap carry-forward)
            stop = min(next_start, max_num_seqs + 1)
            if start_bs >= stop:
                break
            lookup[start_bs:stop] = [min(k, num_speculative_tokens)] * (stop - start_bs)
        return lookup


class Fitted(NamedTuple):
    """A table cut to an engine's ``max_num_seqs`` and what was cut (None: nothing)."""

    table: Table
    clipped: str | None


def fit_to_engine(table: Table, max_num_seqs: int) -> Fitted:
    """The part of a valid table that vLLM's lookup uses (``build_dynamic_sd_schedule_lookup``).

    Ranges starting beyond ``max_num_seqs`` are dropped and the last kept range's end_bs is
    cut to ``max_num_seqs``; both tables give the same dense lookup. K is left alone (see
    :func:`check_for_engine`). At most ``max_num_seqs`` ranges remain.
    """
    _require_at_least_one(max_num_seqs=max_num_seqs)
    ranges = table.ranges
    # ranges[0] starts at 1 <= max_num_seqs, so at least one range is kept
    count = bisect.bisect_right(ranges, max_num_seqs, key=lambda rng: rng[0])
    kept = list(ranges[:count])
    start_bs, end_bs, k = kept[-1]
    cuts = []
    if end_bs > max_num_seqs:
        kept[-1] = (start_bs, max_num_seqs, k)
        cuts.append(f"ranges[{count - 1}] end_bs={end_bs} cut to {max_num_seqs}")
    if count < len(ranges):
        which = f"{count}" if count == len(ranges) - 1 else f"{count}..{len(ranges) - 1}"
        cuts.append(f"ranges[{which}] dropped (start_bs > {max_num_seqs})")
    if not cuts:
        return Fitted(table, None)
    clipped = f"fitted to max_num_seqs={max_num_seqs} as vLLM does: " + "; ".join(cuts)
    return Fitted(Table(ranges=tuple(kept)), clipped)


def check_for_engine(table: Table, num_speculative_tokens: int, max_num_seqs: int,
                     allowed_k: set[int] | None = None) -> None:
    """Refuse a valid table that this engine would silently alter or run slowly.

    Only the ranges :func:`fit_to_engine` keeps are checked: vLLM cuts the others, so their K
    never reaches the engine. vLLM silently clamps K to ``num_speculative_tokens``, which
    would make the measured goodput G(B, k) a lie, so that is an error here.
    """
    _require_at_least_one(max_num_seqs=max_num_seqs,
                          num_speculative_tokens=num_speculative_tokens)
    for index, (_, _, k) in enumerate(fit_to_engine(table, max_num_seqs).table.ranges):
        if k > num_speculative_tokens:
            raise InvalidTable(
                f"ranges[{index}]: K={k} exceeds num_speculative_tokens="
                f"{num_speculative_tokens}; lower K or restart vLLM with a larger "
                "num_speculative_tokens")
        if allowed_k is not None and k not in allowed_k:
            raise InvalidTable(
                f"ranges[{index}]: K={k} is not in allowed_k={sorted(allowed_k)}; on the GPU "
                "V2 runner only the K values of the startup table have full CUDA graphs, so "
                f"use one of those or restart vLLM with a startup table that contains K={k}")


def documented_table(num_speculative_tokens: int, max_num_seqs: int) -> Table:
    """vLLM's documented [[1,64,3],[65,128,1],[129,512,0]], fitted to this engine.

    K is clamped to ``num_speculative_tokens``; ranges starting beyond ``max_num_seqs`` are
    dropped and the last kept range ends at ``max_num_seqs`` (the paper's baseline).
    """
    _require_at_least_one(max_num_seqs=max_num_seqs,
                          num_speculative_tokens=num_speculative_tokens)
    kept = [[start_bs, end_bs, min(k, num_speculative_tokens)]
            for start_bs, end_bs, k in DOCUMENTED_RANGES if start_bs <= max_num_seqs]
    kept[-1][1] = max_num_seqs
    return Table.from_list(kept)


def every_k_table(num_speculative_tokens: int, max_num_seqs: int) -> Table:
    """A startup table holding every K from K down to 0, [[1,1,K],[2,2,K-1],...,[K+1,max,0]]: the
    GPU V2 runner captures full CUDA graphs only for the startup table's K values, so an engine
    whose tables are swapped later (the tuner's --one-server, the bench) must start with all.
    With max_num_seqs <= K there is no room for each: the K values of the first batch sizes."""
    _require_at_least_one(max_num_seqs=max_num_seqs,
                          num_speculative_tokens=num_speculative_tokens)
    K, n = num_speculative_tokens, max_num_seqs
    if n <= K:
        return Table.from_list([[b, b, K - b + 1] for b in range(1, n + 1)])
    return Table.from_list([[i + 1, i + 1, K - i] for i in range(K)] + [[K + 1, n, 0]])


def shrink(table: Table, factor: int = 4) -> Table:
    """Divide every range boundary by ``factor``: the paper's "deliberately wrong table".

    The new table gives batch size B the K the old one gives at B·factor, up to the old last
    end_bs, so the documented table becomes [[1,16,3],[17,32,1],[33,end,0]] with factor 4.
    """
    if factor < 1:
        raise InvalidInput(f"factor={factor} must be >= 1")
    last_end = table.ranges[-1][1]
    ks = [table.k_at(batch_size * factor) for batch_size in range(1, last_end + 1)]
    return Table.from_dense(ks)
