"""The acceptance change test (sidecar/acceptance_change.py): bursts of fresh requests, drafters
that propose nothing for a while and idle gaps are no change; a switch that lasts is."""

from __future__ import annotations

import numpy as np

from sidecar.acceptance_change import AcceptanceWindows, shift

RATES = np.array([0.75, 0.55, 0.40])


def scrape(rng: np.random.Generator, rates: np.ndarray, proposals: int,
           offered_only: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One scrape: ``proposals`` request-steps that drafted 3 tokens kept at ``rates`` (prefix
    acceptance), and ``offered_only`` request-steps that were offered 3 but proposed nothing."""
    u = rng.random(proposals)
    kept = (u[:, None] < rates[None, :]).sum(axis=0).astype(float)
    offered = np.full(3, float(proposals + offered_only))
    return kept, offered, np.full(3, float(proposals))


def run(windows: AcceptanceWindows, scrapes: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[int]:
    """Scrape numbers at which the test found a change (restarting after each, as the controller)."""
    found = []
    for i, (acc, dra, pro) in enumerate(scrapes):
        windows.add(acc, pro, acc, dra)
        if windows.test(z=6.0, min_delta=0.1) is not None:
            found.append(i)
            windows.restart()
    return found


def test_shift_needs_both_windows_beyond_z_and_delta_the_same_way() -> None:
    ref = (700.0, 1000.0)
    assert shift(ref, [(200.0, 1000.0), (210.0, 1000.0)], z=6, min_delta=0.1) is not None
    assert shift(ref, [(200.0, 1000.0), (690.0, 1000.0)], z=6, min_delta=0.1) is None  # gone back
    assert shift(ref, [(200.0, 1000.0), (990.0, 1000.0)], z=6, min_delta=0.1) is None  # one up, one down
    assert shift(ref, [(650.0, 1000.0), (640.0, 1000.0)], z=6, min_delta=0.1) is None  # < delta
    assert shift(ref, [(2.0, 10.0), (2.0, 10.0)], z=6, min_delta=0.1) is None          # 10 drafts
    assert shift((7.0, 10.0), [(200.0, 1000.0)] * 2, z=6, min_delta=0.1) is None       # no reference


def test_fresh_requests_that_propose_nothing_are_no_change() -> None:
    """The H200's bursts: requests offered K with nothing for ngram to match read a_1 0.25-0.34
    by offered drafts; by proposals acceptance never moved."""
    rng = np.random.default_rng(0)
    steady = [scrape(rng, RATES, 300) for _ in range(30)]
    burst = [scrape(rng, RATES, 60, offered_only=600) for _ in range(4)]
    after = [scrape(rng, RATES, 300) for _ in range(20)]
    assert run(AcceptanceWindows(3, 1.0), steady + burst + after + burst + after) == []
    # by offered drafts (stock vLLM's view) the same traffic is a change: what the test avoids
    offered = [(a, d, d) for a, d, _ in steady + burst + burst + after]
    assert run(AcceptanceWindows(3, 1.0), offered) != []


def test_a_burst_whose_first_drafts_miss_then_hit_is_no_change() -> None:
    """The CPU reproduction (issue 39.2): each burst's first seconds keep nothing (the prompt's
    phrases, which the model does not continue), then everything; bursts every 10 s, idle between."""
    rng = np.random.default_rng(1)
    scrapes = []
    for _ in range(60):  # 10 minutes
        scrapes += [scrape(rng, np.zeros(3), 300), scrape(rng, np.zeros(3), 250),
                    scrape(rng, np.ones(3), 200), scrape(rng, np.ones(3), 150),
                    scrape(rng, np.ones(3), 120)]
        scrapes += [(np.zeros(3), np.zeros(3), np.zeros(3))] * 5  # idle: skipped
    assert run(AcceptanceWindows(3, 1.0), scrapes) == []


def test_a_lasting_switch_is_found_within_two_windows() -> None:
    rng = np.random.default_rng(2)
    before = [scrape(rng, RATES, 300) for _ in range(60)]
    after = [scrape(rng, np.array([0.2, 0.1, 0.05]), 300) for _ in range(30)]
    found = run(AcceptanceWindows(3, 1.0), before + after)
    assert len(found) == 1 and 60 + 3 <= found[0] <= 60 + 6  # 4-7 s at 1-s scrapes
    # and back up again: found again against the new reference
    back = [scrape(rng, RATES, 300) for _ in range(30)]
    found = run(AcceptanceWindows(3, 1.0), before + after + back)
    assert len(found) == 2 and 90 + 3 <= found[1] <= 90 + 6


def test_a_switch_under_bursts_with_idle_gaps_is_found_across_them() -> None:
    rng = np.random.default_rng(3)
    idle = [(np.zeros(3), np.zeros(3), np.zeros(3))] * 6
    scrapes = []
    for rates in [RATES] * 8 + [np.array([0.2, 0.1, 0.05])] * 4:
        scrapes += [scrape(rng, rates, 200) for _ in range(3)] + idle
    found = run(AcceptanceWindows(3, 1.0), scrapes)
    switch = 8 * 9  # the first scrape of the first burst after the switch
    assert len(found) == 1 and switch <= found[0] <= switch + 2 * 9


def test_windows_span_three_seconds_of_scrapes_whatever_the_interval() -> None:
    assert AcceptanceWindows(3, 0.5).size == 6 and AcceptanceWindows(3, 2.0).size == 3
    assert AcceptanceWindows(2, 0.5, window_s=0).size == 2
    w = AcceptanceWindows(2, 1.0)
    assert w.size == 3 and w.keep == 120 + 6
