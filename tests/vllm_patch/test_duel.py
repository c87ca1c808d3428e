"""Duels: runs at the asked batch sizes, paired by table steps, within their budget."""

from __future__ import annotations

import random

from tuner.core.table import Table
from vllm_patch.duel import DuelClock
from vllm_patch.policy import PolicyLookup
from vllm_patch.engine_state import Counters, EngineState, Policy, TableState


def engine_with(policy: Policy, table: list[list[int]], K: int = 3, n: int = 256) -> EngineState:
    t = Table.from_list(table)
    dense = tuple(t.dense(n, K))
    return EngineState(table=TableState(t, dense, 1, 0.0), policy=policy, num_speculative_tokens=K,
                       max_num_seqs=n, model_name="m", startup_k=frozenset({3}), restrict_k=False,
                       counters=Counters(num_positions=K))


def run_steps(engine: EngineState, batch_sizes: list[int]) -> list[int]:
    lookup = PolicyLookup(engine, lambda e: (_ for _ in ()).throw(e))
    return [lookup[b] for b in batch_sizes]


def test_the_budget_holds_over_every_window_of_the_horizon() -> None:
    policy = Policy(duels=((100, 140, (1, 2)),), duel_run=16, duel_share=0.02, duel_horizon=10_000)
    engine = engine_with(policy, [[1, 256, 3]])
    rng = random.Random(0)
    ks = run_steps(engine, [rng.randint(110, 130) for _ in range(30_000)])
    explored = [k != 3 for k in ks]
    assert engine.counters.explore_steps == sum(explored)
    worst = max(sum(explored[i:i + 10_000]) for i in range(0, 20_001, 250))
    assert 150 <= worst <= 200  # 2% of 10,000, spent early, then nothing until it frees
    assert sum(explored[:3000]) >= 150  # the comparison can finish in minutes
    # spread: a burst of 200 steps holds one run (16 steps), never a third of its steps
    assert max(sum(explored[i:i + 200]) for i in range(0, len(explored) - 200)) <= 16


def test_a_resent_policy_keeps_the_gap_since_the_last_run() -> None:
    """The sidecar re-sends its duels as buckets get served: that must not restart the wait."""
    clock = DuelClock()
    duels = ((1, 8, (2,)),)
    ks = [clock.k_for_step(duels, 4, 3, s, 4, 0.5, 1000) for s in range(9)]
    assert ks[8] == 2  # min gap 2·4 table steps, then a run
    ks = [clock.k_for_step(duels, 4, 3, s, 4, 0.5, 1000) for s in range(9, 17)]
    assert ks == [2, 2, 2] + [None] * 5  # the run's last 3 steps, then 5 of the gap
    extra = clock.jitter
    assert 0 <= extra < 4          # this gap's draw: up to a run's length more
    clock.reset()  # no run in progress: the 5 table steps since it ended still count
    later = [clock.k_for_step(duels, 4, 3, s, 4, 0.5, 1000) for s in range(17, 21 + extra)]
    assert later == [None] * (3 + extra) + [2]


def test_the_gaps_vary_so_repeating_bursts_do_not_lock_the_runs_phase() -> None:
    """Each gap waits up to a run more: bursts that repeat do not meet the runs at the same
    steps every time (docs/sidecar.md), while every gap still holds 2·run table steps."""
    clock, duels = DuelClock(), ((1, 8, (2,)),)
    ks = [clock.k_for_step(duels, 4, 3, s, 4, 0.5, 1000) for s in range(2000)]
    starts = [s for s in range(1, len(ks)) if ks[s] == 2 and ks[s - 1] is None]
    gaps = {b - a - 4 for a, b in zip(starts, starts[1:])}
    assert gaps == set(range(8, 12))  # 2·4 table steps, up to 3 more


def test_runs_alternate_challengers_and_keep_table_steps_around_them() -> None:
    policy = Policy(duels=((1, 64, (1, 2)),), duel_run=8, duel_share=0.5, duel_horizon=1000)
    engine = engine_with(policy, [[1, 256, 3]])
    ks = run_steps(engine, [32] * 200)
    runs: list[tuple[int, int, int]] = []  # (start, length, k) of every non-table stretch
    i = 0
    while i < len(ks):
        j = i
        while j < len(ks) and ks[j] == ks[i]:
            j += 1
        if ks[i] != 3:
            runs.append((i, j - i, ks[i]))
        i = j
    assert runs and all(length == 8 for _, length, _ in runs)
    assert [k for _, _, k in runs][:4] == [1, 2, 1, 2]
    gaps = [b[0] - (a[0] + a[1]) for a, b in zip(runs, runs[1:])]
    assert min(gaps) >= 16  # the incumbent's steps before and after each run: its own pair


def test_no_duel_outside_its_range_and_none_at_the_tables_own_k() -> None:
    policy = Policy(duels=((100, 140, (3, 1)),), duel_run=4, duel_share=0.5, duel_horizon=1000)
    engine = engine_with(policy, [[1, 64, 3], [65, 256, 1]])
    assert run_steps(engine, [8] * 200) == [3] * 200   # outside the range: the table
    ks = run_steps(engine, [120] * 200)                  # inside: k=3 only (1 is the table's)
    assert set(ks) == {1, 3} and ks.count(3) > 0


def test_a_new_policy_ends_the_run_in_progress() -> None:
    clock = DuelClock()
    duels = ((1, 8, (2,)),)
    ks = [clock.k_for_step(duels, 4, 3, s, 6, 0.5, 1000) for s in range(15)]
    assert ks[11] is None and ks[12] == 2 and ks[13] == 2   # after 2·6 table steps: a run
    clock.reset()
    assert clock.k_for_step((), 4, 3, 15, 6, 0.5, 1000) is None


def test_the_rotation_visits_only_the_policys_explore_ks() -> None:
    """A k left out of explore_ks never runs an explored step; () is every k again; a new
    policy object (rebound, never mutated) takes effect at the next step."""
    some = Policy(explore_every=20, explore_run=3, explore_ks=(2,), duel_share=0.5)
    engine = engine_with(some, [[1, 256, 3]])
    lookup = PolicyLookup(engine, lambda e: (_ for _ in ()).throw(e))
    ks = [lookup[64] for _ in range(400)]
    assert set(ks) == {2, 3} and ks.count(2) == 60      # 3 of every 20 steps, always k=2
    engine.policy = Policy(explore_every=20, explore_run=3, explore_ks=(3,), duel_share=0.5)
    assert {lookup[64] for _ in range(400)} == {3}          # the table's own k: runs the table
    engine.policy = Policy(explore_every=20, explore_run=3, duel_share=0.5)   # (): every k
    assert {lookup[64] for _ in range(400)} == {0, 1, 2, 3}


def test_a_policy_of_the_same_duels_keeps_the_run_in_progress() -> None:
    """The sidecar re-sends its duels with every policy PUT (a new rotation, the urgent share):
    a run in progress goes on unless the duels themselves changed."""
    duels = ((1, 256, (2,)),)
    first = Policy(duels=duels, duel_run=8, duel_share=0.5, duel_horizon=1000)
    engine = engine_with(first, [[1, 256, 3]])
    lookup = PolicyLookup(engine, lambda e: (_ for _ in ()).throw(e))
    ks = [lookup[64]]
    while ks[-1] != 2:                     # to the first step of a run
        ks.append(lookup[64])
    assert [lookup[64] for _ in range(2)] == [2, 2]   # 5 of its 8 steps left
    engine.policy = Policy(duels=duels, duel_run=8, duel_share=0.25, duel_horizon=1000,
                           explore_ks=(2, 3))
    assert [lookup[64] for _ in range(6)] == [2] * 5 + [3]   # it runs to its end
    while lookup[64] != 2:                 # into the next run
        pass
    engine.policy = Policy(duels=((1, 256, (1,)),), duel_run=8, duel_share=0.25, duel_horizon=1000)
    assert 2 not in [lookup[64] for _ in range(7)]   # other duels: that run ends at once


def test_rotation_and_duels_share_one_budget() -> None:
    """The rotation at its full 2% and duels switched on and off: together still at most 2% of
    any 10,000 steps (the rotation's steps are charged to the duels' budget)."""
    rotation = Policy(explore_every=150, explore_run=3, duel_share=0.02, duel_horizon=10_000)
    dueling = Policy(explore_every=150, explore_run=3, duels=((1, 256, (1, 2)),), duel_run=16,
                     duel_share=0.02, duel_horizon=10_000)
    engine = engine_with(rotation, [[1, 256, 3]])
    lookup = PolicyLookup(engine, lambda e: (_ for _ in ()).throw(e))
    ks = []
    for step in range(40_000):
        engine.policy = dueling if (step // 7000) % 2 else rotation
        ks.append(lookup[64])
    explored = [k != 3 for k in ks]
    worst = max(sum(explored[i:i + 10_000]) for i in range(0, 30_001, 100))
    assert worst <= 200
    assert sum(explored[7000:8000]) > 0  # the duels still got their runs


def test_a_plain_policys_steps_make_no_room_for_more_exploration() -> None:
    """A bench freezes its sidecar between arms and runs the others under the plain policy:
    those steps do not count in the budget's horizon, so the sidecar's arm explores within
    duel_share of its own steps (2%), as a sidecar in service would, not 2% of every step
    crowded into its third."""
    plain = Policy()
    dueling = Policy(duels=((1, 256, (2,)),), duel_run=16, duel_share=0.02, duel_horizon=10_000)
    engine = engine_with(plain, [[1, 256, 3]])
    lookup = PolicyLookup(engine, lambda e: (_ for _ in ()).throw(e))
    in_arm = []
    for step in range(90_000):
        engine.policy = dueling if (step // 200) % 3 == 2 else plain
        k = lookup[64]
        if engine.policy is dueling:
            in_arm.append(k != 3)
    assert len(in_arm) == 30_000 and sum(in_arm) > 0
    assert max(sum(in_arm[i:i + 10_000]) for i in range(0, 20_001, 200)) <= 200


def test_a_run_waits_for_a_run_s_length_of_the_table_s_k_before_it() -> None:
    """A pair compares a run with as many steps of the table's k on each side (sidecar/measured.py
    pairs_in): as B enters a range from another k's, the run waits for its reference."""
    clock, duels = DuelClock(), ((1, 8, (2,)),)
    ks = [clock.k_for_step(duels, 4, 1 if s < 5 else 3, s, 4, 0.5, 1000) for s in range(12)]
    assert ks[:9] == [None] * 9  # the gap (2·4) is over at step 8, yet only 4 steps at k=3
    assert ks[9] == 2


def test_steps_under_another_policy_are_no_reference() -> None:
    """A bench runs other arms under a plain policy between the sidecar's: back on the same
    duels, a run waits for a run's length of the table's k again, not for steps it never saw."""
    duels = Policy(duels=((1, 64, (2,)),), duel_run=4, duel_share=0.5, duel_horizon=1000)
    engine = engine_with(duels, [[1, 256, 3]])
    lookup = PolicyLookup(engine, lambda e: (_ for _ in ()).throw(e))
    assert [lookup[100] for _ in range(20)] == [3] * 20   # outside the range: the gap fills
    engine.policy = Policy()
    assert [lookup[32] for _ in range(5)] == [3] * 5       # another arm's steps
    engine.policy = duels
    assert [lookup[32] for _ in range(5)] == [3, 3, 3, 3, 2]
