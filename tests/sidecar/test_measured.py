"""Realized goodput from the plugin's step ring: pairs, their interval, its error rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sidecar.measured import (EARLY_PAIRS, MIN_PAIRS, UNPAIRED_RUNS, MeasuredGoodput, changed_buckets,
                              confidence_sequence, paired_interval, pairs_in, smallest_gain)
from tuner.core.admin_api import Step
from tuner.core.buckets import band


def ring(rates: dict[int, float], pattern: list[tuple[int, int]], B: int = 120, seed: int = 0,
         drift: float = 0.0, noise: float = 0.03) -> list[Step]:
    """Steps of (k, count) stretches: k's step takes 10 ms, emits rates[k]·10 ms tokens,
    with per-step noise and a slow drift of the whole engine."""
    rng = np.random.default_rng(seed)
    out, seq, prev = [], 0, pattern[0][0]
    for k, count in pattern:
        for i in range(count):
            seq += 1
            level = 1.0 + drift * seq / 1000
            seconds = 0.01 * level * float(np.exp(rng.normal(0, noise)))
            emitted = int(round(rates[k] * 0.01 * float(np.exp(rng.normal(0, noise)))))
            out.append(Step(seq, B, prev, k, seconds, 4 * B, emitted))
            prev = k
    return out


def duels(challengers: list[int], incumbent: int, runs: int, run: int = 16,
          gap: int = 40) -> list[tuple[int, int]]:
    pattern = [(incumbent, gap)]
    for i in range(runs):
        pattern += [(challengers[i % len(challengers)], run), (incumbent, gap)]
    return pattern


def test_paired_runs_find_a_4_percent_win_under_drift() -> None:
    m = MeasuredGoodput()
    # k=2 emits 4% more per second than k=3; the engine slows 30% over the run
    steps = ring({3: 12000, 2: 12480}, duels([2], 3, runs=30), drift=0.1)
    for i in range(0, len(steps), 37):  # polled in pieces, as the sidecar does
        m.ingest(steps[i:i + 37])
    c = m.compare(120, 2, 3, alpha=0.05)
    assert c is not None and c.pairs == 30 and c.steps == 30 * 15
    assert 1.02 < c.ratio < 1.06 and c.low > 1.005
    back = m.compare(120, 3, 2, alpha=0.05)  # the same pairs, the other way round
    assert back is not None and math.isclose(back.ratio, 1 / c.ratio)
    rate = m.rate(120, 3)
    assert rate is not None and rate[1] > 400 and 113 <= rate[2] <= 120  # B of the 120 band


def test_runs_without_both_sides_or_across_a_gap_are_not_paired() -> None:
    steps = ring({3: 100, 2: 100}, [(3, 40), (2, 16), (3, 20)])
    assert pairs_in(steps[:-8], set()) == []            # after-side still short: waits
    assert len(pairs_in(steps, set())) == 1
    gap = [s for s in ring({3: 100, 2: 100}, duels([2], 3, runs=1)) if s[0] != 50]
    assert pairs_in(gap, set()) == []                   # a lost step beside the run
    legacy = ring({3: 100, 1: 100}, [(3, 40), (1, 3), (3, 40)])
    assert pairs_in(legacy, set()) == []                # a 3-step rotation run: 2 steady steps


def test_few_pairs_give_no_comparison_and_a_new_engine_run_keeps_the_pairs() -> None:
    m = MeasuredGoodput()
    found = m.ingest(ring({3: 1000, 1: 1000}, duels([1], 3, runs=MIN_PAIRS - 1)))
    # the new pairs come back (the sidecar logs each): one per run, k=1 against k=3
    assert len(found) == MIN_PAIRS - 1 and {(p.bucket, p.k, p.ref) for p in found} == {(120, 1, 3)}
    assert m.compare(120, 1, 3, 0.05) is None
    m.restart()
    m.ingest(ring({3: 1000, 1: 1000}, duels([1], 3, runs=2), seed=1))
    assert m.compare(120, 1, 3, 0.05) is not None
    m.forget()
    assert m.compare(120, 1, 3, 0.05) is None and m.served == {}


def test_an_early_comparison_reads_a_large_gain_from_a_handful_of_pairs() -> None:
    """Bursts leave a bucket a few pairs (the H100's 3B: 5 pairs of k=3 at 2.3-2.8x of k=0):
    asked for early, EARLY_PAIRS of them give an interval, wider than eq. CS on their plain sd
    by at least the assumed dependence, and a 2.4x gain clears it."""
    few = MeasuredGoodput()
    few.ingest(ring({0: 1000, 3: 2400}, duels([3], 0, runs=EARLY_PAIRS - 1), noise=0.05))
    assert few.compare(120, 3, 0, 0.05, early=True) is None
    m = MeasuredGoodput()
    m.ingest(ring({0: 1000, 3: 2400}, duels([3], 0, runs=EARLY_PAIRS), noise=0.05))
    assert m.compare(120, 3, 0, 0.05) is None          # not asked for early: eq. LRV's 24
    c = m.compare(120, 3, 0, 0.05, early=True)
    assert c is not None and c.pairs == EARLY_PAIRS and c.low > 1.3
    x = np.asarray([v for _, v, _ in m._ordered(120, 3, 0)])
    plain = confidence_sequence(0.0, float(np.std(x, ddof=1)), len(x), 0.05)[1]
    assert c.half_width >= math.sqrt(3.0) * plain
    full = MeasuredGoodput()
    full.ingest(ring({0: 1000, 3: 2400}, duels([3], 0, runs=MIN_PAIRS), noise=0.05))
    got = full.compare(120, 3, 0, 0.05, early=True)
    assert got is not None and got.pairs == MIN_PAIRS  # eq. LRV from here on


def test_the_confidence_sequence_errs_in_at_most_5_percent_of_null_runs_at_any_look() -> None:
    """Looked at after every pair from MIN_PAIRS to 60, as the sidecar does: a null run that
    ever excludes 0 is a false verdict (a fixed-n 95% interval re-tested like this errs in
    far more)."""
    rng = np.random.default_rng(7)
    for sd in (0.01, 0.03):
        x = rng.normal(0.0, sd, (1500, 60))
        n = np.arange(1, 61)
        mean = np.cumsum(x, axis=1) / n
        var = (np.cumsum(x ** 2, axis=1) - n * mean ** 2) / np.maximum(n - 1, 1)
        ever = np.zeros(x.shape[0], dtype=bool)
        naive = np.zeros(x.shape[0], dtype=bool)
        for i in range(MIN_PAIRS - 1, 60):
            lo, hi = confidence_sequence(0.0, 1.0, i + 1, 0.05)  # half-width per unit sd
            s = np.maximum(np.sqrt(var[:, i]), 0.004)
            ever |= np.abs(mean[:, i]) > hi * s / max(s.mean(), 1e-12) * s.mean()
            naive |= np.abs(mean[:, i]) > 1.96 * np.sqrt(var[:, i] / (i + 1))
        assert ever.mean() <= 0.05 + 0.017, (sd, ever.mean())   # 3 sigma of 1500 trials
        assert naive.mean() > 0.15                            # what it protects against


def test_the_interval_separates_a_real_difference_in_30_pairs() -> None:
    """Power at the H200's figures: a 3.5% difference, pairs spread 1.5%: 30 pairs resolve it."""
    x = np.random.default_rng(3).normal(math.log(1.035), 0.015, (400, 30))
    _, low, _ = paired_interval(x, 0.05)
    assert np.mean(low > math.log(1.005)) >= 0.9  # seen: 0.96


def test_one_challenger_at_a_time_settles_the_h200s_difference_within_three_bursts() -> None:
    """The H200 run (32B, N=128): pairs of k=2 against k=3 spread 1.8% around +3.4%, and the
    duel budget's burst held 12 runs of 16 steps. Split between two challengers, 30 runs give
    each fewer than MIN_PAIRS; all 30 on the most promising one clear the tie in four of five."""
    alpha = 0.1 / 3  # the sidecar's level split over three challengers
    assert 30 // 2 < MIN_PAIRS
    x = np.random.default_rng(11).normal(math.log(1.034), 0.018, (2000, 30))
    _, low, _ = paired_interval(x, alpha)
    assert np.mean(low > math.log(1.005)) > 0.75  # seen: 0.82


def test_a_host_gap_per_step_counts_against_every_k_alike() -> None:
    """k=2 steps 66.6 ms, k=3 79.6 ms, both followed by 5 ms of host time: by execution time
    alone k=2 leads by the emitted ratio over 66.6/79.6; by the engine's cycle (what a client's
    clock sees) by less. The pairs use the cycle."""
    def steps(pattern: list[tuple[int, int]]) -> list[Step]:
        out, seq, prev = [], 0, pattern[0][0]
        for k, count in pattern:
            for _ in range(count):
                seq += 1
                run = {2: 0.0666, 3: 0.0796}[k]
                out.append(Step(seq, 120, prev, k, run, 480, {2: 500, 3: 578}[k], run + 0.005))
                prev = k
        return out
    (pair,) = pairs_in(steps([(3, 40), (2, 16), (3, 40)]), set())
    by_cycle = (500 / 0.0716) / (578 / 0.0846)
    assert math.isclose(pair.log_ratio, math.log(by_cycle), rel_tol=1e-9)
    assert by_cycle < (500 / 0.0666) / (578 / 0.0796)


def test_rings_of_older_plugins_still_parse() -> None:
    """A sidecar newer than the plugin beside it: six fields (no emitted: not measured), seven
    (no cycle: execution time stands in)."""
    from tuner.core.admin_api import StatsReply

    reply = StatsReply.model_validate({"recent_steps": [[1, 4, 3, 3, 0.01, 8],
                                                        [2, 4, 3, 3, 0.01, 8, 9],
                                                        [3, 4, 3, 3, 0.01, 8, 9, 0.012]]})
    assert [(s.emitted, s.cycle) for s in reply.recent_steps] == [(None, None), (9, None),
                                                                  (9, 0.012)]
    m = MeasuredGoodput()
    m.ingest(reply.recent_steps)
    assert m.cells[(4, 3)][0] == 2


def test_a_stretch_the_table_itself_runs_is_not_a_duel() -> None:
    """B wanders across a table edge inside a bucket (k=3 up to 146, k=1 at 147): the k=1
    stretches are the table's, their reference sits at other batch sizes; not paired."""
    dense = [0] + [3] * 146 + [1] * 110
    steps, seq, prev = [], 0, 3
    for block in range(30):
        for B, k, n in ((146, 3, 40), (147, 1, 10)):
            for _ in range(n):
                seq += 1
                steps.append(Step(seq, B, prev, k, 0.05, 4 * B, 300, 0.052))
                prev = k
    assert pairs_in(steps, set(), dense) == []
    assert pairs_in(steps, set()) == []      # without the table: no B both ran, no pair either


def test_a_large_first_read_is_paired_whole() -> None:
    """8000 steps at once (a first read, a re-read after a restart): every run is paired, not
    only those in the last TAIL_STEPS."""
    steps = ring({3: 1000, 2: 1000}, duels([2], 3, runs=150))
    whole, pieces = MeasuredGoodput(), MeasuredGoodput()
    whole.ingest(steps)
    for i in range(0, len(steps), 500):
        pieces.ingest(steps[i:i + 500])
    n = sum(len(p) for p in whole.pairs.values())
    assert n == sum(len(p) for p in pieces.pairs.values()) and n >= 145


def test_a_variance_factor_widens_the_sequence_by_its_root() -> None:
    """--pair-variance-factor widens eq. LRV further (log scale, √f wider)."""
    steps = ring({3: 1000, 1: 1000}, duels([1], 3, runs=30))
    plain, wide = MeasuredGoodput(), MeasuredGoodput(variance_factor=3.0)
    plain.ingest(steps)
    wide.ingest(steps)
    a, b = plain.compare(120, 1, 3, 0.05), wide.compare(120, 1, 3, 0.05)
    assert a is not None and b is not None and a.ratio == b.ratio
    assert b.half_width == pytest.approx(math.sqrt(3.0) * a.half_width, rel=1e-6)


def test_both_directions_of_a_comparison_enter_in_the_order_their_runs_ran() -> None:
    """k=1 runs inside k=3's steps and k=3 runs inside k=1's take turns: the comparison sees
    one sequence of log ratios (k=1 over k=3), in run order, as eq. LRV needs."""
    pattern = [(3, 40)]
    for _ in range(14):
        pattern += [(1, 16), (3, 40), (1, 40), (3, 16), (1, 40), (3, 40)]
    m = MeasuredGoodput()
    found = m.ingest(ring({3: 1000, 1: 1030}, pattern))
    assert {(p.k, p.ref) for p in found} == {(1, 3), (3, 1)} and len(found) >= MIN_PAIRS
    x = np.asarray([p.log_ratio if p.k == 1 else -p.log_ratio for p in found])
    mean, low, high = paired_interval(x, 0.05)
    c = m.compare(120, 1, 3, 0.05)
    assert c is not None and c.pairs == len(found)
    assert (c.ratio, c.low, c.high) == pytest.approx((math.exp(mean), math.exp(low), math.exp(high)))


def ar1(trials: int, n: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """Stationary AR(1) rows with unit variance."""
    e = rng.standard_normal((trials, n))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for i in range(1, n):
        x[:, i] = rho * x[:, i - 1] + math.sqrt(1 - rho * rho) * e[:, i]
    return x


def false_decisions(x: np.ndarray, alpha: float, plain: bool = False) -> float:
    """Share of null rows (true log ratio 0) whose interval excludes 0 at any look from
    MIN_PAIRS on (``plain``: eq. CS on the plain sd from pair 5, the interval before eq. LRV)."""
    ever = np.zeros(x.shape[0], dtype=bool)
    for n in range(5 if plain else MIN_PAIRS, x.shape[1] + 1):
        if plain:
            mean = x[:, :n].mean(axis=1)
            half = np.asarray([confidence_sequence(0.0, float(s), n, alpha)[1]
                               for s in x[:, :n].std(axis=1, ddof=1)])
            low, high = mean - half, mean + half
        else:
            _, low, high = paired_interval(x[:, :n], alpha)
        ever |= (low > 0) | (high < 0)
    return float(ever.mean())


def test_pairs_alike_neighbour_to_neighbour_do_not_inflate_the_error_rate() -> None:
    """Looked at after every pair up to 200 at the sidecar's level over three challengers:
    AR(1) ρ = 0.5 between neighbouring pairs, and a ratio that wanders slowly (sd 2%, time
    constant 200 steps, a pair every 45 steps) under 3% noise a pair. The plain variance erred
    in 34-38% of such null comparisons, eq. LRV in 1.2-1.5% (the bound is 5%)."""
    rng, alpha = np.random.default_rng(36), 0.1 / 3
    alike = 0.03 * ar1(400, 200, 0.5, rng)
    wander = 0.02 * ar1(400, 200, math.exp(-45 / 200), rng) + rng.normal(0, 0.03, (400, 200))
    for x in (alike, wander):
        assert false_decisions(x, alpha) <= 0.05
        assert false_decisions(x, alpha, plain=True) > 0.2


def test_each_comparison_says_the_smallest_gain_it_finds_by_max_pairs() -> None:
    """The power a duel has left: a gain whose interval just clears 1 at max_pairs pairs; it
    shrinks with more pairs and grows with the pairs' spread."""
    pattern = [(3, 40)]
    for _ in range(14):
        pattern += [(1, 16), (3, 40), (1, 40), (3, 16), (1, 40), (3, 40)]
    m = MeasuredGoodput()
    found = m.ingest(ring({3: 1000, 1: 1030}, pattern))
    [power] = m.power(0.1, 40)
    assert (power.bucket, power.k, power.ref, power.pairs) == (120, 1, 3, len(found))
    x = np.asarray([p.log_ratio if p.k == 1 else -p.log_ratio for p in found])
    _, low, high = paired_interval(x, 0.1)  # at n pairs the interval is 2 · sd · half-width
    at_n = smallest_gain(power.sd, power.pairs, 0.1)
    assert math.log1p(at_n) == pytest.approx((high - low) / 2, rel=1e-6)
    assert power.smallest_gain == smallest_gain(power.sd, max(40, power.pairs), 0.1) <= at_n
    assert smallest_gain(0.03, 40, 0.1) < smallest_gain(0.03, 20, 0.1)
    assert smallest_gain(0.06, 40, 0.1) > smallest_gain(0.03, 40, 0.1)
    assert MeasuredGoodput().power(0.1, 40) == []  # no pairs: nothing to say


def test_a_burst_holds_its_plateau_and_drains_through_the_rest_where_no_duel_can_pair() -> None:
    """A burst of 256: 96 steps at B=256 while no request has finished, then one request
    finishing a step. Only the plateau's bucket keeps a third of any 48-step window (a duel
    run of 16 and its two references); the drain leaves each 8-wide bucket in 8 steps."""
    m = MeasuredGoodput()
    steps = [Step(i + 1, 256 if i < 96 else 256 - (i - 95), 3, 3, 0.01, 1024, 100)
             for i in range(96 + 200)]
    m.ingest(steps)
    assert m.pairable() == {256}
    assert {band(s.batch_size) for s in steps} > {256, 128, 64}   # all served, one pairable
    m.mark({128})
    assert m.pairable() == {256} and 128 not in m.served   # a push elsewhere: still pairable
    m.mark({256})
    assert m.pairable() == set() and 256 not in m.served and 64 in m.served
    m.mark()
    assert m.pairable() == set() and m.served == {}   # counted again under the new table
    steady = MeasuredGoodput()
    # a steady load wandering over two buckets (B 118-123 around the 120/128 edge) still pairs
    steady.ingest([Step(i + 1, 118 + i % 6, 3, 3, 0.01, 480, 40) for i in range(200)])
    assert steady.pairable() == {120, 128}


def drains(n: int, per_b: int, top: int = 64, run: int = 16, every: int = 48,
           lead: int = 0) -> list[Step]:
    """``n`` drains from B=top to 1, ``per_b`` steps at each B, under a table of k=0; a duel
    run of ``run`` steps at k=3 every ``every`` steps, whatever B does; ``lead`` steps of the
    table at B=1 first."""
    out: list[Step] = [Step(i + 1, 1, 0, 0, 0.01, 1, 1) for i in range(lead)]
    prev = 0
    for _ in range(n):
        i = 0
        for B in range(top, 0, -1):
            for _ in range(per_b):
                k = 3 if i % every < run else 0
                out.append(Step(len(out) + 1, B, prev, k, 0.01, B * (1 + k), B * (1 + k)))
                prev, i = k, i + 1
    return out


def test_a_held_bucket_whose_runs_never_pair_is_not_pairable() -> None:
    """A drain of 3 steps a B holds each 8-wide bucket for 24 steps, half a run's window (it
    lines up), yet a run of 16 and its references never pair in one (B moves): once
    UNPAIRED_RUNS runs there had their chance to pair (as many steady steps after them as they
    ran) and none did, no duel is asked there (the model decides, beyond its error); a
    plateau's runs pair, and a push starts the count again where it changed the table."""
    table = [0] * 65
    m = MeasuredGoodput()
    assert m.ingest(drains(UNPAIRED_RUNS - 1, per_b=3, lead=20), table) == []
    assert m.unpaired[64] == UNPAIRED_RUNS - 1 and {16, 40, 64} <= m.pairable()   # not yet
    m2 = MeasuredGoodput()
    assert m2.ingest(drains(UNPAIRED_RUNS, per_b=3, lead=20), table) == []
    assert m2.unpaired[64] == UNPAIRED_RUNS and 64 in m2.held
    assert m2.pairable() == {24, 40, 56}   # where no run ran: each run held 16 steps in one bucket
    m2.mark({64})
    assert 64 not in m2.unpaired and 64 not in m2.lined_up and not {16} & m2.pairable()
    plateau = MeasuredGoodput()
    steps = ring({3: 2000, 0: 1000}, duels([3], 0, runs=8), B=64)
    for i in range(0, len(steps), 7):   # read in pieces: each run judged once, and it paired
        assert plateau.ingest(steps[i:i + 7], table) is not None
        assert plateau.pairable() in (set(), {64})
    assert plateau.unpaired[64] == 0 and plateau.pairable() == {64} and 64 in plateau.paired


def test_a_bucket_held_too_briefly_for_a_run_to_line_up_is_not_pairable() -> None:
    """A drain of 2 steps a B holds each bucket for 16 steps, a third of a run's window: held,
    but a run and its references never line up there, and the plugin may start none (it waits
    for a run's length of the table's k): not pairable from the first drain, runs or not."""
    m = MeasuredGoodput()
    m.ingest(drains(1, per_b=2, run=0, lead=20), [0] * 65)
    assert {16, 40, 64} <= m.held and m.lined_up == set() and m.pairable() == set()


def test_a_range_squeezed_between_two_of_another_k_is_not_pairable() -> None:
    """B 41-48 at k=0 between two ranges at k=3, drained 3 steps a B: the hysteresis (3) runs
    k=3 on into B 46-48 and k=0 on down to B 38, so the table's k=0 holds for 15 steps in a
    row, fewer than the 16 of reference the plugin waits for before a run: no run ever starts
    there (none has its chance to pair), though the bucket lines up. Not pairable, so the
    model decides it; a range the load enters at its own k still is."""
    table = [0] + [3] * 40 + [0] * 8 + [3] * 16
    ran = {B: 3 if B >= 46 or B <= 37 else 0 for B in range(1, 65)}
    prev = 3
    steps = []
    for _ in range(3):
        for B in range(64, 0, -1):
            for _ in range(3):
                steps.append(Step(len(steps) + 1, B, prev, ran[B], 0.01, B * 4, B * 4))
                prev = ran[B]
    m = MeasuredGoodput()
    m.ingest(steps, table)
    assert 48 in m.lined_up and 48 not in m.startable and 48 not in m.pairable()
    assert {56, 64} <= m.pairable()
    flat = MeasuredGoodput()
    flat.ingest([s._replace(k_drafted=0, k_verified=0) for s in steps], [0] * 65)
    assert {48, 56, 64} <= flat.pairable()
    flat.mark({48})   # a push that changed the bucket: startable again only once seen so
    assert 48 not in flat.startable and 48 not in flat.pairable() and 56 in flat.startable
    flat.forget()
    assert flat.startable == set()


def test_a_run_may_start_after_a_runs_length_of_the_tables_k_at_its_batch_size() -> None:
    """The plugin starts a run after ``duel_run`` (16) steps in a row at the table's k: the
    17th step at B=41 (table k=0 there, k=3 at B=40) is where one may start, not the 16th;
    a new engine run (seq from 1) starts the count again."""
    table = [0] + [3] * 40 + [0] * 24
    for n, startable in ((16, False), (17, True)):
        m = MeasuredGoodput()
        m.ingest([Step(i + 1, 41, 0, 0, 0.01, 41, 41) for i in range(n)], table)
        assert (48 in m.startable) is startable
    m = MeasuredGoodput()
    m.ingest([Step(i + 1, 41, 0, 0, 0.01, 41, 41) for i in range(16)], table)
    m.restart()
    m.ingest([Step(1, 41, 0, 0, 0.01, 41, 41)], table)
    assert 48 not in m.startable


def test_only_runs_that_could_pair_count_once_in_each_bucket_they_ran_in() -> None:
    """A rotation's runs of 3 or 4 steps (one a transition) are too short to pair: never
    counted. A run waits until as many steady steps followed it; one read in pieces counts
    once in each bucket it ran MIN_RUN_STEPS steps in (a drain's run passes through several,
    and could have paired in any); not where a push changed the table after it began (it ran
    under another table than the one its steps are judged by)."""
    table = [0] * 65
    for length in (3, 4):
        rotation = MeasuredGoodput()
        steps = [Step(i + 1, 64, 0, 3 if i % 20 < length else 0, 0.01, 256, 256) for i in range(400)]
        steps = [s if i == 0 else s._replace(k_verified=steps[i - 1].k_drafted)
                 for i, s in enumerate(steps)]
        rotation.ingest(steps, table)
        assert rotation.unpaired[64] == 0 and rotation.pairable() == {64}
    # a run from B=57 down to 43: 1 step in band 64, 8 in band 56, 6 in band 48; three pieces
    run = [Step(i + 1, 68 - i, 3 if 10 < i <= 26 else 0, 3 if 10 <= i < 26 else 0, 0.01, 256, 256)
           for i in range(60)]
    split = MeasuredGoodput()
    split.ingest(run[:13], table)
    split.ingest(run[13:30], table)
    assert split.unpaired == {}                        # fewer steady steps after it than it ran
    split.ingest(run[30:], table)
    split.ingest(run[30:], table)                      # a re-read adds nothing
    assert split.unpaired == {56: 1, 48: 1}
    for changed, counted in (({8}, {56: 1, 48: 1}), ({56}, {48: 1}), (None, {})):
        pushed = MeasuredGoodput()
        pushed.ingest(run[:30], table)
        pushed.mark(changed)                            # a push elsewhere, or where it pairs
        pushed.ingest(run[30:], table)
        assert pushed.unpaired == counted, changed


def test_a_run_is_compared_with_its_references_at_the_batch_sizes_both_ran() -> None:
    """A slow drain (3 steps a B) lines a run of 16 up with its references in one bucket, but
    the run sits at other B than they do: T can jump inside a band, so the pair would measure
    the load, not the k (a flat engine's k=3 read 1.2x of k=0 at a burst's plateau edge). A
    load wandering over two B's pairs at both; a step of T between them does not reach the
    ratio."""
    table = [0] * 65
    assert pairs_in(drains(6, per_b=3), set(), table) == []
    steps, prev = [], 0
    for i in range(400):
        k = 3 if i % 48 >= 32 else 0
        # B=121 steps take 20% longer than B=120's at every k: per B the k's are equal
        steps.append(Step(i + 1, 120 + i % 2, prev, k, 0.01 * (1.2 if i % 2 else 1.0), 480, 40))
        prev = k
    found = pairs_in(steps, set(), [0] * 129)
    assert len(found) >= 6 and all(abs(p.log_ratio) < 1e-9 for p in found)


def test_the_cells_count_decode_steps_only() -> None:
    """A step that also prefilled (more tokens than B·(1 + k)) costs every k alike and is not
    what the model describes: realized goodput per cell, which the model's live error is
    measured against, leaves it out."""
    m = MeasuredGoodput()
    decode = [Step(i + 1, 64, 0, 0, 0.004, 64, 64) for i in range(40)]
    prefill = [Step(41 + i, 64, 0, 0, 0.040, 64 + 8192, 60) for i in range(10)]
    m.ingest([*decode, *prefill])
    rate = m.rate(64, 0)
    assert rate is not None and rate[1] == 40 and rate[0] == pytest.approx(64 / 0.004)
    assert m.served[64] == 50   # served counts every step


def test_a_push_restarts_the_served_counts_only_where_it_changed_the_table() -> None:
    """The buckets of B 1..40 under [[1,16,3],[17,40,0]] against [[1,16,3],[17,24,0],[25,40,3]]:
    only the 8-wide buckets 32 and 40 changed."""
    old = [3] * 16 + [0] * 24
    new = [3] * 16 + [0] * 8 + [3] * 16
    assert changed_buckets(old, new) == {32, 40}
    assert changed_buckets(old, old) == set()
    assert changed_buckets([1, 1, 1], [1, 1, 2]) == {4}   # B=3 is in the band 3-4
