"""The switch benchmark's paired arms (benchmarks/switch.py): order and recovery, pure."""

from __future__ import annotations

from pathlib import Path

from typing import Any

import pytest

from benchmarks.design import rotated
from benchmarks.switch import ARMS, SwitchArm, SwitchCycle, SwitchWindow, recovery


def arm_of(windows: list[dict[str, Any]], mean_30s: float | None = None) -> SwitchArm:
    return SwitchArm(arm="sidecar", table_before_switch=None, table_after=None,
                     seconds_to_right_table=None, mean_30s=mean_30s,
                     windows=[SwitchWindow.model_validate(w) for w in windows])


def cycle_of(**arms: SwitchArm) -> SwitchCycle:
    return SwitchCycle(order=list(arms), arms=arms, seconds_to_right_table=None, recovery_30s=None)


def test_each_arm_runs_first_in_turn() -> None:
    assert [rotated(ARMS, i)[0] for i in range(3)] == list(ARMS)
    assert all(sorted(rotated(ARMS, i)) == sorted(ARMS) for i in range(5))
    arms = [0, 150, 20, 10]  # the exploration-cost bench's four windows
    assert [rotated(arms, b)[0] for b in range(8)] == arms + arms


def test_recovery_is_the_sidecars_share_of_its_own_cycles_gap() -> None:
    arms = {"stale": arm_of([], 200.0), "best": arm_of([], 240.0), "sidecar": arm_of([], 236.0)}
    assert recovery(arms) == 0.9
    arms["best"] = arm_of([], 190.0)                       # no gap in this cycle: no figure
    assert recovery(arms) is None


def test_after_the_right_table_the_arms_are_compared_by_ratio() -> None:
    from benchmarks.switch import after

    def arm(*tps: float) -> SwitchArm:
        return arm_of([{"end_s": 5.0 * (i + 1), "tps": t} for i, t in enumerate(tps)])
    cycles = [cycle_of(stale=arm(100, 100, 100), best=arm(150, 110, 110),
                       sidecar=arm(100, 110, 121))] * 3
    got = after(cycles, from_s=5.0, to_s=15.0)       # windows ending at 10 and 15 s
    best, stale = got.sidecar_over_best, got.sidecar_over_stale
    assert best is not None and stale is not None
    assert best.estimate == 1.05 and stale.estimate == 1.155
    assert best.ci_low == best.ci_high == 1.05  # no spread


def test_the_arms_windows_count_their_engine_steps_and_old_files_say_none_were_kept() -> None:
    from benchmarks.switch import arm_steps

    def arm(*steps: int | None) -> SwitchArm:
        return arm_of([{"end_s": 5.0, "tps": 1.0, "steps": s} for s in steps])
    got = arm_steps([cycle_of(stale=arm(120, 49), best=arm(80), sidecar=arm(None, 60))])
    assert got.model_dump() == {"min_steps": 50, "windows_with_steps": 4, "fewest_steps": 49,
                                "windows_below_min_steps": 1, "windows_measured_again": None}
    kept = arm_of([{"end_s": 5.0, "tps": 1.0, "steps": 60, "discarded": ["implausible"]}])
    assert arm_steps([cycle_of(sidecar=kept)]).windows_measured_again == 1
    old = arm_of([{"end_s": 5.0, "tps": 1.0}])                  # before steps were kept
    assert arm_steps([cycle_of(stale=old)]).model_dump() == {
        "min_steps": 50, "windows_with_steps": 0, "fewest_steps": None,
        "windows_below_min_steps": 0, "windows_measured_again": None}


def test_five_cycles_give_a_t_interval_not_min_and_max() -> None:
    from benchmarks.inference import mean_interval

    got = mean_interval([0.95, 1.02, 1.10, 0.98, 1.05])
    assert got is not None and got.n == 5 and got.verdict_ready
    assert (got.ci_low, got.ci_high) != (0.95, 1.10)      # not [min, max]
    assert got.ci_low < got.estimate < got.ci_high and got.statistic == "geometric mean"
    few = mean_interval([1.1, 1.2])
    assert few is not None and few.verdict_ready is False
    mean = mean_interval([-0.3, 0.4, 0.1, 0.2], ratio=False)
    assert mean is not None and mean.estimate == 0.1 and mean.statistic == "mean"


def test_dummy_weights_switch_by_the_emulators_rates_and_bad_rates_name_the_flag() -> None:
    import argparse


    from benchmarks.switch import Workload, workloads
    from tuner.core.errors import InvalidInput

    def args(**kw: object) -> argparse.Namespace:
        base = {"temp_a": 0.0, "temp_b": 1.5, "emulate": None, "emulate_with": "plugin",
                "emulate_b": None}
        return argparse.Namespace(**{**base, **kw})

    assert workloads(args(), 3) == (Workload(0.0), Workload(1.5))
    a, b = workloads(args(emulate="0.75,0.55,0.4", emulate_b="0.1,0.02,0.01"), 3)
    assert a.rates == (0.75, 0.55, 0.4) and b.rates == (0.1, 0.02, 0.01)
    assert a.temperature == b.temperature == 0.0        # greedy both: only acceptance changes
    assert "0.1/0.02/0.01" in b.describe()
    for bad, field in [({"emulate_b": "0.1,0.02,0.01"}, "--emulate-b"),          # no A rates
                       ({"emulate": "0.75,0.55,0.4", "emulate_b": "0.1,0.2,0.01"}, "--emulate-b"),
                       ({"emulate": "0.75,0.55,0.4", "emulate_b": "0.1,0.02"}, "--emulate-b"),
                       ({"emulate": "0.75,0.55,0.4", "emulate_b": "0.1,0.02,0.01",
                         "emulate_with": "vllm"}, "--emulate-b")]:
        with pytest.raises(InvalidInput, match=field):
            workloads(args(**bad), 3)


def test_acceptance_is_measured_where_every_position_is_drafted() -> None:
    """The GPU run of 2026-12-02 measured A's acceptance under the engine's startup table (k=0
    from B=4 on): [0, 0, 0] at N=64, A's table k=0, and no switch to follow."""
    from benchmarks.switch import drafting_everywhere
    from tuner.core.table import every_k_table

    assert every_k_table(3, 256).k_at(64) == 0                # what the engine starts with
    t = drafting_everywhere(3, 256)
    assert all(t.k_at(b) == 3 for b in (1, 4, 64, 256))


def test_calls_merge_into_one_switch_file_that_keeps_each_calls_best(tmp_path: Path) -> None:
    import json

    from benchmarks.switch import dumped, figures, merge, parsed

    def part(best: str, cand: dict[str, list[float]], recovery: float) -> dict[str, object]:
        arm = arm_of([{"end_s": 20.0, "tps": 100.0, "steps": 90}], 100.0).model_dump()
        cycle = {"order": list(ARMS), "seconds_to_right_table": 1.0, "recovery_30s": recovery,
                 "arms": {"stale": arm, "best": arm, "sidecar": arm}}
        return {"load": 64, "best_name": best, "best_table": [[1, 256, 0]], "table_a": [[1, 256, 3]],
                "table_b": [[1, 256, 1]], "a_a": [0.7], "a_b": [0.1], "cycles": [cycle],
                "stale_tps": cand["stale"], "best_tps": cand[best], "candidates_tps": cand,
                "workload_a": "A", "workload_b": "B", "window_s": 2.5, "adapt_s": 15.0,
                "follow_s": 30.0, "sidecar_args": [], "command": "python -m benchmarks.switch",
                **figures(cand["stale"], cand[best], []).model_dump(mode="json")}
    one = part("table_b", {"stale": [75.0, 75.0], "table_b": [100.0, 100.0], "fixed-k0": [99.0, 101.0]}, 0.9)
    two = part("fixed-k0", {"stale": [80.0], "table_b": [100.0], "fixed-k0": [102.0]}, 0.7)
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for p, g in zip(paths, (one, two), strict=True):
        p.write_text(json.dumps(g))
    got = json.loads(dumped(merge(paths)))          # as the file reads
    assert [p["best_name"] for p in got["parts"]] == ["table_b", "fixed-k0"]
    assert got["best_tps"] == [100.0, 100.0, 102.0] and got["stale_tps"] == [75.0, 75.0, 80.0]
    assert [c["part"] for c in got["cycles"]] == [0, 1]
    assert got["recovery_30s"]["n"] == 2 and got["recovery_30s"]["estimate"] == 0.8
    assert got["best_candidates_over_table_b"]["fixed-k0"]["n"] == 3
    assert got["arm_steps"]["windows_with_steps"] == 6
    assert "part" not in json.loads(dumped(parsed(one, paths[0])))["cycles"][0]   # one call's file
    del one["workload_b"]
    paths[0].write_text(json.dumps(one))
    with pytest.raises(ValueError, match="workload_b"):      # a field renamed on one side fails
        merge(paths)


def test_every_committed_paired_switch_file_parses_and_reanalyses_to_its_figures() -> None:
    import json

    from benchmarks.switch import SwitchMerged, SwitchRun, dumped, parsed, rerender

    results = Path(__file__).parents[2] / "benchmarks/results"
    files = sorted(p for p in (*results.rglob("switch.json"), *results.rglob("switch-call*.json"))
                   if "arms" in (json.loads(p.read_text()).get("cycles") or [{}])[0])
    assert len(files) >= 8  # the paired design's runs (CPU and the H200's, its three calls too)
    for path in files:
        old = json.loads(path.read_text())
        got = parsed(old, path)
        assert isinstance(got, SwitchMerged if "merged_from" in old else SwitchRun)
        cycles = got.cycles
        assert [c.recovery_30s for c in cycles] == [c["recovery_30s"] for c in old["cycles"]]
        again = rerender(path)
        assert set(json.loads(dumped(again))) >= set(old) - {"analysis"}     # nothing dropped
        assert again.recovery_30s is not None or not any(c.recovery_30s is not None for c in cycles)


def test_the_h200_calls_merge_into_the_committed_switch_file() -> None:
    """The README's --merge on the H200's three call files gives back the committed file."""
    import json

    from benchmarks.switch import dumped, merge

    folder = Path(__file__).parents[2] / "benchmarks/results/h200-vllm0.26-32b-ngram-switch"
    got = json.loads(dumped(merge(sorted(folder.glob("switch-call*.json")))))
    assert got == json.loads((folder / "switch.json").read_text())
