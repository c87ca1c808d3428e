"""No incumbent k whose extra drafts buy nothing (tuner/core/incumbent.py, issue #27.4)."""

from __future__ import annotations

import numpy as np

from tuner.core.confidence import Change
from tuner.core.incumbent import drop_futile, is_futile

# B = 1..3 at the demo's CPU step times: k=3 within the noise of k=0
T = np.array([[6.92, 6.92, 6.92, 6.96]] * 3)
SIGMA = np.full(T.shape, 0.03)
ZERO = np.array([0.0031, 1e-5, 1e-5])   # â after the demo's switch: 1 kept of 320 drafts
LEFT_OUT = Change(1, 3, 3, 0, gain=0.006, gain_low=-0.028, kept=False)


def test_drafts_that_buy_nothing_at_a_tie_of_step_times_are_dropped() -> None:
    assert is_futile(LEFT_OUT, T, SIGMA, ZERO)
    ks, (c,) = drop_futile(np.array([3, 3, 3]), [LEFT_OUT], T, SIGMA, ZERO)
    assert ks.tolist() == [0, 0, 0] and c.kept and (c.k_old, c.k_new) == (3, 0)


def test_real_acceptance_keeps_the_incumbent() -> None:
    # 3 of 100 tokens accepted at position 1 is worth 3%: more than the tie, k=3 may stay
    assert not is_futile(LEFT_OUT, T, SIGMA, np.array([0.03, 0.0, 0.0]))
    assert not is_futile(LEFT_OUT, T, SIGMA, np.array([0.6, 0.35, 0.2]))


def test_a_smaller_k_confidently_slower_keeps_the_incumbent() -> None:
    slow0 = np.array([[7.6, 7.6, 7.6, 6.96]] * 3)   # k=0 10% slower, well outside its spread
    assert not is_futile(LEFT_OUT, slow0, np.full(T.shape, 0.01), ZERO)


def test_only_a_move_to_fewer_drafts_and_only_left_out_changes() -> None:
    up = Change(1, 3, 0, 3, gain=-0.006, gain_low=-0.03, kept=False)
    assert not is_futile(up, T, SIGMA, ZERO)
    kept = Change(1, 3, 3, 0, gain=0.2, gain_low=0.1, kept=True)
    ks, found = drop_futile(np.array([0, 0, 0]), [kept], T, SIGMA, ZERO)
    assert ks.tolist() == [0, 0, 0] and found == [kept]


def test_a_smaller_k_that_still_drafts_counts_only_the_extra_positions() -> None:
    # k=3 -> k=1: positions 2 and 3 are the extra drafts; position 1's acceptance is not theirs
    to_one = Change(1, 3, 3, 1, gain=0.0, gain_low=-0.03, kept=False)
    assert is_futile(to_one, T, SIGMA, np.array([0.5, 0.001, 0.0]))
    assert not is_futile(to_one, T, SIGMA, np.array([0.5, 0.3, 0.1]))
