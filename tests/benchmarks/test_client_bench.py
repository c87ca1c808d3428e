"""The client benches' shared loop (benchmarks/client_bench.py): the names of their files."""

from __future__ import annotations

from benchmarks.client_bench import run_tag


def test_a_resumed_calls_warmup_files_do_not_overwrite_the_first_calls() -> None:
    assert run_tag(0, 3, "burst-c4", "table") == run_tag(2, 3, "burst-c4", "table") == "b3-burst-c4-table"
    warm = {run_tag(part, -1, "burst-c4", "sidecar") for part in range(3)}
    assert len(warm) == 3 and all("b-1-burst-c4-sidecar" in t for t in warm)
