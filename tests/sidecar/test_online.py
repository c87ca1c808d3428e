"""The sidecar's online pieces, pure: live step times, change test, guardrail, rebuild choice."""

from __future__ import annotations

import numpy as np

from sidecar.estimator import EstimatorState
from sidecar.guardrail import MIN_STEPS, Guardrail, Sample
from sidecar.estimator import projected
from sidecar.rebuild import Inputs, choose
from sidecar.step_times import LiveStepTimes
from tuner.core.table import Table

# 16 batch sizes, k = 0..3: k=3 pays everywhere at high acceptance unless its step is slower
T_PROF = np.tile(np.array([10.0, 12.0, 16.0, 18.0]), (16, 1))
SIGMA = np.full(T_PROF.shape, 0.03)
A = np.array([0.9, 0.8, 0.7])


def whole(batch: float, goodput: float) -> Sample:
    """One 1-s scrape that fills a guardrail sample by itself (tests/sidecar/test_guardrail.py
    pools shorter ones)."""
    return Sample(batch, goodput, MIN_STEPS, 1.0)


def live(cells: dict[tuple[int, int], tuple[float, float]]) -> LiveStepTimes:
    t = LiveStepTimes()
    t.observe({key: (ms * n / 1000, n) for key, (ms, n) in cells.items()})
    return t


def test_no_live_steps_is_the_profile() -> None:
    blend = LiveStepTimes().blend(T_PROF, SIGMA, w_T=100, step_cv=0.2)
    np.testing.assert_allclose(blend.T, T_PROF)
    np.testing.assert_allclose(blend.sigma, SIGMA)
    assert not blend.steps.any()


def test_live_steps_outweigh_the_profile_as_they_accumulate() -> None:
    few = live({(8, 3): (36.0, 10)}).blend(T_PROF, SIGMA, w_T=100, step_cv=0.2)
    many = live({(8, 3): (36.0, 10_000)}).blend(T_PROF, SIGMA, w_T=100, step_cv=0.2)
    # eq. T̂ with no other k seen: log rho = n log 2 / (100 + n)
    assert abs(few.T[7, 3] - 18.0 * 2 ** (10 / 110)) < 1e-9
    assert abs(many.T[7, 3] / 36.0 - 1) < 0.01
    assert many.sigma[7, 3] < few.sigma[7, 3] < SIGMA[7, 3]
    # outside the buckets that were seen, the profile stands
    assert many.T[0, 3] == 18.0 and many.T[8, 3] == 18.0


def test_between_two_seen_buckets_the_correction_is_interpolated() -> None:
    blend = live({(4, 2): (32.0, 10_000), (12, 2): (32.0, 10_000)}).blend(
        T_PROF, SIGMA, w_T=100, step_cv=0.2)
    assert np.all(np.abs(blend.T[3:12, 2] / 32.0 - 1) < 0.02)  # B = 4..12 all ~2x
    assert blend.T[0, 2] == 16.0  # below the first seen bucket: the profile


def test_a_k_no_live_step_measured_follows_the_level_the_others_measured() -> None:
    # the H200's 3B serving steps at B=16: k = 0..2 at 0.50-0.57 of the profile, k=3 unseen
    seen = live({(16, 0): (5.0, 2000), (16, 1): (6.5, 2000), (16, 2): (8.5, 2000)})
    blend = seen.blend(T_PROF, SIGMA, w_T=100, step_cv=0.2)
    level = np.exp(np.mean(np.log([0.5, 6.5 / 12, 8.5 / 16])))
    assert abs(blend.T[15, 3] / (18.0 * level) - 1) < 0.03     # k=3 moves with them
    assert abs(blend.T[15, 1] / 6.5 - 1) < 0.01                # a seen k: its own steps
    # its own steps outweigh the level as they come: 2000 steps at the profile's 18 ms
    own = live({(16, 0): (5.0, 2000), (16, 3): (18.0, 2000)}).blend(T_PROF, SIGMA, 100, 0.2)
    assert abs(own.T[15, 3] / 18.0 - 1) < 0.05


def test_live_step_times_stay_non_decreasing_in_k() -> None:
    # live k=3 faster than the profile's k=2: T̂ keeps k=2 <= k=3 (pooled)
    blend = live({(4, 3): (12.0, 10_000)}).blend(T_PROF, SIGMA, w_T=100, step_cv=0.2)
    assert np.all(np.diff(blend.T, axis=1) >= -1e-9)


def test_guardrail_rolls_back_a_drop_beyond_noise_and_holds_the_table_out() -> None:
    rng = np.random.default_rng(0)
    g = Guardrail(window=5, settle=1, drop=0.05, z=3.0, hold_s=600)
    old, bad = Table.from_list([[1, 16, 3]]), Table.from_list([[1, 16, 0]])
    for _ in range(5):
        assert g.observe(whole(8.0, 1000 * np.exp(0.02 * rng.standard_normal())), 0.0) is None
    g.start(old, bad)
    verdicts = [g.observe(whole(8.0, 700 * np.exp(0.02 * rng.standard_normal())), 1.0)
                for _ in range(6)]
    assert verdicts[:-1] == [None] * 5
    v = verdicts[-1]
    assert v is not None and v.rolled_back and 0.65 < v.ratio < 0.75
    assert g.is_held(bad, 100.0) == 601.0 and g.is_held(bad, 700.0) is None
    assert g.is_held(old, 100.0) is None


def test_guardrail_keeps_a_push_inside_the_noise_or_under_another_load() -> None:
    rng = np.random.default_rng(1)
    old, new = Table.from_list([[1, 16, 3]]), Table.from_list([[1, 16, 2]])
    g = Guardrail(window=5, settle=1)
    for _ in range(5):
        g.observe(whole(8.0, 1000 * np.exp(0.1 * rng.standard_normal())), 0.0)
    g.start(old, new)
    out = [g.observe(whole(8.0, 980 * np.exp(0.1 * rng.standard_normal())), 1.0) for _ in range(6)]
    assert out[-1] is not None and not out[-1].rolled_back
    # the load halved after the push: no verdict on the table
    for _ in range(5):
        g.observe(whole(8.0, 1000.0), 2.0)
    g.start(old, new)
    out = [g.observe(whole(4.0, 500.0), 3.0) for _ in range(6)]
    assert out[-1] is None and g.is_held(new, 3.0) is None


def test_a_large_drop_the_first_window_cannot_call_is_judged_on_more_samples() -> None:
    """Noisy samples (sd 0.3 in log goodput per pooled sample: a loaded box) and a halved
    goodput: the first window's t is not past the bar, which must not pass the push; the trial
    goes on and rolls it back. A push inside the practical bound passes at the first window as
    before."""
    rng = np.random.default_rng(3)
    noise = 0.3 * rng.standard_normal(200)
    old, bad = Table.from_list([[1, 16, 3]]), Table.from_list([[1, 16, 0]])
    g = Guardrail(window=4, settle=1, drop=0.05, z=3.0)
    for i in range(40):  # the baseline keeps window * (1 + extend) samples
        g.observe(whole(4.0, 1000 * np.exp(noise[i])), 0.0)
    assert len(g.baseline) == 16 and g.has_baseline
    g.start(old, bad)
    out = [g.observe(whole(4.0, 500 * np.exp(noise[100 + i])), 1.0) for i in range(17)]
    verdicts = [v for v in out if v is not None]
    assert len(verdicts) == 1 and verdicts[0].rolled_back, out
    assert out.index(verdicts[0]) > 4  # judged after the first window: more samples
    assert verdicts[0].after <= 16 and verdicts[0].ratio < 0.7
    # a push that costs nothing: passed at the first window
    g = Guardrail(window=4, settle=1, drop=0.05, z=3.0)
    for i in range(16):
        g.observe(whole(4.0, 1000 * np.exp(0.05 * noise[i])), 0.0)
    g.start(old, bad)
    out = [g.observe(whole(4.0, 1000 * np.exp(0.05 * noise[50 + i])), 1.0) for i in range(5)]
    assert out[-1] is not None and not out[-1].rolled_back and out[-1].after == 4


def test_a_measured_push_is_judged_by_its_pairs_not_by_the_scrapes() -> None:
    """A scrape-level drop (another bucket's traffic, drift) does not roll back a push whose
    pairs at the bucket it changed still say the new k wins; pairs that turned against it roll
    it back even when the scrapes saw nothing; without pairs the scrapes judge."""
    old, new = Table.from_list([[1, 256, 3]]), Table.from_list([[1, 112, 3], [113, 256, 2]])

    def trial(after: float, bounds: tuple[float, float] | None) -> object:
        g = Guardrail(window=5, settle=1, drop=0.05, z=3.0)
        for i in range(5):
            g.observe(whole(120.0, 1000.0 + i), 0.0)
        g.start(old, new, measured=((128, 3, 2),))
        assert g.wanted() == ((128, 2, 3),)            # k=2 over k=3 at the bucket it changed
        out = [g.observe(whole(120.0, after + i), 1.0, {(128, 2, 3): bounds}) for i in range(6)]
        return out[-1]
    drop = trial(800.0, (1.0015, 1.067))                # scrapes -20%, pairs: k=2 wins
    assert drop is not None and not drop.rolled_back and drop.judged_by == "pairs"
    assert drop.paired[0].low == 1.0015
    turned = trial(1000.0, (0.95, 0.99))                # scrapes flat, pairs: k=2 loses
    assert turned is not None and turned.rolled_back and turned.judged_by == "pairs"
    scrapes = trial(800.0, None)                        # too few pairs: the scrapes judge
    assert scrapes is not None and scrapes.rolled_back and scrapes.judged_by == "scrapes"
    tie = trial(1000.0, (0.98, 1.03))                   # an interval holding 1: keep
    assert tie is not None and not tie.rolled_back
    # two buckets judged by one verdict: the pairs of both are asked for, and any can roll back
    g = Guardrail(window=5, settle=1)
    for i in range(5):
        g.observe(whole(120.0, 1000.0 + i), 0.0)
    g.start(old, new, measured=((120, 3, 2), (128, 3, 2)))
    assert g.wanted() == ((120, 2, 3), (128, 2, 3))
    both = {(120, 2, 3): (1.01, 1.05), (128, 2, 3): (0.9, 0.97)}
    last = [g.observe(whole(120.0, 1000.0), 1.0, both) for _ in range(6)][-1]
    assert last is not None and last.rolled_back and g.wanted() == ()


def test_projection_makes_a_hat_non_increasing_where_the_evidence_is_thin() -> None:
    # the demo's case after a switch: positions 1-2 well observed at 0.22, position 3 (never
    # drafted by the k=2 ranges) still at the prior's 1.0: â_3 = 0.45 would beat â_2
    state = EstimatorState(prior=np.array([1.0, 1.0, 1.0]), w=50.0,
                           accepted=np.array([2200.0, 2200.0, 0.0]),
                           drafted=np.array([10_000.0, 10_000.0, 0.0]))
    used, raw = projected(state)
    assert raw[2] > raw[1]
    assert np.all(np.diff(used) <= 1e-12) and used[2] < 0.25


INPUTS = Inputs(tie=0.005, confidence=0.9, allowed_k=None, cliffs=[], prior_steps=100)


def test_a_wrong_profile_is_corrected_by_live_step_times() -> None:
    state = EstimatorState(prior=A, w=2000.0)
    # the profile says k=3 costs 18 ms at every B; live steps at B=8..16 say 40 ms
    trusting = choose(LiveStepTimes().blend(T_PROF, SIGMA, 100, 0.2), T_PROF, state, None, 3, INPUTS)
    assert trusting.table.to_list() == [[1, 16, 3]]
    seen = live({(b, 3): (40.0, 5000) for b in range(8, 17)} |
                {(b, 1): (12.0, 5000) for b in range(8, 17)})
    old = Table.from_list([[1, 16, 3]])
    corrected = choose(seen.blend(T_PROF, SIGMA, 100, 0.2), T_PROF, state, old, 3, INPUTS)
    assert corrected.table.k_at(12) != 3 and corrected.table.k_at(2) == 3
    (change,) = [c for c in corrected.changes if c.kept]
    assert change.k_old == 3 and change.batch_size_end == 16 and change.gain_low > 0
    used = {e.k: e for e in change.step_times}
    assert used[3].profile_ms == 18.0 and used[3].used_ms > 35 and used[3].live_steps == 5000


def test_a_rebuild_inside_the_noise_keeps_the_table_in_force() -> None:
    # k=2 and k=3 equally good (within 0.3%), wide intervals: whatever runs stays
    T = T_PROF.copy()
    T[:, 2] = T[:, 3] * (1 + 0.9 + 0.8) / (1 + 0.9 + 0.8 + 0.7) * 1.003
    state = EstimatorState(prior=A, w=2000.0)
    for running in ([[1, 16, 2]], [[1, 16, 3]]):
        old = Table.from_list(running)
        choice = choose(LiveStepTimes().blend(T, np.full(T.shape, 0.05), 100, 0.2), T, state,
                        old, 3, INPUTS)
        assert choice.table == old, (running, choice.changes)


def test_no_profile_weight_and_no_live_steps_keeps_the_profiles_spread() -> None:
    blend = live({(4, 3): (20.0, 50)}).blend(T_PROF, SIGMA, w_T=0.0, step_cv=0.2)
    assert np.isfinite(blend.sigma).all() and blend.sigma[0, 0] == SIGMA[0, 0]
    assert abs(blend.T[3, 3] - 20.0) < 1e-9  # with w_T = 0 the live mean alone


def test_a_push_during_a_trial_is_judged_against_the_last_judged_table() -> None:
    g = Guardrail(window=3, settle=0)
    first, middle, last = (Table.from_list([[1, 16, k]]) for k in (3, 2, 0))
    for _ in range(3):
        g.observe(whole(8.0, 1000.0), 0.0)
    g.start(first, middle)
    g.observe(whole(8.0, 990.0), 1.0)
    g.start(middle, last)  # a second push before the verdict
    assert g.trial is not None and g.trial.old == first and len(g.trial.before) == 3
    out = [g.observe(whole(8.0, 500.0 + i), 2.0) for i in range(3)]
    v = out[-1]
    assert v is not None and v.rolled_back and v.old_table == first.to_list()
    assert not g.baseline  # the bad table's samples are no bar for the next push


def test_acceptance_near_zero_on_few_drafts_does_not_buy_drafts_at_a_tie_of_step_times() -> None:
    # the demo after its switch to acceptance ~0: a k=0 table, a few exploration drafts (the
    # prior's weight decayed to nothing), and at B=1 live k=3 steps no slower than k=0 steps,
    # so T̂(1, 0) = T̂(1, 3) after the projection. A second uniform prior in the Beta draws made
    # â = 0.0002 on 11 drafts look like 1/13 and pushed k=3 at B=1 "+14% [+1.2%, ...]".
    state = EstimatorState(prior=np.zeros(3), w=1e-6, accepted=np.array([0.002, 0.0, 0.0]),
                           drafted=np.array([11.0, 10.6, 4.9]))
    flat = np.tile(np.array([6.92, 6.92, 6.92, 6.96]), (16, 1))  # the demo profile's B=1 row
    seen = live({(1, 0): (6.5, 607), (1, 2): (6.4, 97), (1, 3): (5.0, 197)})
    blend = seen.blend(flat, SIGMA, 100, 0.2)
    assert blend.T[0, 3] == blend.T[0, 0]  # the tie the projection makes
    old = Table.from_list([[1, 16, 0]])
    chosen = choose(blend, flat, state, old, 3, INPUTS)
    assert chosen.table == old, chosen.changes
    # the same counts with real acceptance behind them still buy k=3 there
    state.accepted = np.array([9.0, 8.0, 3.5])
    assert choose(blend, flat, state, old, 3, INPUTS).table.k_at(1) == 3


def test_a_push_leaves_no_narrow_remnant_of_a_range_it_changed_only_in_part() -> None:
    # the demo's guardrail rebuild: old [[1,4,2],[5,9,3],[10,16,0]]; k=0 now beats k=3 with
    # confidence from B=6, while at B=5 every k is a tie: only 6..9 changed with confidence,
    # and without the merge it pushed [[1,4,2],[5,5,3],[6,16,0]]
    T = np.array([[10.0, 10.0, 7.2, 11.5]] * 4 + [[10.0, 12.0, 14.0, 16.0]]
                 + [[10.0, 14.0, 16.0, 19.0]] * 11)
    state = EstimatorState(prior=np.array([0.2, 0.2, 0.2]), w=1e5)
    old = Table.from_list([[1, 4, 2], [5, 9, 3], [10, 16, 0]])
    chosen = choose(LiveStepTimes().blend(T, SIGMA, 100, 0.2), T, state, old, 3, INPUTS)
    # B=5 goes to a neighbour's k (a tie: either), the confident change stands
    assert chosen.table.to_list() in ([[1, 5, 2], [6, 16, 0]], [[1, 4, 2], [5, 16, 0]])
    (merged,) = [c for c in chosen.changes if c.merged]
    assert (merged.batch_size_start, merged.batch_size_end, merged.k_old) == (5, 5, 3)
    assert merged.k_new == chosen.table.k_at(5)
    assert merged.kept and merged.gain_low <= INPUTS.tie  # a near-tie, part of the push
    (confident,) = [c for c in chosen.changes if not c.merged]
    assert (confident.batch_size_start, confident.batch_size_end, confident.k_new) == (6, 9, 0)
    assert confident.gain_low > INPUTS.tie
    # with nothing else to push, the same near-tie alone changes nothing
    calm = Table.from_list([[1, 4, 2], [5, 5, 3], [6, 16, 0]])
    again = choose(LiveStepTimes().blend(T, SIGMA, 100, 0.2), T, state, calm, 3, INPUTS)
    assert again.table == calm and not any(c.merged for c in again.changes)
