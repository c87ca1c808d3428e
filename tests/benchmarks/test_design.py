"""The block design: planned blocks and orders (pure)."""

from __future__ import annotations

import random

import pytest

from benchmarks.design import (LoadPlan, block_order, blocks_needed, design, family_size,
                               full_plan, pair_order, sd_log_ratio)

TABLES = ["fixed-k0", "fixed-k1", "fixed-k3", "tuned", "aa:fixed-k3"]


def test_every_round_measures_everything() -> None:
    p = full_plan([1, 4], TABLES, ["nospec"])
    assert p == {1: LoadPlan(TABLES, ["nospec"]), 4: LoadPlan(TABLES, ["nospec"])}


def test_blocks_grow_with_the_noise_and_the_family() -> None:
    assert sd_log_ratio(0.10) == pytest.approx(0.1411, abs=1e-3)
    quiet, noisy = (blocks_needed(sd_log_ratio(cv), 0.05, family=40) for cv in (0.05, 0.10))
    assert 40 <= quiet <= 80 and 3.4 <= noisy / quiet <= 4.2   # n grows with the variance
    assert blocks_needed(sd_log_ratio(0.05), 0.05, family=1) < quiet
    assert blocks_needed(0.001, 0.05) == 4   # never below the fewest a verdict takes
    with pytest.raises(ValueError, match="must exceed the threshold"):
        blocks_needed(0.1, 0.01)


def test_the_family_counts_every_verdict_of_a_run() -> None:
    # per load: 4 policies against the reference (5 - the reference), the A/A, 2 pairs
    assert family_size(4, [*TABLES, "nospec"], 2) == 4 * (6 - 1 + 2)


def test_the_design_says_what_it_planned_from() -> None:
    d = design(sd_log_ratio(0.05), 0.05, 0.01, 0.05, 40, 0.8)
    assert d["kind"] == "fixed" and d["planned_blocks"] == d["blocks_for_target_power"]
    assert design(sd_log_ratio(0.05), 0.05, 0.01, 0.05, 40, 0.8, blocks=10)["planned_blocks"] == 10


def test_orders_are_seeded_shuffles_and_pairs_alternate() -> None:
    a = [block_order(TABLES, random.Random(1)) for _ in range(2)]
    assert a[0] == a[1] and sorted(a[0]) == sorted(TABLES)
    assert pair_order("nospec", "fixed-k3", 0) == ["fixed-k3", "nospec"]
    assert pair_order("nospec", "fixed-k3", 1) == ["nospec", "fixed-k3"]
