"""The stationary bench's reading of the sidecar log: changes by kind, the busiest cell's steps
between rebuilds (benchmarks/stationary.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.stationary import changes, step_series


def rebuild(ts: str, live_ms: float, steps: float, trigger: str = "scheduled",
            outcome: str = "unchanged") -> dict[str, Any]:
    return {"ts": ts, "event": "rebuild", "decision": {
        "trigger": trigger, "outcome": outcome,
        "drift": [{"batch_size": 8, "k": 3, "live_ms": live_ms, "steps": steps}]}}


def test_the_steps_between_rebuilds_undo_the_cap_and_skip_a_replacement(tmp_path: Path) -> None:
    moved = [{"batch_size": 8, "k": 3, "recent_ms": 40.0, "estimate_ms": 20.0, "steps": 50.0}]
    events = [
        {"ts": "2026-12-02T13:10:00+00:00", "event": "starting", "settings": {"step_memory": 100.0}},
        rebuild("2026-12-02T13:10:04+00:00", 20.0, 150.0),   # capped to 100 steps after it
        rebuild("2026-12-02T13:10:08+00:00", 25.0, 150.0),   # + 50 steps of 35 ms
        rebuild("2026-12-02T13:10:12+00:00", 25.0, 150.0, "measured"),  # + 50 of 25 ms: no cap
        rebuild("2026-12-02T13:10:16+00:00", 25.0, 200.0),   # + 50 of 25 ms
        {"ts": "2026-12-02T13:10:20+00:00", "event": "traffic change", "step_times": moved},
        rebuild("2026-12-02T13:10:20+00:00", 25.0, 250.0, "change"),  # from before the change
        rebuild("2026-12-02T13:10:24+00:00", 40.0, 100.0),   # the first after it: a start
        rebuild("2026-12-02T13:10:28+00:00", 40.0, 150.0),   # + 50 of 40 ms
        {"ts": "2026-12-02T13:10:30+00:00", "event": "step-time change taken back",
         "step_times": moved},
    ]
    series = step_series(events)
    assert series == {(8, 3): [(8.0, 35.0, 50.0), (12.0, 25.0, 50.0), (16.0, 25.0, 50.0),
                               (28.0, 40.0, 50.0)]}
    log = tmp_path / "sidecar.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    found = changes(log)
    assert (found.step_time_changes, found.step_time_taken_back) == (1, 1)
    assert found.steps is not None and found.steps.cell == [8, 3] and found.steps.median_ms == 30.0
    assert found.steps.ratio_range == [0.83, 1.33]


def test_a_rebuild_that_says_whether_it_cut_is_taken_at_its_word() -> None:
    start = {"ts": "2026-12-02T13:10:00+00:00", "event": "starting", "settings": {"step_memory": 100.0}}
    said = rebuild("2026-12-02T13:10:04+00:00", 20.0, 150.0)         # scheduled, yet did not cut
    said["decision"]["bookkeeping"] = False
    then = rebuild("2026-12-02T13:10:08+00:00", 25.0, 200.0)         # + 50 steps of 40 ms
    assert step_series([start, said, then]) == {(8, 3): [(8.0, 40.0, 50.0)]}
    said["decision"]["bookkeeping"] = True                            # cut to 100 steps of 20 ms
    assert step_series([start, said, then]) == {(8, 3): [(8.0, 30.0, 100.0)]}
