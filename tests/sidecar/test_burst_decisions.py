"""Leaving a wrong table under bursts (issue #34 item 6), against the fake engine: a GPU's
gains (k=3 at ~2x of k=0, steps to ±3%) that the 2-core CPU engine cannot produce, in the
shape of the H100's bursts (benchmarks/results/h100-vllm0.26-3b-eagle3-v2-field-transit/): a
plateau at B = C while no request has finished, a drain that passes each bucket in a few
steps, an idle gap. The fake runs the plugin's own DuelClock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sidecar.measured import UNPAIRED_RUNS
from sidecar.publish import sidecar_state
from sidecar.state import SidecarState
from tests.sidecar.fake_engine import FakeEngine
from tests.sidecar.test_controller import controller_for
from tests.sidecar.test_controller_online import Clock
from tuner.core.table import Table

A = (0.75, 0.55, 0.40)
TAU = (1.0, 1.75, 2.30, 2.70)
SHAPE = (1.0, 1.1, 1.2, 1.3)   # T(B, k) / T(B, 0): k=3 delivers 2.08x of k=0 at every B
BASE_MS = {1: 4.0, 8: 4.2, 16: 4.5, 32: 5.0, 64: 6.0}
QUARTER = [[1, 16, 3], [17, 64, 0]]
PLATEAU = 64


def step_ms(B: int) -> dict[int, float]:
    lo = max(b for b in BASE_MS if b <= B)
    return {k: BASE_MS[lo] * SHAPE[k] for k in range(4)}


def options(**extra: Any) -> dict[str, Any]:
    profile = {"a": A, "max_num_seqs": 64,
               "step_ms": {B: [ms * s for s in SHAPE] for B, ms in BASE_MS.items()}}
    return dict(profile=profile, allowed_k="all", decide_by="measured", rebuild_every_steps=200,
                guard_window=0, change_window=50, duel_run=8, explore_share=0.02,
                explore_every=0, explore_horizon=1000, urgent_share=0.25, min_served=32,
                **extra)


async def bursts(tmp_path: Path, n: int, level: float, drain: dict[int, int],
                 flat: bool = False, plateau: int = 48, states: list[SidecarState] | None = None,
                 **extra: Any) -> tuple[FakeEngine, list[Any]]:
    """``n`` bursts of 64 from the quarter table, each its plateau (``plateau`` steps at B=64), its drain (B
    -> steps there) and an idle second; the fake engine after them and the sidecar's decisions. Each k
    emits B·τ(k) tokens a step times ``level``: the engine below the model by a level the ratio of two k's
    does not see (the sidecar's live error there). ``flat``: every k delivers k=0's goodput, whatever the
    model says (a profile that flatters speculation). ``states``: gets the published state at the end."""
    clock = Clock()
    fake = FakeEngine(table=[list(r) for r in QUARTER], max_num_seqs=64)
    decisions = []
    async with controller_for(fake, tmp_path, clock=clock, **{**options(), **extra}) as (c, fake):
        assert await c.tick() is None
        for _ in range(n):
            for B, steps in ((PLATEAU, plateau), *drain.items(), (0, 0)):
                if steps:
                    ms = step_ms(B)
                    rates = {k: level * B * TAU[0 if flat else k] / (ms[0 if flat else k] / 1000)
                             for k in range(4)}
                    fake.serve(steps, B, rates, ms, a=A)
                if B in (PLATEAU, 16, 0):   # a scrape after the plateau, the drain, the gap
                    clock.now += 1
                    if (d := await c.tick()) is not None:
                        decisions.append(d)
        if states is not None:
            states.append(sidecar_state(c, clock.now))
    return fake, decisions


async def test_the_plateau_leaves_a_wrong_k_by_pairs_then_the_drain_by_the_checked_model(
        tmp_path: Path) -> None:
    """The engine delivers 0.6 of the model's goodput at every k (a live error of ~0.5 in log,
    as at the H100's plateau of 256), so the model is not sure at its live error; at its
    assumed error it is, the plateau's duel runs at the urgent share and the pairs switch it
    within a few bursts (at the usual share: one pair every ~8 bursts, four needed). Those
    pairs check the model's ratio, which the level does not move: the drain follows."""
    drain = {56: 3, 48: 3, 40: 3, 32: 3, 24: 3, 16: 3, 8: 3, 4: 2, 2: 2, 1: 2}
    fake, decisions = await bursts(tmp_path, 16, 0.6, drain)
    assert Table.from_list(fake.table).k_at(PLATEAU, 3) == 3, [
        (d.trigger, d.outcome, d.new_table) for d in decisions]
    push = next(d for d in decisions if d.outcome == "pushed")
    (change,) = [ch for ch in push.changes if ch.batch_size_end == PLATEAU]
    assert change.decided_by == "measured" and change.measured is not None
    assert any(p.get("duel_share") == 0.25 for p in fake.policy_puts)
    # before the pairs the model was not sure at its level error (no push: the plateau's
    # duel ran on its assumed error); the pairs then checked its ratio, which the level does
    # not move, and the drain's buckets that served their steps switched by the model within it
    pushes = [d for d in decisions if d.outcome == "pushed"]
    drain = [ch for d in pushes for ch in d.changes if ch.batch_size_end < PLATEAU]
    assert drain and all(ch.decided_by == "model" for ch in drain), pushes
    assert all(d.model_ratio_error is not None and d.model_ratio_error < 0.1 for d in pushes)
    assert Table.from_list(fake.table).k_at(40, 3) == 3


async def test_pairs_that_contradict_the_model_keep_it_off_the_drain(tmp_path: Path) -> None:
    """Do no harm: the model says k=3 doubles goodput, the engine delivers k=0's at every k.
    The plateau's pairs say so, the model's ratio error they measure is large, and it switches
    none of the drain's buckets (and the pairs none of the plateau)."""
    drain = {56: 3, 48: 3, 40: 3, 32: 3, 24: 3, 16: 3, 8: 3, 4: 2, 2: 2, 1: 2}
    fake, decisions = await bursts(tmp_path, 16, 0.6, drain, flat=True)
    assert fake.table == QUARTER, [(d.outcome, d.new_table) for d in decisions]
    checked = [d.model_ratio_error for d in decisions if d.model_ratio_error is not None]
    assert checked and min(checked) > 0.5


async def test_the_drain_s_buckets_switch_as_each_gathers_its_steps(tmp_path: Path) -> None:
    """The engine close to the model (a live error of ~0.1): the buckets the drain passes
    through in a few steps are not pairable, and the model, beyond its live error, switches
    each once it served 32 steps. A push elsewhere no longer starts their counts again: on the
    H100 such buckets switched one or two a push over 20 minutes (here the slowest, 2 steps a
    burst, would need 16 bursts with no push anywhere)."""
    # few steps a bucket, the first after a change of k a transition (not steady)
    drain = {56: 6, 48: 4, 40: 3, 32: 2, 24: 2, 16: 3, 8: 3, 4: 2, 2: 2, 1: 2}
    fake, decisions = await bursts(tmp_path, 30, 0.9, drain)
    table = Table.from_list(fake.table)
    assert all(table.k_at(B, 3) == 3 for B in range(17, 65)), fake.table
    pushes = [d for d in decisions if d.outcome == "pushed"]
    by = {(ch.batch_size_end, ch.decided_by) for d in pushes for ch in d.changes}
    assert {(32, "model"), (24, "model"), (56, "model")} <= by, by
    assert (PLATEAU, "measured") in by
    assert len(pushes) >= 4   # one bucket after another, as each gathered its steps


async def test_a_slow_drain_s_buckets_whose_runs_never_pair_switch_by_the_checked_model(
        tmp_path: Path) -> None:
    """A plateau of 96 steps, then a drain of 2 steps a B (as the H100's bursts of 64: 16 steps in each 8-wide
    bucket), which holds each bucket a third of a run's window, so duels are asked there, yet a run of 16
    and its references never line up in one bucket. On the H100 such buckets waited for pairs that never
    came, on k=0 where k=3 doubles goodput (`h100-vllm0.26-3b-eagle3-v2-field-ratio`). Once three runs
    there had their chance to pair and none did it is one the load passes through, and the model,
    checked by the plateau's pairs, switches it."""
    drain = {B: 2 for B in range(PLATEAU - 1, 0, -1)}
    fake, decisions = await bursts(tmp_path, 30, 0.9, drain, plateau=96, duel_run=16)
    table = Table.from_list(fake.table)
    pushes = [d for d in decisions if d.outcome == "pushed"]
    by = {(ch.batch_size_end, ch.decided_by) for d in pushes for ch in d.changes}
    assert any(end < PLATEAU and who == "model" for end, who in by), by
    assert sum(table.k_at(B, 3) == 3 for B in range(17, 57)) >= 24, fake.table


async def test_a_slow_drain_s_unpaired_buckets_stay_where_the_pairs_contradict_the_model(
        tmp_path: Path) -> None:
    """Do no harm on the same slow drain: the engine delivers k=0's goodput at every k, the
    plateau's pairs measure a large ratio error, and no bucket moves."""
    drain = {B: 2 for B in range(PLATEAU - 1, 0, -1)}
    states: list[SidecarState] = []
    fake, decisions = await bursts(tmp_path, 30, 0.6, drain, flat=True, plateau=96, duel_run=16,
                                   states=states)
    assert fake.table == QUARTER, [(d.outcome, d.new_table) for d in decisions]
    passed = [e for e in states[0].model_error if not e.pairable and e.batch_size < PLATEAU]
    # status says why: held buckets too briefly for a run and its references to line up,
    # where three runs found no pair, or entered under another k (the others never held)
    assert passed and all(not e.lined_up or e.unpaired_runs >= UNPAIRED_RUNS or not e.startable
                          for e in passed), passed
