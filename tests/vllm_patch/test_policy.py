"""Pure parts of the plugin: per-step K policy, settings, counting."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vllm_patch.hooks import count_step
from vllm_patch.policy import PolicyLookup, range_width, step_k
from vllm_patch.settings import from_env
from tuner.core.buckets import step_bucket
from vllm_patch.engine_state import RECENT_STEPS, Counters, Policy

DENSE = (3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0)  # [[1,4,3],[5,10,1],[11,16,0]]


ALL_K = (0, 1, 2, 3)


def test_table_k_without_policy() -> None:
    assert step_k(DENSE, 4, None, 0, Policy(), ALL_K) == (3, False)
    assert step_k(DENSE, 5, 3, 0, Policy(), ALL_K) == (1, False)


def test_exploration_runs_take_the_other_ks_in_turn() -> None:
    p = Policy(explore_every=5, explore_run=2)
    ks = [step_k(DENSE, 7, 1, step, p, ALL_K) for step in range(40)]  # the table says 1 at B=7
    explored = {step: k for step, (k, is_explored) in enumerate(ks) if is_explored}
    # the last 2 steps of each cycle of 5; cycle c explores ALL_K[c % 4], and runs the table
    # when that is the table's k (cycles 1 and 5 here)
    assert explored == {3: 0, 4: 0, 13: 2, 14: 2, 18: 3, 19: 3,
                        23: 0, 24: 0, 33: 2, 34: 2, 38: 3, 39: 3}
    assert all(k == 1 for step, (k, _) in enumerate(ks) if step not in explored)


def test_a_run_keeps_its_k_while_the_batch_size_moves() -> None:
    p = Policy(explore_every=10, explore_run=4)
    # cycle 2 explores k=2; B moves across the table's edges during the run (k 3 -> 1 -> 0)
    run = [step_k(DENSE, b, 3, step, p, ALL_K) for step, b in zip(range(26, 30), (4, 5, 11, 12))]
    assert [k for k, _ in run] == [2, 2, 2, 2]
    assert step_k(DENSE, 7, 1, 9, Policy(), ALL_K) == (1, False)  # explore_every=0: off
    assert step_k(DENSE, 7, 1, 9, p, (1,)) == (1, False)          # no other k allowed


@given(st.lists(st.integers(0, 3), min_size=2, max_size=40), st.integers(1, 12), st.integers(1, 11),
       st.lists(st.integers(1, 40), min_size=1, max_size=60))
def test_exploration_share_and_ks(ks: list[int], every: int, run: int, sizes: list[int]) -> None:
    run = min(run, every - 1)
    if not run:
        return
    dense, p = (ks[0], *ks), Policy(explore_every=every, explore_run=run)
    picks = [step_k(dense, min(b, len(ks)), None, step, p, ALL_K) for step, b in enumerate(sizes)]
    for step, (b, (k, explored)) in enumerate(zip(sizes, picks)):
        if explored:
            assert k != dense[min(b, len(ks))] and step % every >= every - run
    explored_steps = sum(1 for _, e in picks if e)
    cycles = -(-len(sizes) // every)
    assert explored_steps <= cycles * run


def test_exploration_steps_are_counted_and_never_the_hysteresis_memory() -> None:
    from tests.vllm_patch.test_admin_fuzz import new_engine  # table [[1,4,3],[5,16,1]], K=3

    engine = new_engine()
    engine.policy = Policy(explore_every=4, explore_run=2, hysteresis=2)
    lookup = PolicyLookup(engine, lambda exc: None)
    ks = []
    for _ in range(8):
        ks.append(lookup[7])
        assert engine.current_k == 1  # the table's k at B=7, whatever was explored
    assert ks == [1, 1, 0, 0, 1, 1, 1, 1]  # cycle 1 would explore k=1: the table's own
    assert engine.counters.explore_steps == 2
    engine.restrict_k = True  # allowed: the startup table's {1, 3}
    assert engine.runnable_k == (1, 3)


@given(st.lists(st.integers(0, 3), min_size=2, max_size=40), st.integers(0, 5),
       st.integers(0, 3), st.data())
def test_policy_k_is_always_a_k_of_the_table_or_the_current(ks: list[int], h: int, cur: int,
                                                            data: st.DataObject) -> None:
    dense = (ks[0], *ks)
    b = data.draw(st.integers(1, len(ks)))
    k, explored = step_k(dense, b, cur, 1, Policy(hysteresis=h), ALL_K)
    assert not explored and k in (dense[b], cur)
    if k != dense[b]:
        assert cur in dense[max(1, b - h):b + h + 1]


def _dense(table: list[list[int]]) -> tuple[int, ...]:
    out = [0] * (table[-1][1] + 1)
    for start, end, k in table:
        out[start:end + 1] = [k] * (end - start + 1)
    out[0] = out[1]
    return tuple(out)


def test_a_range_narrower_than_the_hysteresis_band_is_entered_whatever_k_came_before() -> None:
    """Bursts of 4 (B 1..4) under [[1,2,0],[3,4,3],...] with h=2: every B is within 2 of a k=0
    batch size, so the old rule held k=0 (or k=3) for whole runs whichever the table said."""
    dense = _dense([[1, 2, 0], [3, 4, 3], [5, 8, 0], [9, 16, 3]])
    policy = Policy(hysteresis=2)
    for current in (0, 3):
        ks = [step_k(dense, b, current, 1, policy, ALL_K)[0] for b in range(1, 5)]
        assert ks == [0, 0, 3, 3], (current, ks)
    # a range of 4 holds within 1 of its edge, a wide one within h
    assert step_k(dense, 5, 3, 1, policy, ALL_K)[0] == 3
    assert step_k(dense, 6, 3, 1, policy, ALL_K)[0] == 0
    assert [step_k(dense, b, 0, 1, policy, ALL_K)[0] for b in (9, 10, 11)] == [0, 0, 3]
    assert range_width(dense, 3, 4) == 2 and range_width(dense, 12, 4) == 8
    assert range_width(dense, 12, 2) == 5  # counted at most `cap` on each side


def test_settings_from_env() -> None:
    s = from_env({"TABLETUNE_ADMIN_PORT": "8500", "TABLETUNE_EMULATE_ACCEPTANCE": "0.7,0.5,0.3",
                  "TABLETUNE_HYSTERESIS": "2"})
    assert s.admin_port == 8500 and s.admin_host == "127.0.0.1" and s.hysteresis == 2
    assert s.emulate_acceptance == (0.7, 0.5, 0.3) and s.emulation_enabled
    assert from_env({}).admin_port is None and not from_env({}).emulation_enabled
    with pytest.raises(ValueError, match="TABLETUNE_EXPLORE_EVERY"):
        from_env({"TABLETUNE_EXPLORE_EVERY": "often"})
    assert (from_env({}).explore_every, from_env({}).explore_run) == (0, 3)
    s = from_env({"TABLETUNE_EXPLORE_EVERY": "50", "TABLETUNE_EXPLORE_RUN": "5"})
    assert (s.explore_every, s.explore_run) == (50, 5)
    with pytest.raises(ValueError, match="explore_run=3 must be < explore_every=2"):
        from_env({"TABLETUNE_EXPLORE_EVERY": "2"})
    with pytest.raises(ValueError, match="TABLETUNE_EXPLORE_RUN=0 must be in 1..64"):
        from_env({"TABLETUNE_EXPLORE_RUN": "0"})
    with pytest.raises(ValueError, match="cannot grow"):
        from_env({"TABLETUNE_EMULATE_ACCEPTANCE": "0.5,0.7"})


def test_token_file(tmp_path) -> None:
    (tmp_path / "t").write_text("abc\n")
    assert from_env({"TABLETUNE_ADMIN_TOKEN_FILE": str(tmp_path / "t")}).admin_token == "abc"


def step(k: int, spec: dict[str, list[int]], generated: dict[str, int]) -> SimpleNamespace:
    return SimpleNamespace(num_scheduled_tokens={r: 1 for r in generated},
                           num_spec_tokens_to_schedule=k, scheduled_spec_decode_tokens=spec)


def test_count_step_uses_the_k_offered_the_step_before() -> None:
    c = Counters(num_positions=3)
    # step 1: prefill of a and b (tokens out, no drafts yet), K=3 offered for the next step
    offered = count_step(c, step(3, {}, {"a": 1, "b": 1}), {"a": 1, "b": 1}, {}, 0.01)
    # step 2: a drafted 3 and kept 2; b's ngram found nothing (empty draft); K=1 next
    gen = {"a": 3, "b": 1}
    offered = count_step(c, step(1, {"a": [7, 8, 9]}, gen), gen, offered, 0.02)
    assert c.drafted_per_pos == [2, 2, 2]      # the empty draft still had 3 chances
    assert c.accepted_per_pos == [1, 1, 0]
    assert c.histogram == {(3, 2): 1, (0, 0): 1}
    assert c.request_steps_per_k == {3: 2}
    assert offered == {"a": 1, "b": 1}
    assert c.engine_steps_per_k == {3: 1, 1: 1}
    assert (c.scheduled_requests, c.scheduled_tokens) == (4, 4)  # 2 requests x 1 token, twice


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 6)), max_size=60))
def test_derived_series_equal_counting_per_position(steps: list[tuple[int, int, int]]) -> None:
    """The counters keep one key per request-step and derive the series on read: the result must
    equal counting position by position, as the plugin did before (positions capped at K=3)."""
    c = Counters(num_positions=3)
    drafted, accepted, per_k = [0, 0, 0], [0, 0, 0], {}
    for k, d, a in steps:
        c.record_request_step(k, d, a)
        per_k[k] = per_k.get(k, 0) + 1
        if k:
            for i in range(min(k, 3)):
                drafted[i] += 1
            for i in range(min(a, 3)):
                accepted[i] += 1
    assert c.drafted_per_pos == drafted
    assert c.accepted_per_pos == accepted
    assert c.request_steps_per_k == per_k
    assert sum(c.histogram.values()) == sum(1 for k, _, _ in steps if k)


def test_step_buckets() -> None:
    assert [step_bucket(b) for b in (1, 16, 17, 24, 25)] == [1, 16, 24, 24, 32]


def test_bandit_tries_every_arm_then_exploits_per_batch_size() -> None:
    from vllm_patch.bandit import Bandit

    b = Bandit(arms=(0, 1, 2), epsilon=0.0)
    for expected in (0, 1, 2):  # untried arms first
        assert b.k_for(4) == expected
        b.reward(b.pending, {0: 10.0, 1: 30.0, 2: 20.0}[expected])
    assert b.k_for(4) == 1
    assert b.k_for(40) == 0  # another bucket learns on its own


def test_steps_are_steady_only_when_the_verified_k_is_the_drafted_k() -> None:
    c = Counters(num_positions=3)
    for b, k in [(2, 3), (2, 3), (2, 3), (9, 1), (9, 1), (9, 3)]:
        c.record_step(b, k, 0.5, tokens=b * 2, emitted=b + 1, cycle=0.6)
    # seq, B, k verified (the previous step's k; nothing before the first), k drafted, s,
    # tokens, emitted, cycle
    assert list(c.recent_steps) == [(1, 2, 0, 3, 0.5, 4, 3, 0.6), (2, 2, 3, 3, 0.5, 4, 3, 0.6),
                                    (3, 2, 3, 3, 0.5, 4, 3, 0.6), (4, 9, 3, 1, 0.5, 18, 10, 0.6),
                                    (5, 9, 1, 1, 0.5, 18, 10, 0.6), (6, 9, 1, 3, 0.5, 18, 10, 0.6)]
    assert c.transition_steps == 3
    assert c.steps_timed == {(2, 3): 2, (9, 1): 1}
    assert c.step_seconds == {(2, 3): 1.0, (9, 1): 0.5}
    assert c.engine_steps_per_k == {3: 4, 1: 2}
    assert c.steps_after(4) == [(5, 9, 1, 1, 0.5, 18, 10, 0.6), (6, 9, 1, 3, 0.5, 18, 10, 0.6)]
    assert c.steps_after(6) == [] and c.steps_after(0) == list(c.recent_steps)


def test_untimed_steps_keep_their_seq_and_the_ring_is_bounded() -> None:
    c = Counters(num_positions=3)
    c.record_step(1, 2, None)
    c.record_step(1, 2, 0.1)
    assert list(c.recent_steps) == [(2, 1, 2, 2, 0.1, 0, 0, 0.0)] and c.steps_timed == {(1, 2): 1}
    for _ in range(RECENT_STEPS + 10):
        c.record_step(1, 2, 0.1)
    assert len(c.recent_steps) == RECENT_STEPS
    assert c.recent_steps[-1][0] == c.num_steps == RECENT_STEPS + 12
    assert c.recent_steps[0][0] == c.num_steps - RECENT_STEPS + 1


def test_request_steps_right_after_a_k0_stretch_are_counted_apart() -> None:
    from types import SimpleNamespace

    from vllm_patch.hooks import count_step
    from vllm_patch.engine_state import RESUME_AFTER, Counters

    c = Counters(num_positions=3)
    offered: dict[str, int] = {}

    def step(k: int, accepted: int) -> None:
        nonlocal offered
        so = SimpleNamespace(num_scheduled_tokens={"r": 4}, num_spec_tokens_to_schedule=k,
                             scheduled_spec_decode_tokens={"r": [1] * offered.get("r", 0)})
        offered = count_step(c, so, {"r": accepted + 1}, offered, 0.01)

    step(3, 0)
    for _ in range(RESUME_AFTER):
        step(0, 0)          # a K=0 stretch
    step(3, 0)              # drafting resumes: drafts proposed at the end of this step...
    step(3, 1)              # ... are verified here: the resume request-step (1 accepted)
    step(3, 3)              # steady again
    from vllm_patch.engine_state import accepted_per_pos, drafted_per_pos
    assert drafted_per_pos(c.resume_request_steps, 3) == [1, 1, 1]
    assert accepted_per_pos(c.resume_request_steps, 3) == [1, 0, 0]
    assert c.drafted_per_pos == [3, 3, 3]  # every request-step offered 3 drafts, resume included
