"""The bench's statistics on synthetic blocks (pure): intervals, verdicts, Holm, cross-fitted
reference, worst case."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.cells import TABLES, Window
from benchmarks.inference import holm
from tuner.core.student_t import t_ppf, t_sf
from benchmarks.stats import analyze, load_family


def blocks(truth: dict[str, dict[int, float]], n_blocks: int, noise: float, seed: int = 0,
           drift: float = 0.0, group: str = TABLES, first_block: int = 0) -> list[Window]:
    """Windows of `n_blocks` blocks per load: true tokens/s x a block-wide drift x window noise."""
    rng = np.random.default_rng(seed)
    loads = sorted({n for per in truth.values() for n in per})
    out: list[Window] = []
    for b in range(n_blocks):
        for n in loads:
            level = float(np.exp(rng.normal(0, drift)))  # slow shifts: the same for the block
            policies = [p for p in truth if n in truth[p]]
            for pos, i in enumerate(rng.permutation(len(policies))):
                p = policies[i]
                tps = truth[p][n] * level * float(np.exp(rng.normal(0, noise)))
                out.append(Window(block=first_block + b * len(loads) + loads.index(n), round=b,
                                  load=n, group=group, position=pos, policy=p, tokens_per_s=tps,
                                  window_s=4.0, started_s=0.0))
    return out



def test_student_t_matches_its_tables() -> None:
    assert t_ppf(np.array([0.975, 0.995, 0.975]), np.array([5, 3, 1000])) == pytest.approx(
        [2.5706, 5.8409, 1.9623], abs=1e-4)
    assert t_sf(np.array([12.706, -2.5706]), np.array([1, 5])) == pytest.approx([0.025, 0.975], abs=1e-5)


def test_holm_steps_down_and_the_levels_match_its_verdicts() -> None:
    adj, level = holm(np.array([0.01, 0.04, 0.03, 0.005, np.nan]), 0.05)
    assert adj[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02]) and np.isnan(adj[4])
    # 0.005 at 0.05/4 and 0.01 at 0.05/3 rejected; 0.03 fails at 0.05/2, and so does every later one
    assert level[:4] == pytest.approx([0.05 / 3, 0.025, 0.025, 0.0125]) and level[4] == 0.05


def test_an_aa_pair_of_pure_noise_covers_one_and_has_no_verdict() -> None:
    truth = {"fixed-k1": {4: 100.0}, "fixed-k3": {4: 120.0}, "aa:fixed-k3": {4: 120.0}}
    a = analyze(blocks(truth, 30, noise=0.08, drift=0.2))
    c = a.aa[4]
    assert c.policy == "aa:fixed-k3" and c.versus == "fixed-k3"
    assert c.ratio.low < 1 < c.ratio.high
    assert c.verdict == "undecided" and c.p_holm is not None
    assert a.aa_halfwidth == pytest.approx(c.ratio.halfwidth)
    assert a.aa_sd == pytest.approx(0.08 * np.sqrt(2), rel=0.35)
    assert ("aa:fixed-k3", 4) not in a.comparisons  # the noise floor, not a policy to rank


def test_aa_intervals_cover_one_about_as_often_as_they_claim() -> None:
    truth = {"fixed-k3": {1: 50.0}, "aa:fixed-k3": {1: 50.0}}
    covered = sum(a.aa[1].ratio.low <= 1 <= a.aa[1].ratio.high
                  for a in (analyze(blocks(truth, 6, noise=0.1, seed=seed)) for seed in range(100)))
    assert covered >= 88  # 95% nominal (one comparison: its level is 95%), 3 MC errors below


def test_a_clear_ten_percent_difference_is_better_and_worse() -> None:
    truth = {"fixed-k1": {8: 100.0}, "fixed-k3": {8: 90.0}, "tuned": {8: 110.0}}
    a = analyze(blocks(truth, 12, noise=0.01, drift=0.3))
    assert a.references[8] == "fixed-k1"
    assert a.comparisons[("fixed-k3", 8)].verdict == "worse"
    tuned = a.comparisons[("tuned", 8)]
    assert tuned.verdict == "better" and tuned.p_holm is not None and tuned.p_holm < 0.05
    assert tuned.ratio.median == pytest.approx(1.10, abs=0.01)
    assert tuned.ratio.low > 1.07 and tuned.ratio.high < 1.13  # drift cancels within blocks
    assert a.comparisons[("fixed-k1", 8)].verdict == "reference"
    assert a.family.method == "holm" and a.family.size == 2 and a.family.level == 0.05


def test_a_difference_inside_the_threshold_is_within_and_a_noisy_one_undecided() -> None:
    truth = {"fixed-k1": {8: 100.0}, "tuned": {8: 100.5}}
    c = analyze(blocks(truth, 20, noise=0.002)).comparisons[("tuned", 8)]
    assert c.verdict == "within"   # a narrow tie is a finding
    noisy = analyze(blocks(truth, 8, noise=0.15)).comparisons[("tuned", 8)]
    assert noisy.verdict == "undecided"
    few = analyze(blocks(truth, 3, noise=0.01)).comparisons[("tuned", 8)]
    assert few.verdict == "too_few_blocks" and few.p_holm is None


def test_the_reference_is_cross_fitted_so_equal_fixed_ks_are_not_biased() -> None:
    """Three fixed k's and tuned of one true speed, 8 blocks, window CV 10%: the max of the
    fixed k's means, picked on the blocks it is judged on, puts tuned ~3% below 1; picked on
    the other half of the blocks it does not."""
    rng = np.random.default_rng(0)
    policies = ["fixed-k1", "fixed-k2", "fixed-k3", "tuned"]
    Y = rng.normal(0, 0.1, (4000, 8, 4)) + rng.normal(0, 0.3, (4000, 8, 1))
    est, _ = load_family(Y, policies, 4)
    crossfit = est[("ref", "tuned", 4)].point.mean
    assert abs(crossfit.mean()) < 4 * crossfit.std() / np.sqrt(crossfit.size)
    naive = Y[..., 3].mean(axis=1) - Y[..., :3].mean(axis=1).max(axis=1)
    assert naive.mean() < -0.02
    a = analyze(blocks({p: {4: 100.0} for p in policies}, 8, noise=0.1, seed=1))
    assert all(c.verdict in ("undecided", "reference") for c in a.comparisons.values())


def test_halves_that_pick_different_references_are_both_named() -> None:
    truth = {"fixed-k1": {4: 100.0}, "fixed-k2": {4: 100.0}}
    names = {analyze(blocks(truth, 8, noise=0.1, seed=s)).references[4] for s in range(20)}
    assert "fixed-k1 | fixed-k2" in names


def test_worst_case_covers_the_largest_loss_and_names_its_blocks() -> None:
    truth = {"fixed-k0": {1: 60.0, 16: 300.0}, "fixed-k3": {1: 100.0, 16: 240.0},
             "documented": {1: 100.0, 16: 240.0}, "tuned": {1: 97.0, 16: 297.0}}
    a = analyze(blocks(truth, 15, noise=0.01))
    assert a.references == {1: "fixed-k3", 16: "fixed-k0"}
    w = a.worst["documented"]
    assert w.at_load == 16 and w.loss.median == pytest.approx(0.2, abs=0.01)
    assert w.loss.low < 0.2 < w.loss.high and w.n_blocks == 15 and w.loads == 2
    assert a.worst["tuned"].at_load == 1 and a.worst["tuned"].loss.median == pytest.approx(0.03, abs=0.01)
    assert a.worst["fixed-k0"].loss.median == pytest.approx(0.4, abs=0.01)


def test_worst_case_interval_covers_the_true_worst_loss() -> None:
    truth = {"fixed-k3": {1: 100.0, 4: 100.0, 16: 100.0}, "tuned": {1: 98.0, 4: 97.0, 16: 99.0}}
    covered = sum(w.loss.low <= 0.03 <= w.loss.high
                  for w in (analyze(blocks(truth, 8, noise=0.05, seed=s)).worst["tuned"]
                            for s in range(50)))
    assert covered >= 45


def test_a_non_table_policy_is_chained_through_its_pair_reference() -> None:
    tables = {"fixed-k2": {4: 100.0}, "fixed-k3": {4: 90.0}}
    nospec = {"nospec": {4: 108.0}, "fixed-k3": {4: 90.0}}  # 1.2 x k3 = 1.08 x the reference
    windows = blocks(tables, 15, noise=0.01) + blocks(nospec, 15, noise=0.01, seed=1,
                                                      group="nospec", first_block=100)
    a = analyze(windows)
    c = a.comparisons[("nospec", 4)]
    assert c.versus == "fixed-k3→fixed-k2" and c.verdict == "better"
    assert c.ratio.median == pytest.approx(1.08, abs=0.01)
    assert a.medians[("fixed-k3", 4)] == pytest.approx(90.0, rel=0.02)  # from the table blocks
    assert a.medians[("nospec", 4)] == pytest.approx(108.0, rel=0.02)


def test_head_to_head_pairs_and_missing_windows() -> None:
    truth = {"fixed-k3": {4: 100.0}, "documented": {4: 100.0}, "tuned": {4: 90.0}}
    windows = blocks(truth, 10, noise=0.01)
    # an older bench's later blocks dropped a decided policy: its ratio uses the blocks holding it
    windows += [w for w in blocks(truth, 10, noise=0.01, seed=3, first_block=50)
                if w.policy != "tuned"]
    a = analyze(windows, head_to_head=[("tuned", "documented")])
    c = a.versus[("tuned", "documented", 4)]
    assert c.verdict == "worse" and c.n_blocks == 10
    assert a.comparisons[("documented", 4)].n_blocks == 20
    assert a.blocks == {4: 20}


def test_the_reference_is_chosen_paired_when_blocks_hold_different_policies() -> None:
    # k1 is 5% faster than k0 in every block, but k0 ran only in the early blocks and the
    # whole engine then slowed by 20%: raw medians would make k0 the reference
    truth = {"fixed-k0": {32: 100.0}, "fixed-k1": {32: 105.0}, "fixed-k3": {32: 95.0},
             "aa:fixed-k3": {32: 95.0}}
    early = blocks(truth, 6, noise=0.005)
    late = [w for w in blocks({p: {32: v[32] * 0.8} for p, v in truth.items()}, 12, noise=0.005,
                              seed=4, first_block=6) if w.policy != "fixed-k0"]
    a = analyze(early + late)
    assert a.medians[("fixed-k0", 32)] > a.medians[("fixed-k1", 32)]  # the trap
    assert a.references[32] == "fixed-k1"
    assert a.comparisons[("fixed-k0", 32)].verdict == "worse"


def test_many_comparisons_are_corrected_together() -> None:
    """Twenty identical policies at four loads: uncorrected, about one comparison in twenty
    would come out 'better' or 'worse' beyond the threshold; corrected, none should."""
    truth = {f"fixed-k{k}": {n: 100.0 for n in (1, 4, 16, 32)} for k in range(20)}
    a = analyze(blocks(truth, 6, noise=0.05, seed=2))
    assert 4 * 19 <= a.family.size <= 4 * 20   # 20 where the halves chose different references
    assert not [c for c in a.every() if c.verdict in ("better", "worse")]
    assert min(c.level for c in a.every() if c.p_holm is not None) > 0.999


def test_better_than_the_best_fixed_k_means_better_than_every_one() -> None:
    """Intersection-union (issue 36 item 5): tuned beats fixed-k1 by 3% but only ties fixed-k3;
    whichever k the cross-fitting picks, "better" needs every fixed k beaten beyond the band."""
    truth = {"fixed-k1": {4: 97.0}, "fixed-k3": {4: 100.0}, "tuned": {4: 100.0}}
    for seed in range(5):
        c = analyze(blocks(truth, 12, noise=0.005, seed=seed)).comparisons[("tuned", 4)]
        assert c.verdict != "better" and c.ratio.low < 1.01
    clear = analyze(blocks({**truth, "tuned": {4: 105.0}}, 12, noise=0.005))
    assert clear.comparisons[("tuned", 4)].verdict == "better"
    # a loss's upper end is the largest of the per-fixed-k upper ends
    loss = analyze(blocks({**truth, "tuned": {4: 90.0}}, 12, noise=0.005)).worst["tuned"].loss
    assert loss.low < 0.1 < loss.high


def test_the_interval_clears_the_band_exactly_when_the_test_rejects() -> None:
    from benchmarks.inference import LogRatio, bounds_best, p_best

    rng = np.random.default_rng(0)
    mean = rng.normal(0.0, 0.03, (2000, 3))
    se = rng.uniform(0.005, 0.02, (2000, 3))
    e = LogRatio(mean, se, np.full_like(mean, 9.0), np.full_like(mean, 10.0))
    for thr, alpha in ((0.0, 0.05), (0.01, 0.01)):
        p, sign = p_best(e, thr)
        low, high = bounds_best(e, alpha)
        assert np.array_equal((p <= alpha) & (sign > 0), low > np.log1p(thr))
        assert np.array_equal((p <= alpha) & (sign < 0), high < np.log1p(-thr))
    one = LogRatio(*(x[:, :1] for x in e))   # one reference: the plain two-sided test
    from benchmarks.inference import p_beyond
    assert np.allclose(p_best(one, 0.01)[0], p_beyond(LogRatio(*(x[:, 0] for x in e)), 0.01)[0])


def test_fiellers_interval_covers_a_ratio_of_paired_means_at_its_level() -> None:
    """The gap share's interval (benchmarks/field_summary.py gap_closed): 2000 simulated runs of
    12 correlated block pairs, true ratio 0.7, cover it 93-97% of the time (95% claimed; the
    binomial SE at 2000 trials is 0.5%); unbounded where the denominator is not clear of 0."""
    from benchmarks.inference import fieller
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(2000):
        y = rng.normal(0.3, 0.08, 12)
        x = 0.7 * y + rng.normal(0, 0.05, 12)
        lo, hi = fieller(x, y) or (np.inf, -np.inf)
        hits += lo <= 0.7 <= hi
    assert 0.93 <= hits / 2000 <= 0.97
    assert fieller([0.1, -0.1, 0.05], [0.01, -0.02, 0.0]) is None
    assert fieller([1.0, 2.0], [1.0, 2.0]) is None
