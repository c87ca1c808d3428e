"""Does the engine honor the table? Verdicts from synthetic ring rows (tuner/core/honor.py)."""

from __future__ import annotations

import numpy as np

from tuner.core.admin_api import StatsReply, Step
from tuner.core.honor import (
    Burst,
    HonorCheck,
    check,
    compare_drafting,
    counts_between,
    decode_steps,
    edge_plan,
    judge,
    measured_cell,
    sweep_cell,
    verified_drafts,
)
from tuner.core.table import Table

K = 3


def rows(B: int, k: int, n: int, drafts: float | None = None, ms: float = 20.0,
         seq0: int = 1, k_prev: int | None = None, prompt: int = 32) -> list[Step]:
    """A burst as the plugin's ring holds it: one prefill step of B prompts (verifying the previous
    k), then n decode steps of B requests each verifying ``drafts`` drafts (default: k)."""
    d = k if drafts is None else drafts
    first = Step(seq0, B, k if k_prev is None else k_prev, k, ms / 1e3, B * prompt, B, 0.0)
    decode = [Step(seq0 + 1 + i, B, k, k, ms / 1e3, round(B * (1 + d)), B, 0.0) for i in range(n)]
    return [first, *decode]


def one_range(k: int) -> Table:
    return Table.from_list([[1, 256, k]])


def test_decode_steps_leave_out_prefill_transitions_and_other_batch_sizes() -> None:
    ring = rows(4, 1, 5, k_prev=3)
    ring.append(Step(99, 2, 1, 1, 0.02, 4, 2, 0.0))           # the batch draining: another B
    ring.append(Step(100, 4, 1, 2, 0.02, 8, 4, 0.0))          # a swap: verified 1, drafts 2
    kept = decode_steps(ring, 4, K)
    assert [r[0] for r in kept] == [2, 3, 4, 5, 6]
    assert verified_drafts(ring, 4, K) == [1.0] * 5


def test_judge_reads_fewer_as_honored_and_the_startup_k_as_ignored() -> None:
    assert judge(1.0, 1, K) == "honored"
    assert judge(0.6, 2, K) == "honored"     # ngram proposes fewer when nothing matches
    assert judge(0.2, 0, K) == "honored"     # within the tolerance
    assert judge(3.0, 0, K) == "ignored"
    assert judge(2.9, 1, K) == "ignored"
    assert judge(1.6, 0, K) == "partial"
    assert judge(3.0, 3, K) == "honored"     # k = K: honored and ignored look alike
    assert judge(None, 1, K) == "unmeasured"


def test_a_cell_takes_medians_over_its_bursts_and_counts_off_table_steps() -> None:
    a = rows(8, 2, 30, ms=20.0)
    b = rows(8, 2, 30, ms=22.0, seq0=100)
    b[5] = Step(b[5].seq, 8, 3, 3, 0.025, 32, 8, 0.0)  # one step the scheduler ran at k=3
    cell = measured_cell([Burst(a), Burst(b)], one_range(2), 8, K)
    assert cell.k == 2 and cell.drafts == 2.0 and cell.verdict == "honored"
    assert cell.steps == 60 and cell.off_table == 1
    assert cell.step_ms is not None and 20.0 <= cell.step_ms <= 22.0
    assert [len(c) for c in cell.steps_ms] == [30, 30]


def test_an_engine_that_verifies_its_startup_k_whatever_the_table_is_ignored() -> None:
    cells = [measured_cell([Burst(rows(B, k, 20, drafts=K))], one_range(k), B, K)
             for B in (1, 32) for k in range(K + 1)]
    assert [c.verdict for c in cells if c.k < K] == ["ignored"] * 6
    got = check(cells, K)
    assert got.verified == "ignored" and "IGNORES" in got.finding


def test_every_k_followed_at_every_batch_size_is_honored_and_the_edge_too() -> None:
    cells = [measured_cell([Burst(rows(B, k, 20, ms=10 + 2 * k))], one_range(k), B, K)
             for B in (1, 32) for k in range(K + 1)]
    plan = edge_plan([1, 32], K, 256, edge=16)
    assert plan is not None and plan.table.to_list() == [[1, 16, 3], [17, 256, 1]]
    assert (plan.B_below, plan.B_above) == (1, 32)
    edge = [measured_cell([Burst(rows(B, plan.table.k_at(B), 20))], plan.table, B, K)
            for B in (plan.B_below, plan.B_above)]
    got = check(cells, K, edge=edge, runner="v2")
    assert got.verified == "honored" and got.drafted == "unmeasured"
    assert "follow the table" in got.finding and "[[1, 16, 3], [17, 256, 1]]" in got.finding
    assert "V2 runner" in got.finding  # drafting cannot be read from the counters there
    assert "-38% at B=1" in got.finding  # T(B, 0) = 10 ms against T(B, 3) = 16 ms


def test_an_edge_that_verifies_k_above_it_is_partial() -> None:
    cells = [measured_cell([Burst(rows(4, k, 20))], one_range(k), 4, K) for k in range(K + 1)]
    table = Table.from_list([[1, 2, 3], [3, 256, 1]])
    edge = [measured_cell([Burst(rows(4, 1, 20, drafts=3))], table, 4, K)]
    got = check(cells, K, edge=edge)
    assert edge[0].verdict == "ignored" and got.verified == "partial"
    assert "k=1 at B=4: 3.00" in got.finding


def test_edge_plan_needs_a_batch_size_on_each_side() -> None:
    assert edge_plan([1, 8, 64], K, 256) == edge_plan([1, 8, 64], K, 256, edge=8)
    assert edge_plan([1, 8], 1, 8, edge=4) is not None
    assert edge_plan([1, 8], 1, 8, edge=4).table.to_list() == [[1, 4, 1], [5, 8, 0]]  # type: ignore[union-attr]
    assert edge_plan([8], K, 256) is None
    assert edge_plan([1, 8], K, 256, edge=8) is None


def _steps(level: float, bursts: int = 2, n: int = 40, seed: int = 0) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(level * (1 + 0.004 * rng.standard_normal(n))) for _ in range(bursts)]


def _cell(K_engine: int, ms: float, seed: int) -> object:
    steps = _steps(ms, seed=seed)
    return measured_cell([Burst(rows(32, 1, 1))], one_range(1), 32, K_engine).model_copy(
        update={"steps_ms": steps, "step_ms": float(np.median(np.concatenate(steps)))})


def test_drafting_longer_on_the_K_engine_is_the_startup_k_the_same_is_the_tables() -> None:
    ref = _cell(1, 20.0, seed=1)
    more = compare_drafting(_cell(K, 20.6, seed=2), ref)  # type: ignore[arg-type]
    same = compare_drafting(_cell(K, 20.0, seed=3), ref)  # type: ignore[arg-type]
    assert more is not None and more.verdict == "startup_k" and more.low > 1.01
    assert same is not None and same.verdict == "table_k" and same.high < 1.01
    assert abs(more.extra_ms - 0.6) < 0.1 and more.K_ref == 1
    got = check([_cell(K, 20.6, seed=2)], K, reference=[ref])  # type: ignore[list-item]
    assert got.drafted == "startup_k" and "Drafting does NOT follow the table" in got.finding


def test_sweep_cells_and_the_check_survive_json() -> None:
    cells = [sweep_cell(B, k, K, 256, [float(k)], 30, 10.0 + k) for B in (1, 64) for k in range(K + 1)]
    got = check(cells, K)
    assert got.verified == "honored" and cells[0].table == [[1, 256, 0]]
    assert HonorCheck.model_validate_json(got.model_dump_json()) == got
    assert check([sweep_cell(1, 0, K, 256, [], 0, None)], K).verified == "unknown"


def test_counts_between_two_reads_are_the_steps_drafts_and_verified_drafts() -> None:
    before = StatsReply(engine_steps_per_k={3: 10}, drafted_per_pos=[5, 5, 5],
                        histogram=[(3, 0, 5)])
    after = StatsReply(engine_steps_per_k={3: 10, 1: 7}, drafted_per_pos=[19, 5, 5],
                       histogram=[(3, 0, 5), (1, 0, 12), (0, 0, 2)])
    got = counts_between(before, after)
    assert got.engine_steps_per_k == {1: 7} and got.drafted_per_pos == [14, 0, 0]
    assert got.request_steps == 14 and got.verified == 12


def test_a_K_engine_faster_than_the_reference_is_unclear_not_the_tables_k() -> None:
    # more drafting cannot shorten a step: the engines differ by something else (the host)
    faster = compare_drafting(_cell(K, 19.0, seed=4), _cell(1, 20.0, seed=1))  # type: ignore[arg-type]
    assert faster is not None and faster.high < 0.99 and faster.verdict == "unclear"
