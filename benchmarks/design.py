"""The bench's block design (pure): how many blocks, what each round measures, in which order.

Fixed design: the number of blocks per load is chosen before the run and every round measures
every policy at every load once, so the error rates of benchmarks/stats.py hold as stated (an
adaptive loop that adds rounds until the intervals resolve tripled the false-verdict rate,
docs/measurement.md). The number comes from the noise an A/A showed and the smallest effect
worth finding (``blocks_needed``); a run the budget cuts short keeps its verdicts valid (the stop
did not look at the data) and loses only power; summary.json shows planned and achieved blocks.

A *round* passes over the loads in a fresh random order. At a load it runs one table block
(every table policy once, in a fresh random order) and one paired block per non-table policy
(that policy and the pair reference, in an order alternating with the round). Every order
comes from one seeded generator and is recorded in cells.csv (`position`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, TypeVar

import numpy as np

from benchmarks.inference import MIN_BLOCKS
from tuner.core.student_t import t_ppf

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LoadPlan:
    tables: list[str]    # the next table block's policies ([]: no table block)
    paired: list[str]    # non-table policies, one paired block each

    def is_empty(self) -> bool:
        return not self.tables and not self.paired


def full_plan(loads: Sequence[int], tables: Sequence[str], paired: Sequence[str]) -> dict[int, LoadPlan]:
    return {n: LoadPlan(list(tables), list(paired)) for n in loads}


def sd_log_ratio(cv: float) -> float:
    """Spread of one block's log ratio of two windows, each log-normal with coefficient of
    variation ``cv``: both windows are noisy, so √2 times a window's σ."""
    return math.sqrt(2 * math.log1p(cv * cv))


def family_size(num_loads: int, policies: Sequence[str], num_pairs: int = 0) -> int:
    """Verdicts of one run, at most: at every load each policy but the reference against it
    (an A/A copy against its twin instead) and each head-to-head pair."""
    return num_loads * (len(policies) - 1 + num_pairs)


def _clear_all(a: np.ndarray, references: int) -> np.ndarray:
    """P(every one of ``references`` comparisons clears) where one alone clears with
    probability Φ(-a): the estimates against equally good references share the policy's own
    windows (correlation 1/2), so P = ∫ φ(x) Φ(x - √2·a)^F dx (one: Φ(-a)), on a grid."""
    x = np.linspace(-8.0, 8.0, 1601)
    cdf = np.frompyfunc(lambda v: NormalDist().cdf(v), 1, 1)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    inner = np.asarray(cdf(x[None] - math.sqrt(2) * a[:, None]), dtype=np.float64) ** references
    return np.asarray(np.trapezoid(phi[None] * inner, x, axis=-1), dtype=np.float64)


def power(n: np.ndarray, sd: float, effect: float, threshold: float, alpha: float,
          references: int = 1) -> np.ndarray:
    """Chance that n blocks call a true ``effect`` (0.05: 5%) better at level ``alpha``
    (two-sided against the ±threshold band): P(lower bound > log(1 + threshold)), the t
    critical value for n - 1 df and a normal approximation of the estimate. ``references``:
    "better" than the best of that many fixed k's must beat each (benchmarks/stats.py's
    intersection-union test); planned for the least favourable case, all of them as good."""
    crit = t_ppf(np.full(n.shape, 1 - alpha / 2), n - 1)
    shift = (math.log1p(effect) - math.log1p(threshold)) * np.sqrt(n) / sd
    if references <= 1:
        return np.array([NormalDist().cdf(float(x)) for x in shift - crit])
    return _clear_all(np.asarray(crit - shift, dtype=np.float64), references)


def blocks_needed(sd: float, effect: float, threshold: float = 0.01, alpha: float = 0.05,
                  family: int = 1, target: float = 0.8, most: int = 5000,
                  references: int = 1) -> int:
    """Fewest blocks (>= MIN_BLOCKS) that find ``effect`` with probability ``target`` when every
    verdict is tested at alpha / family (Holm's first step: the strictest it gets), for a
    per-block log-ratio spread ``sd`` (an A/A's `aa_sd_log`, or sd_log_ratio(cv)), against the
    best of ``references`` fixed k's (power)."""
    if effect <= threshold:
        raise ValueError(f"effect={effect}: the smallest effect worth finding must exceed the "
                         f"threshold {threshold}, which no verdict can go below")
    def enough(n: int) -> bool:
        return bool(power(np.array([float(n)]), sd, effect, threshold, alpha / max(family, 1),
                          references)[0] >= target)

    lo, hi = MIN_BLOCKS, most          # power grows with n: bisect for the first n with enough
    if enough(lo) or not enough(hi):
        return lo if enough(lo) else most
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def design(sd: float, effect: float, threshold: float, alpha: float, family: int, target: float,
           blocks: int | None = None, references: int = 1) -> dict[str, Any]:
    """summary.json's `design`: fixed, the blocks planned and what they were planned from."""
    needed = blocks_needed(sd, effect, threshold, alpha, family, target, references=references)
    planned = blocks if blocks is not None else needed
    return {"kind": "fixed", "planned_blocks": planned, "blocks_for_target_power": needed,
            "basis": f"per-block log-ratio sd {sd:.3f}, smallest effect {effect * 100:g}%, "
                     f"power {target * 100:g}% at level {alpha:g}/{family}, better than each "
                     f"of {references} fixed k",
            "sd_log": round(sd, 4), "effect": effect, "target_power": target,
            "family_size": family, "references": references}


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
