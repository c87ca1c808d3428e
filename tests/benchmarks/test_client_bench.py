"""The client benches' shared loop (benchmarks/client_bench.py): the names of their files."""

from __future__ import annotations

from benchmarks.client_bench import run_tag


def test_a_resumed_calls_warmup_files_do_not_overwrite_the_first_calls() -> None:
    assert run_tag(0, 3, "burst-c4", "table") == run_tag(2, 3, "burst-c4", "table") == "b3-burst-c4-table"
    warm = {run_tag(part, -1, "burst-c4", "sidecar") for part in range(3)}
    assert len(warm) == 3 and all("b-1-burst-c4-sidecar" in t for t in warm)


def test_a_new_run_is_written_whole_and_an_older_one_keeps_its_shape() -> None:
    """The record is written with exclude_unset: a field left at its default in a new run is
    still written, one an older file lacks stays absent."""
    from benchmarks.arm_run import ArmRun
    from benchmarks.client_bench import next_part, placed
    from benchmarks.json_out import dumped
    from tests.benchmarks.arm_runs import noharm_record, phase

    run = ArmRun(shape="burst-c4", arm="table", seed=0, wall_s=10.0, phases=[phase(100, 1.0)],
                 sidecar=None)                                   # steps_per_k left at None
    old = run.placed(0, 0, 0).model_dump(mode="json")
    del old["phases"][0]["engine"]["steps_per_k"]                # a file from before it
    record = noharm_record([old], ["burst-c4"])                  # type: ignore[list-item]
    info, first = next_part(record)
    record.runs += placed([(0, run)], first, info.part)
    info.blocks = 1
    got = dumped(record)
    assert [("steps_per_k" in r["phases"][0]["engine"]) for r in got["runs"]] == [False, True]
    assert got["meta"]["parts"][-1] == {"part": 1, "first_block": 1, "stop_reason": "blocks",
                                        "blocks": 1}
