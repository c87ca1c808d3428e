"""sidecar/rebuild.choose against the engine's table: the demo's acceptance-zero push (#27.4)."""

from __future__ import annotations

import numpy as np

from sidecar.estimator import EstimatorState
from sidecar.rebuild import Inputs, choose
from sidecar.step_times import LiveStepTimes
from tuner.core.table import Table

INPUTS = Inputs(tie=0.005, confidence=0.9, allowed_k=None, cliffs=[], prior_steps=100)


def test_after_a_switch_to_acceptance_zero_no_k_3_stays_where_it_only_ties() -> None:
    # the demo (max_num_seqs 16): k=3 within noise of k=0 at B <= 3 (6.96 vs 6.92 ms), dearer
    # above; the change test rebased the prior on ~0 and set w to change_prior_weight (50);
    # the recent window held 1 kept of 320 drafts. The first push was [[1,3,3],[4,16,0]].
    T = np.array([[6.92, 6.92, 6.92, 6.96]] * 3
                 + [[7.4 + 0.3 * b, 8.6 + 0.5 * b, 9.8 + 0.7 * b, 11.0 + 0.9 * b] for b in range(13)])
    blend = LiveStepTimes().blend(T, np.full(T.shape, 0.03), 100, 0.2)
    state = EstimatorState(prior=np.array([0.0026, 6.3e-5, 6.3e-5]), w=50.0,
                           accepted=np.array([1.0, 0.0, 0.0]), drafted=np.full(3, 320.0))
    chosen = choose(blend, T, state, Table.from_list([[1, 3, 3], [4, 16, 2]]), 3, INPUTS)
    assert chosen.table.to_list() == [[1, 16, 0]], chosen.changes
    low = next(c for c in chosen.changes if c.batch_size_end == 3)
    assert low.kept and low.gain_low < INPUTS.tie  # not a confident gain: a futile incumbent
    # the same step times under real acceptance keep k=3 where it ties
    state = EstimatorState(prior=np.array([0.6, 0.35, 0.2]), w=2000.0)
    kept = choose(blend, T, state, Table.from_list([[1, 3, 3], [4, 16, 2]]), 3, INPUTS)
    assert kept.table.k_at(1) == 3
