"""Who decides at a served bucket (sidecar/arbiter.py): pure, on synthetic model draws."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from sidecar.arbiter import DROP_MARGIN, URGENT_PAIRS, Call, arbitrate, rotation_ks, surviving
from sidecar.measured import EARLY_PAIRS, MeasuredGoodput
from tuner.core.admin_api import Duel


def draws(ratio: dict[int, float], max_b: int = 16, reps: int = 200, sd: float = 0.01) -> np.ndarray:
    """G replicates [R, B, K+1] where G(k)/G(0) = ratio[k] at every B, with draw noise sd."""
    rng = np.random.default_rng(0)
    base = np.array([ratio[k] for k in sorted(ratio)])
    return base[None, None, :] * np.exp(rng.normal(0, sd, (reps, max_b, len(ratio))))


def measured_with(bucket: int, k: int, ref: int, log_ratio: float, n: int = 30,
                  sd: float = 0.01) -> MeasuredGoodput:
    m = MeasuredGoodput()
    rng = np.random.default_rng(1)
    m.pairs[(bucket, k, ref)] = __import__("collections").deque(
        (float(v), 15, i) for i, v in enumerate(rng.normal(log_ratio, sd, n)))
    return m


def decide(G: np.ndarray, m: MeasuredGoodput, served: dict[int, int], old: list[int], **kw: float) -> object:
    opts = dict(tie=0.005, confidence=0.9, model_error=0.05, min_served=32, max_pairs=40,
                duel_width=2) | kw
    return arbitrate(np.array(old), G, m, served, None, **opts)  # type: ignore[arg-type]


def test_the_model_alone_switches_only_beyond_its_own_error() -> None:
    old = [3] * 16
    # k=2 20% better by the model: beyond a 5% model error with confidence -> switch, by model
    v = decide(draws({0: 1.0, 1: 1.1, 2: 1.2, 3: 1.0}), MeasuredGoodput(), {16: 100}, old)
    assert list(v.ks[8:]) == [2] * 8 and list(v.ks[:8]) == [3] * 8  # the band B 9..16
    (s,) = v.switches()
    assert s.decided_by == "model" and s.measured is None and s.batch_size_start == 9
    # 3% better by the model: inside its error -> no switch; a duel is asked for instead
    v = decide(draws({0: 0.5, 1: 0.97, 2: 1.03, 3: 1.0}), MeasuredGoodput(), {16: 100}, old)
    assert list(v.ks) == old and v.duels == ((9, 16, (2, 1)),)  # the two most promising
    # exploration pays for itself: k=0 at half of k=3 cannot win even at its best, so no duel
    # runs on it; the near-ties stay open
    assert {c.k: c.status for c in v.calls} == {0: "keep", 1: "open", 2: "open"}
    assert next(c for c in v.calls if c.k == 0).decided_by == "model"


def test_the_model_switches_only_where_its_live_error_is_known_and_beaten() -> None:
    """Issue 34.3: the model pushes only where its gain exceeds its own error measured live at
    that bucket; a bucket with no such measurement waits for pairs."""
    old = [3] * 16
    G = draws({0: 1.0, 1: 1.1, 2: 1.2, 3: 1.0})  # the model: k=2 20% better at every B
    # no live error at the bucket: no switch by the model, a duel instead
    v = decide(G, MeasuredGoodput(), {16: 100}, old, live_error={})
    assert list(v.ks) == old and v.switches() == [] and v.duels == ((9, 16, (2, 1)),)
    # a live error of 2%: the model's 20% beats it -> switch
    v = decide(G, MeasuredGoodput(), {16: 100}, old, live_error={16: 0.02})
    assert list(v.ks[8:]) == [2] * 8 and v.switches()[0].decided_by == "model"
    # a live error of 15% (the model is that far off here): 20% is not beyond it at 90%
    v = decide(G, MeasuredGoodput(), {16: 100}, old, live_error={16: 0.15})
    assert list(v.ks) == old and v.switches() == []
    # a conclusive measurement still decides where the model may not
    v = decide(G, measured_with(16, 2, 3, math.log(1.05)), {16: 100}, old, live_error={})
    assert list(v.ks[8:]) == [2] * 8 and v.switches()[0].decided_by == "measured"


def test_where_duels_can_run_the_model_orders_them_but_never_switches() -> None:
    """Issue 36.2: with duels possible, even a model gain far beyond its live error is only a
    duel's order; the measurement switches once it is conclusive."""
    old = [3] * 16
    G = draws({0: 1.0, 1: 1.1, 2: 1.2, 3: 1.0})  # the model: k=2 20% better, k=1 10%
    v = decide(G, MeasuredGoodput(), {16: 100}, old, live_error={16: 0.02}, can_duel=True)
    assert list(v.ks) == old and v.switches() == []
    assert v.duels == ((9, 16, (2, 1)),)  # the model's favourite first
    assert {c.k: c.status for c in v.calls}[2] == "open"
    v = decide(G, measured_with(16, 2, 3, math.log(1.05)), {16: 100}, old, live_error={16: 0.02},
               can_duel=True)
    assert list(v.ks[8:]) == [2] * 8 and v.switches()[0].decided_by == "measured"
    # a measured loss is kept even where the model favours the challenger
    v = decide(G, measured_with(16, 2, 3, math.log(0.95)), {16: 100}, old, can_duel=True)
    assert list(v.ks) == old and {c.k: c.status for c in v.calls}[2] == "keep"


def test_a_tighter_measurement_overrides_the_model_either_way() -> None:
    old = [3] * 16
    G = draws({0: 0.5, 1: 0.9, 2: 0.974, 3: 1.0})  # the model: k=3 2.6% above k=2
    m = measured_with(16, 2, 3, math.log(1.04))        # measured: k=2 4% above k=3
    v = decide(G, m, {16: 100}, old)
    assert v.ks[11] == 2
    (s,) = v.switches()
    assert s.decided_by == "measured" and s.measured is not None and s.measured.low > 1.005
    assert s.model.ratio < 1.0
    # the other way: the model says k=2 is 20% better, the measurement says 2% worse
    G = draws({0: 0.5, 1: 0.9, 2: 1.2, 3: 1.0})
    v = decide(G, measured_with(16, 2, 3, math.log(0.98)), {16: 100}, old)
    assert list(v.ks) == old
    call = next(c for c in v.calls if c.k == 2)
    assert call.decided_by == "measured" and call.status == "keep"


def test_a_k_that_cannot_win_wherever_it_was_judged_leaves_the_rotation() -> None:
    """Issue #34 item 4: no rotation step on a challenger whose best case loses."""
    old = [3] * 16
    # k=0 at half of k=3 and k=1 at 80%: their best cases lose at the served bucket; k=2 open
    v = decide(draws({0: 0.5, 1: 0.8, 2: 1.0, 3: 1.0}), MeasuredGoodput(), {16: 100}, old)
    assert {c.k: c.status for c in v.calls} == {0: "keep", 1: "keep", 2: "open"}
    assert v.rotation == (2, 3)
    # a measured loss leaves it too; nothing served yet: every k
    m = measured_with(16, 2, 3, -0.2)
    assert decide(draws({0: 0.5, 1: 0.8, 2: 1.0, 3: 1.0}), m, {16: 100}, old).rotation == (3,)
    # () is the plugin's every runnable k: sent when nothing is left out
    assert decide(draws({0: 0.5, 1: 0.8, 2: 1.0, 3: 1.0}), MeasuredGoodput(), {}, old).rotation == ()


def test_the_rotation_keeps_a_k_open_somewhere_the_tables_ks_and_the_largest() -> None:
    def call(bucket: int, k: int, status: str) -> Call:
        return Call.model_construct(bucket=bucket, k=k, status=status)

    keep0 = [call(8, 0, "keep"), call(16, 0, "open")]     # open at one bucket: it stays
    assert rotation_ks(keep0, [0, 1, 2, 3], {3}) == ()
    # the largest k drafts every position: it stays unless the table serves it
    everywhere = [call(8, k, "keep") for k in (0, 2, 3)]
    assert rotation_ks(everywhere, [0, 1, 2, 3], {1}) == (1, 3)
    assert rotation_ks(everywhere + [call(16, 1, "keep")], [0, 1, 2, 3], {3}) == (3,)
    # a k the table serves stays even where it lost as a challenger (its cycles run the table)
    assert rotation_ks([call(8, 1, "keep")], [0, 1, 2, 3], {1, 3}) == ()
    # a restricted set (--allowed-k, --min-k) is sent as it is: the rotation stays inside it
    assert rotation_ks([call(8, 1, "keep")], [1, 3], {1, 3}, restricted=True) == (1, 3)


def test_unserved_buckets_and_thin_service_decide_nothing() -> None:
    old = [1] * 4 + [3] * 12
    G = draws({0: 0.5, 1: 0.9, 2: 1.3, 3: 1.0})       # the model: k=2 far better everywhere
    v = decide(G, MeasuredGoodput(), {16: 100, 2: 10}, old)   # B=2 served only 10 steps
    assert list(v.ks[:4]) == [1] * 4 and list(v.ks[8:]) == [2] * 8 and v.ks[7] == 3
    assert {c.bucket for c in v.calls} == {16}


def test_an_unresolved_tie_ends_its_duel_after_max_pairs() -> None:
    old = [3] * 16
    G = draws({0: 0.5, 1: 0.8, 2: 1.0, 3: 1.0})
    m = measured_with(16, 2, 3, 0.0, n=40, sd=0.02)
    v = decide(G, m, {16: 100}, old)
    assert list(v.ks) == old and all(2 not in ks for _, _, ks in v.duels)  # its duel ended
    assert next(c for c in v.calls if c.k == 2).status in ("tie", "keep")


def test_a_futile_incumbent_goes_without_waiting_for_a_duel() -> None:
    """Acceptance ~0 (the demo after its switch): k=3's drafts buy nothing and k=0 is no slower
    (tuner/core/incumbent.py); the model's own ratio is inside its error, yet k=0 replaces k=3."""
    old = [3] * 16
    G = draws({0: 1.01, 1: 1.0, 2: 1.0, 3: 1.0})
    v = decide(G, MeasuredGoodput(), {16: 100}, old)
    assert list(v.ks) == old
    v = arbitrate(np.array(old), G, MeasuredGoodput(), {16: 100}, None, tie=0.005, confidence=0.9,
                  model_error=0.05, min_served=32, max_pairs=40, duel_width=1,
                  futile=lambda start, end, k, c: c == 0)
    assert v.ks[11] == 0 and [c.k for c in v.switches()] == [0]


def test_the_challenger_already_dueled_keeps_its_turn() -> None:
    old = [3] * 16
    G = draws({0: 0.5, 1: 1.04, 2: 1.03, 3: 1.0})   # k=1 a little more promising by the model
    m = MeasuredGoodput()
    assert decide(G, m, {16: 100}, old, duel_width=1).duels == ((9, 16, (1,)),)
    v = arbitrate(np.array(old), G, m, {16: 100}, None, tie=0.005, confidence=0.9,
                  model_error=0.05, min_served=32, max_pairs=40, duel_width=1,
                  previous=((9, 16, (2,)),))
    assert v.duels == ((9, 16, (2,)),)


def test_a_conclusive_measurement_decides_even_when_wider_than_the_model() -> None:
    old = [2] * 16
    G = draws({0: 0.5, 1: 0.8, 2: 1.0, 3: 1.0}, sd=0.001)  # the model: a tie, and sure of it
    v = decide(G, measured_with(16, 3, 2, math.log(1.22), n=30, sd=0.15), {16: 100}, old)
    (s,) = v.switches()
    assert s.k == 3 and s.decided_by == "measured" and s.measured is not None
    assert s.measured.low > 1.005 and (s.measured.high - s.measured.low) > (s.model.high - s.model.low)


def test_a_duel_the_model_is_sure_of_is_urgent_while_its_pairs_bear_it_out() -> None:
    """Issue 34.6: where the model finds a challenger better beyond its error, the duel is
    urgent (a larger share, so a wrong table is measured in a minute), and stays so past the
    24 pairs of an interval while their mean favours the challenger (else it would wait behind
    every other urgent duel); where the pairs disagree, or the model is not sure, the usual
    share."""
    old = [3] * 16
    sure = draws({0: 1.0, 1: 1.1, 2: 1.2, 3: 1.0})      # k=2 20% better by the model
    v = decide(sure, MeasuredGoodput(), {16: 100}, old, live_error={16: 0.02}, can_duel=True)
    assert v.duels == ((9, 16, (2, 1)),) and v.urgent
    unsure = draws({0: 0.5, 1: 0.97, 2: 1.03, 3: 1.0})  # 3%: inside the model's 5% error
    v = decide(unsure, MeasuredGoodput(), {16: 100}, old, can_duel=True)
    assert v.duels and not v.urgent
    alone = draws({0: 0.5, 1: 0.6, 2: 1.2, 3: 1.0})   # only k=2 can win: it alone is dueled
    v = decide(alone, MeasuredGoodput(), {16: 100}, old, live_error={16: 0.02}, can_duel=True)
    assert v.duels == ((9, 16, (2,)),) and v.urgent
    paired = measured_with(16, 2, 3, math.log(1.05), sd=0.2)  # 30 pairs, not yet conclusive
    v = decide(alone, paired, {16: 100}, old, live_error={16: 0.02}, can_duel=True)
    assert v.duels == ((9, 16, (2,)),) and v.urgent
    against = measured_with(16, 2, 3, math.log(0.95), sd=0.2)  # 30 pairs leaning the other way
    v = decide(alone, against, {16: 100}, old, live_error={16: 0.02}, can_duel=True)
    assert v.duels == ((9, 16, (2,)),) and not v.urgent
    assert not decide(sure, MeasuredGoodput(), {}, old, can_duel=True).urgent  # nothing served


def test_a_wide_live_error_does_not_hold_back_the_urgent_share() -> None:
    """The H100's plateau of bursts of 256 (B 249-256 at k=0): the model put k=2 at 1.5x, its
    live error ~0.47 widened that to [0.53, 4.4], and the duel ran at the usual share, pairing
    once in 20 minutes. The share follows the model at its assumed error; the live error still
    keeps it from switching on its own, and the pairs still decide."""
    old = [0] * 16
    G = draws({0: 1.0, 1: 1.4, 2: 1.5, 3: 0.85})
    v = decide(G, MeasuredGoodput(), {16: 100}, old, live_error={16: 0.47}, can_duel=True)
    assert v.urgent and v.duels == ((9, 16, (2, 1)),) and v.switches() == []
    assert all(c.model.low < 1.0 for c in v.calls)  # at the live error the model is not sure
    # not where the model's own ratio sits inside its assumed error
    near = draws({0: 1.0, 1: 0.9, 2: 1.03, 3: 0.85})
    assert not decide(near, MeasuredGoodput(), {16: 100}, old, live_error={16: 0.47},
                      can_duel=True).urgent


def test_an_urgent_duel_whose_first_pairs_disagree_with_the_model_drops_to_the_usual_share() -> None:
    """A stale profile flattering k=2 (the CPU run: k=0 looked 50% better, its pairs read 30%
    worse): the urgent share holds for the first URGENT_PAIRS pairs, then only while their
    mean favours the challenger; the duel itself goes on at the usual share until it settles."""
    old = [3] * 16
    flattered = draws({0: 0.5, 1: 0.6, 2: 1.5, 3: 1.0})
    # each too noisy or too close for an early verdict (eq. EARLY)
    for n, log_ratio, sd, urgent in ((URGENT_PAIRS - 1, -0.35, 0.5, True),
                                     (URGENT_PAIRS, -0.35, 0.5, False), (20, -0.35, 0.5, False),
                                     (20, 0.2, 0.5, True), (10, -0.03, 0.05, False)):
        m = measured_with(16, 2, 3, log_ratio, n=n, sd=sd)
        v = decide(flattered, m, {16: 100}, old, live_error={16: 0.02}, can_duel=True)
        assert v.duels == ((9, 16, (2,)),) and v.urgent is urgent, (n, log_ratio)
    # pairs that agree on a loss end the duel early (eq. EARLY): k=2 is kept out, by measurement
    m = measured_with(16, 2, 3, -0.35, n=URGENT_PAIRS + 2, sd=0.05)
    v = decide(flattered, m, {16: 100}, old, live_error={16: 0.02}, can_duel=True)
    (call,) = [c for c in v.calls if c.k == 2]
    assert v.duels == () and (call.status, call.decided_by) == ("keep", "measured")
    # the pairs read either way round (k=3 over k=2 here): the same verdict
    m = MeasuredGoodput()
    m.pairs[(16, 3, 2)] = __import__("collections").deque((0.35, 15, i) for i in range(6))
    assert not decide(flattered, m, {16: 100}, old, live_error={16: 0.02}, can_duel=True).urgent


def test_while_a_duel_is_urgent_every_planned_duel_runs() -> None:
    """The plugin's share holds for every duel it runs: beside a duel the model is sure of, a
    near-tie elsewhere runs too (held back, it would wait as long as the urgent bucket stays
    urgent, for ever where traffic only passes through it); without one, the usual share."""
    old = [3] * 16
    G = draws({0: 0.5, 1: 0.6, 2: 1.2, 3: 1.0}, max_b=16)
    near = draws({0: 0.5, 1: 0.6, 2: 1.01, 3: 1.0}, max_b=16)
    both = np.concatenate([near[:, :8], G[:, 8:]], axis=1)  # B 1..8 a near-tie, 9..16 sure
    v = decide(both, MeasuredGoodput(), {8: 100, 16: 100}, old, live_error={8: 0.02, 16: 0.02},
               can_duel=True)
    assert v.urgent and v.duels == ((5, 8, (2,)), (9, 16, (2,)))
    calm = decide(near, MeasuredGoodput(), {8: 100, 16: 100}, old, can_duel=True)
    assert not calm.urgent and calm.duels == ((5, 8, (2,)), (9, 16, (2,)))


def test_an_early_win_switches_only_where_the_model_wins_too() -> None:
    """Under bursts a bucket gets a handful of pairs (the H100's 3B run: 5 pairs of k=3 at
    2.3-2.8x of k=0): from EARLY_PAIRS on they decide a large gain, but only with the model's
    interval on the same side; the same pairs against a model that sees no gain leave it open."""
    old = [0] * 16
    m = measured_with(16, 3, 0, math.log(2.4), n=EARLY_PAIRS + 1, sd=0.07)
    sure = draws({0: 1.0, 1: 1.5, 2: 1.9, 3: 2.2})
    v = decide(sure, m, {16: 100}, old, live_error={16: 0.02}, can_duel=True)
    (s,) = v.switches()
    assert (s.k, s.decided_by, s.measured.pairs) == (3, "measured", EARLY_PAIRS + 1)
    assert list(v.ks[8:]) == [3] * 8
    # the model's live error is one of level (a loaded box's steps 3x the profile's): the
    # direction check is at its assumed error, so the early pairs still decide
    v = decide(sure, m, {16: 100}, old, live_error={16: 1.1}, can_duel=True)
    assert [c.k for c in v.switches()] == [3]
    unsure = draws({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0})
    v = decide(unsure, m, {16: 100}, old, live_error={16: 0.02}, can_duel=True)
    assert not v.switches() and list(v.ks) == old
    assert any(c.k == 3 and c.status == "open" for c in v.calls)
    # too few pairs for even an early look: nothing measured yet
    few = measured_with(16, 3, 0, math.log(2.4), n=EARLY_PAIRS - 1, sd=0.07)
    v = decide(sure, few, {16: 100}, old, live_error={16: 0.02}, can_duel=True)
    assert not v.switches() and all(c.measured is None for c in v.calls)


def test_where_a_burst_only_passes_through_the_model_decides_beyond_its_live_error() -> None:
    """A bucket the load drains through gives a duel no pairs (sidecar/measured.py,
    pairable): no duel is asked for there, and the model switches it where it wins beyond
    its error measured live there, once pairs elsewhere have checked its ratios (a bucket's
    live error checks the incumbent's k only: the CPU's stale profile, flattering k=0, passed
    it at B 3-4); where that error is not known, nothing moves. A pairable bucket keeps the
    rule: duels, not the model."""
    old = [0] * 16
    sure = draws({0: 1.0, 1: 1.5, 2: 1.9, 3: 2.2})
    v = decide(sure, MeasuredGoodput(), {16: 100}, old, live_error={16: 0.1}, can_duel=True,
               pairable=frozenset())
    assert not v.switches() and v.duels == () and v.ratio_error is None   # unchecked: kept
    checked = measured_with(8, 3, 0, math.log(2.2), n=EARLY_PAIRS + 1, sd=0.05)
    v = decide(sure, checked, {16: 100}, old, live_error={16: 0.1}, can_duel=True,
               pairable=frozenset())
    (s,) = v.switches()
    assert (s.k, s.decided_by) == (3, "model") and v.duels == ()
    assert list(v.ks[8:]) == [3] * 8
    v = decide(sure, MeasuredGoodput(), {16: 100}, old, live_error={16: 0.1})   # no duels run
    assert [(c.k, c.decided_by) for c in v.switches()] == [(3, "model")]
    v = decide(sure, MeasuredGoodput(), {16: 100}, old, live_error={16: 1.0}, can_duel=True,
               pairable=frozenset())
    assert not v.switches() and v.duels == ()        # a gain inside its live error: kept
    v = decide(sure, MeasuredGoodput(), {16: 100}, old, live_error={}, can_duel=True,
               pairable=frozenset())
    assert not v.switches() and v.duels == ()        # its error unknown: kept
    v = decide(sure, MeasuredGoodput(), {16: 100}, old, live_error={16: 0.1}, can_duel=True,
               pairable=frozenset({16}))
    assert not v.switches() and v.duels == ((9, 16, (3, 2)),)


def test_a_push_ends_the_duels_only_where_it_changed_the_table() -> None:
    """The H100's transit pushes, one bucket at a time, each ended the plateau's duel at B
    249-256 until the next rebuild; a duel where the push left the k has the same verdict to
    reach."""
    duels = ((9, 16, (2,)), (249, 256, (1,)), (57, 64, (3, 2)))
    assert surviving(duels, {64, 128}) == ((9, 16, (2,)), (249, 256, (1,)))
    assert surviving(duels, set()) == duels
    assert surviving(duels, None) == ()   # the first push: everything is new


def test_where_pairs_checked_its_ratios_that_error_bounds_the_model_not_its_level() -> None:
    """The H100's 3B under bursts: live steps ran 1.1-2.9x the profile's at every k, so the
    model's level was off 0.4-1.4 in log at the buckets a burst drains through and it switched
    none, while pairs at the plateau put its ratio 0.1-0.2 off. The ratio it decides by is
    bounded by the pairs' check (an upper bound: one check alone leaves it wide); pairs that
    contradict it keep it out."""
    old = [0] * 16
    sure = draws({0: 1.0, 1: 1.5, 2: 1.9, 3: 2.2})
    level = {16: 1.0}   # the drain's bucket B 9-16: the model's level far off
    kw = dict(live_error=level, can_duel=True, pairable=frozenset({8}))
    v = decide(sure, MeasuredGoodput(), {8: 100, 16: 100}, old, **kw)
    assert list(v.ks[8:]) == [0] * 8 and v.ratio_error is None     # the level error holds
    # the plateau B 5-8: k=3 over k=0 paired at 2.4x (the model: 2.2x); one check alone
    # bounds the model's error at ~8x its distance: not enough to switch on 2.2x
    agree = measured_with(8, 3, 0, math.log(2.4), n=EARLY_PAIRS + 1, sd=0.05)
    v = decide(sure, agree, {8: 100, 16: 100}, old, **kw)
    assert list(v.ks[8:]) == [0] * 8 and 0.4 < (v.ratio_error or 0) < 0.9
    # a second check at the same bucket shares its incumbent's error: still one check
    agree.pairs[(8, 2, 0)] = measured_with(8, 2, 0, math.log(1.9), n=EARLY_PAIRS + 1,
                                           sd=0.05).pairs[(8, 2, 0)]
    v = decide(sure, agree, {8: 100, 16: 100}, old, **kw)
    assert list(v.ks[8:]) == [0] * 8 and (v.ratio_error or 0) > 0.3
    # and k=2 over k=0 at 1.9x at B 3-4, as the model says: two buckets bound it at ~3x
    agree.pairs[(4, 2, 0)] = measured_with(4, 2, 0, math.log(1.9), n=EARLY_PAIRS + 1,
                                           sd=0.05).pairs[(4, 2, 0)]
    v = decide(sure, agree, {8: 100, 16: 100}, old, **kw)
    assert list(v.ks[8:]) == [3] * 8 and 0.1 < (v.ratio_error or 0) < 0.3
    assert next(c for c in v.switches() if c.bucket == 16).decided_by == "model"
    # pairs that say k=3 is no better than k=0 there: the model's 2.2x is not trusted anywhere
    against = measured_with(8, 3, 0, 0.0, n=EARLY_PAIRS + 1, sd=0.05)
    v = decide(sure, against, {8: 100, 16: 100}, old, **kw)
    assert list(v.ks[8:]) == [0] * 8 and (v.ratio_error or 0) > 0.7
    # too few pairs to check it: the level error still holds
    few = measured_with(8, 3, 0, math.log(2.4), n=EARLY_PAIRS - 1, sd=0.05)
    v = decide(sure, few, {8: 100, 16: 100}, old, **kw)
    assert list(v.ks[8:]) == [0] * 8 and v.ratio_error is None


def test_a_running_duel_ends_on_the_model_only_beyond_a_margin() -> None:
    """Near 1 the model's best case moves across it from rebuild to rebuild: a duel that runs
    ends on the model only when it loses by DROP_MARGIN; one that does not run starts only when
    the best case reaches 1 (hysteresis, not a flip every few seconds)."""
    old = [3] * 16
    running = ((9, 16, (2,)),)

    def status(ratio: float, previous: tuple[Duel, ...]) -> str:
        v = arbitrate(np.array(old), draws({0: 0.5, 1: 0.7, 2: ratio, 3: 1.0}), MeasuredGoodput(),
                      {16: 100}, None, tie=0.005, confidence=0.9, model_error=0.05,
                      min_served=32, max_pairs=40, duel_width=1, previous=previous)
        call = next(c for c in v.calls if c.k == 2)
        assert (v.duels == ((9, 16, (2,)),)) == (call.status == "open")
        return call.status

    # the best case's high end at ratio r: r * exp(z * hypot(0.01, 0.05)), z at 0.1 / 3
    high = math.exp(NormalDist().inv_cdf(1 - 0.1 / 3 / 2) * math.hypot(0.01, 0.05))
    just_below = 0.995 / high          # the best case at ~0.995: inside the margin
    assert status(just_below, ()) == "keep"         # not started: it cannot win
    assert status(just_below, running) == "open"    # running: it goes on
    far_below = (1 - DROP_MARGIN - 0.01) / high     # beyond the margin: it ends either way
    assert status(far_below, running) == "keep" and status(far_below, ()) == "keep"


def test_a_rotating_k_leaves_the_rotation_only_beyond_the_margin() -> None:
    """The rotation's own hysteresis: k=0, which no duel runs, leaves it when its best case
    loses, but a k that rotates now stays while that best case is within DROP_MARGIN of 1."""
    old = [3] * 16
    high = math.exp(NormalDist().inv_cdf(1 - 0.1 / 3 / 2) * math.hypot(0.01, 0.05))

    def rotation(k0: float, rotating: tuple[int, ...]) -> tuple[int, ...]:
        # k=2 open (near a tie) and dueled; k=1 far behind; k=0 as given
        return arbitrate(np.array(old), draws({0: k0, 1: 0.5, 2: 1.0, 3: 1.0}), MeasuredGoodput(),
                         {16: 100}, None, tie=0.005, confidence=0.9, model_error=0.05,
                         min_served=32, max_pairs=40, duel_width=1, rotating=rotating).rotation

    just_below, far_below = 0.995 / high, (1 - DROP_MARGIN - 0.01) / high
    assert rotation(just_below, (2, 3)) == (2, 3)           # not rotating: it stays out
    assert rotation(just_below, (0, 2, 3)) == (0, 2, 3)     # rotating: it stays in
    assert rotation(just_below, ()) == (0, 2, 3)            # () is every k: k=1 goes, k=0 stays
    assert rotation(far_below, ()) == (2, 3)                # beyond the margin it goes


def test_a_running_duel_beside_an_urgent_one_keeps_its_margin() -> None:
    """A near-tie running beside an urgent duel stays within DROP_MARGIN, as any running duel
    does, so it does not end and restart rebuild by rebuild; one not running ends at the dip."""
    old = [3] * 16
    high = math.exp(NormalDist().inv_cdf(1 - 0.1 / 3 / 2) * math.hypot(0.01, 0.05))
    sure = draws({0: 0.5, 1: 0.6, 2: 1.2, 3: 1.0})
    dipped = draws({0: 0.5, 1: 0.6, 2: 0.995 / high, 3: 1.0})   # best case ~0.995
    G = np.concatenate([dipped[:, :8], sure[:, 8:]], axis=1)     # B 5-8 dipped, 9-16 sure

    def plan(previous: tuple[Duel, ...]) -> tuple[Duel, ...]:
        v = arbitrate(np.array(old), G, MeasuredGoodput(), {8: 100, 16: 100}, None, tie=0.005,
                      confidence=0.9, model_error=0.05, min_served=32, max_pairs=40,
                      duel_width=1, previous=previous, can_duel=True)
        assert v.urgent
        return v.duels

    urgent = (9, 16, (2,))
    assert plan(((5, 8, (2,)), urgent)) == ((5, 8, (2,)), urgent)  # running: it stays
    assert plan((urgent,)) == (urgent,)                            # not running: the dip ends it
