"""The bench's block design (pure): what the next round measures, and in which order.

A *round* passes over the loads still open, in a fresh random order. At a load it runs one
table block (the table policies still needed, each once, in a fresh random order) and one
paired block per non-table policy still needed (that policy and the pair reference, in an
order alternating with the round). Every order comes from one seeded generator and is recorded
in cells.csv (`position`).

Adaptive sampling: the first `min_blocks` rounds measure everything. After that a load stays
open while a comparison there is unresolved (benchmarks/stats.py); in its table block it keeps
the policies with an unresolved comparison, the fixed k's that may still be the reference (all
but those already "worse"), the A/A pair (the noise floor is measured on the same blocks as
what it qualifies) and, when a paired policy is open and its pair reference is not the
reference, that k (the chained factor). A policy whose verdicts are all settled stops costing
windows; its interval keeps the blocks it had.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from benchmarks.stats import Analysis, is_fixed, twin

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LoadPlan:
    tables: list[str]    # the next table block's policies ([]: no table block)
    paired: list[str]    # non-table policies, one paired block each

    def is_empty(self) -> bool:
        return not self.tables and not self.paired


def full_plan(loads: Sequence[int], tables: Sequence[str], paired: Sequence[str]) -> dict[int, LoadPlan]:
    return {n: LoadPlan(list(tables), list(paired)) for n in loads}


def plan(a: Analysis, loads: Sequence[int], tables: Sequence[str], paired: Sequence[str],
         pair_ref: str) -> dict[int, LoadPlan]:
    """The next round's blocks: only open loads, only the policies they still need."""
    out: dict[int, LoadPlan] = {}
    for n in loads:
        p = plan_load(a, n, tables, paired, pair_ref)
        if not p.is_empty():
            out[n] = p
    return out


def plan_load(a: Analysis, n: int, tables: Sequence[str], paired: Sequence[str],
              pair_ref: str) -> LoadPlan:
    if n not in a.references:  # no table block measured a fixed k yet: everything
        return LoadPlan(list(tables), list(paired))
    open_ = {c.policy for c in a.unresolved() if c.load == n}
    open_ |= {c.versus for c in a.unresolved() if c.load == n and (c.policy, c.versus, n) in a.versus}
    paired_open = [g for g in paired if g in open_ or (g, n) not in a.comparisons]
    aa_open = n in a.aa and not a.aa[n].resolved
    table_open = [p for p in tables if p in open_ or ((p, n) not in a.comparisons and twin(p) is None)]
    chained = bool(paired_open) and pair_ref != a.references[n]
    if not table_open and not aa_open and not chained:
        return LoadPlan([], paired_open)
    keep = set(table_open)
    keep |= {p for p in tables if is_fixed(p) and a.comparisons.get((p, n)) is not None
             and a.comparisons[(p, n)].verdict != "worse"}
    keep |= {q for p in tables if (base := twin(p)) is not None for q in (p, base)}
    if chained:
        keep.add(pair_ref)
    return LoadPlan([p for p in tables if p in keep], paired_open)


def block_order(policies: Sequence[str], rng: random.Random) -> list[str]:
    """A fresh random order of one block's policies."""
    order = list(policies)
    rng.shuffle(order)
    return order


def rotated(items: Sequence[T], shift: int) -> list[T]:
    """``items`` rotated left by ``shift``: over consecutive shifts each item leads in turn."""
    i = shift % len(items)
    return [*items[i:], *items[:i]]


def pair_order(policy: str, pair_ref: str, round_: int) -> list[str]:
    """A paired block's two windows, the order alternating with the round (ABBA over rounds)."""
    return [pair_ref, policy] if round_ % 2 == 0 else [policy, pair_ref]
