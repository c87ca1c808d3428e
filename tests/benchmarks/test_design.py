"""The block design: adaptive plans and orders (pure)."""

from __future__ import annotations

import random

from benchmarks.cells import Window
from benchmarks.design import LoadPlan, block_order, full_plan, pair_order, plan
from benchmarks.stats import Settings, analyze

from tests.benchmarks.test_stats import blocks

TABLES = ["fixed-k0", "fixed-k1", "fixed-k3", "tuned", "aa:fixed-k3"]
FAST = Settings(n_boot=500)


def test_the_first_rounds_measure_everything() -> None:
    p = full_plan([1, 4], TABLES, ["nospec"])
    assert p == {1: LoadPlan(TABLES, ["nospec"]), 4: LoadPlan(TABLES, ["nospec"])}


def test_a_load_closes_when_every_comparison_is_resolved() -> None:
    truth = {"fixed-k0": {1: 50.0, 4: 150.0}, "fixed-k1": {1: 80.0, 4: 200.0},
             "fixed-k3": {1: 100.0, 4: 200.0}, "tuned": {1: 100.0, 4: 180.0},
             "aa:fixed-k3": {1: 100.0, 4: 200.0}}
    quiet = blocks({p: {1: v[1]} for p, v in truth.items()}, 12, noise=0.002)
    noisy = blocks({p: {4: v[4]} for p, v in truth.items()}, 5, noise=0.15, seed=1, first_block=100)
    a = analyze(quiet + noisy, FAST)
    p = plan(a, [1, 4], TABLES, [], "fixed-k3")
    assert 1 not in p  # N=1: every interval narrow or decided
    assert 4 in p and "aa:fixed-k3" in p[4].tables and "fixed-k3" in p[4].tables


def test_decided_policies_stop_costing_windows() -> None:
    truth = {"fixed-k0": {4: 50.0}, "fixed-k1": {4: 100.0}, "fixed-k3": {4: 100.0},
             "tuned": {4: 100.0}, "aa:fixed-k3": {4: 100.0}}
    windows = blocks(truth, 6, noise=0.05)
    a = analyze(windows, FAST)
    assert a.comparisons[("fixed-k0", 4)].verdict == "worse"
    p = plan(a, [4], TABLES, [], "fixed-k3")[4]
    assert "fixed-k0" not in p.tables  # decided worse: neither open nor a reference candidate
    assert {"fixed-k1", "fixed-k3", "tuned", "aa:fixed-k3"} <= set(p.tables)


def test_an_open_paired_policy_keeps_its_chain_in_the_table_blocks() -> None:
    tables = {"fixed-k1": {4: 100.0}, "fixed-k3": {4: 60.0}, "aa:fixed-k3": {4: 60.0}}
    windows = blocks(tables, 8, noise=0.001)
    windows += blocks({"nospec": {4: 100.0}, "fixed-k3": {4: 60.0}}, 3, noise=0.2, seed=2,
                      group="nospec", first_block=100)
    a = analyze(windows, FAST)
    assert a.comparisons[("fixed-k3", 4)].verdict == "worse"
    p = plan(a, [4], list(tables), ["nospec"], "fixed-k3")[4]
    assert p.paired == ["nospec"] and "fixed-k3" in p.tables  # the chained factor k3 -> k1


def test_a_paired_policy_whose_pair_is_the_reference_needs_no_table_block() -> None:
    tables = {"fixed-k1": {4: 60.0}, "fixed-k3": {4: 100.0}, "aa:fixed-k3": {4: 100.0}}
    windows = blocks(tables, 10, noise=0.001)
    windows += blocks({"nospec": {4: 99.0}, "fixed-k3": {4: 100.0}}, 3, noise=0.2, seed=2,
                      group="nospec", first_block=100)
    p = plan(analyze(windows, FAST), [4], list(tables), ["nospec"], "fixed-k3")[4]
    assert p == LoadPlan([], ["nospec"])


def test_orders_are_seeded_shuffles_and_pairs_alternate() -> None:
    a = block_order(TABLES, random.Random(3))
    assert sorted(a) == sorted(TABLES) and a == block_order(TABLES, random.Random(3))
    assert len({tuple(block_order(TABLES, random.Random(s))) for s in range(20)}) > 5
    assert pair_order("nospec", "fixed-k3", 0) == ["fixed-k3", "nospec"]
    assert pair_order("nospec", "fixed-k3", 1) == ["nospec", "fixed-k3"]


def test_a_load_without_a_fixed_k_yet_plans_everything() -> None:
    w = [Window(block=0, round=0, load=4, group="tables", position=0, policy="tuned",
                tokens_per_s=10.0, window_s=1.0, started_s=0.0)]
    assert plan(analyze(w, FAST), [4], TABLES, [], "fixed-k3") == {4: LoadPlan(TABLES, [])}
