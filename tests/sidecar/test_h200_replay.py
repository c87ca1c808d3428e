"""The H200 run that showed the sidecar keeping k=1 at N=256, replayed offline.

tests/data/h200-3b-live-cells.json holds what the `sidecar-from-tuned` policy had learned when
its bench ended (benchmarks/results/h200-vllm0.26-3b-ngram-v1-ci): live step times per
(B bucket, k) and its acceptance counts, started from the pure-decode profile committed there.
In the top bucket (B 249..256) k=3 ran at 24.0 ms and k=1 at 19.1 ms over ~1000 steps each,
15% more goodput at k=3, and fixed k=3 beat the sidecar's k=1 by 22% in that bench; the
min-width rule merged the measured 8-wide range back into the k=1 range below it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sidecar.estimator import EstimatorState
from sidecar.rebuild import Inputs, choose
from sidecar.step_times import LiveStepTimes
from tuner.core.goodput import cliffs, interpolate_step_times
from tuner.core.profile import load
from tuner.core.table import Table

ROOT = Path(__file__).resolve().parents[2]
CELLS = ROOT / "tests/data/h200-3b-live-cells.json"
PROFILE = ROOT / "benchmarks/results/h200-vllm0.26-3b-ngram-v1-ci/profile-committed.json"


def _replay(measured: bool) -> Table:
    d = json.loads(CELLS.read_text())
    p = load(PROFILE)
    n = p.engine.max_num_seqs
    T = interpolate_step_times(p.grid, p.step_time_matrix(), n)
    sigma = interpolate_step_times(p.grid, p.step_time_sigma(), n)
    live = LiveStepTimes()
    live.observe({(c["batch_size"], c["k"]): (c["live_ms"] * c["steps"] / 1000, c["steps"])
                  for c in d["cells"]})
    assert p.acceptance is not None
    state = EstimatorState(prior=np.array(p.acceptance.a), w=2000.0,
                           accepted=np.array(d["accepted"]), drafted=np.array(d["drafted"]))
    inputs = Inputs(tie=0.005, confidence=0.9, allowed_k={0, 1, 2, 3},
                    cliffs=cliffs(p.grid, p.step_time_matrix(monotone=False)), prior_steps=100.0,
                    measured=live.measured(n, 100.0) if measured else ())
    return choose(live.blend(T, sigma, 100.0, 0.2), T, state, Table.from_list(d["engine_table"]),
                  p.K, inputs).table


def test_the_measured_top_bucket_moves_to_k3() -> None:
    dense = _replay(measured=True).dense(256, 3)
    assert dense[256] == 3 and dense[249] == 3      # the bucket the bench's N=256 ran in
    assert dense[200] == 1                           # no live steps there: the profile stands


def test_without_the_measured_rows_the_range_is_merged_away_as_on_the_gpu() -> None:
    assert _replay(measured=False).dense(256, 3)[256] == 1


def test_a_measured_bucket_needs_two_ks_with_enough_steps() -> None:
    live = LiveStepTimes()
    live.observe({(256, 1): (1.9, 100.0), (256, 3): (2.4, 100.0), (128, 3): (1.4, 100.0),
                  (16, 1): (0.1, 20.0), (16, 3): (0.1, 100.0), (8, 0): (0.1, 100.0),
                  (8, 2): (0.1, 100.0)})
    assert live.measured(256, 100.0) == ((8, 8), (249, 256))
    assert live.measured(250, 100.0) == ((8, 8), (249, 250))   # cut at max_num_seqs


def test_a_narrow_range_stays_only_if_it_holds_a_whole_measured_bucket() -> None:
    from tuner.core.confidence import _merge_narrow
    ks = np.array([1] * 248 + [3] * 8)                        # [249, 256] at k=3
    G = np.ones((256, 4))
    assert _merge_narrow(ks, G, [], 4, 0.125, ((249, 256),))[255] == 3
    assert _merge_narrow(ks, G, [], 4, 0.125, ((241, 248),))[255] == 1
    one = np.array([1] * 183 + [2] + [1] * 72)                 # [184, 184], bucket 177..184
    assert _merge_narrow(one, G, [], 4, 0.125, ((177, 184),))[183] == 1
