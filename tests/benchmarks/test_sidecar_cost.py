"""The sidecar-cost bench's arithmetic (benchmarks/sidecar_cost.py): the arms' order and the
ratios to `off`, with intervals, from raw windows."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.sidecar_cost import ARMS, CostRecord, CostSummary, CostWindow, order, summarize

COMMITTED = Path(__file__).parents[2] / "benchmarks/results/cpu-tiny-sidecar-cost"


def test_every_arm_takes_every_place_over_three_cycles() -> None:
    orders = [order(c) for c in range(3)]
    assert all(sorted(o) == sorted(ARMS) for o in orders)
    for place in range(3):
        assert {o[place] for o in orders} == set(ARMS)


def _window(cycle: int, arm: str, tps: float, cpu: float = 0.0, step: float | None = 10.0) -> CostWindow:
    return CostWindow(load=4, cycle=cycle, arm=arm, tokens_per_s=tps, window_s=10.0,
                      step_ms=step, sidecar_cpu_s=cpu, table_changes=0)


def test_ratios_to_off_are_paired_by_cycle_with_an_interval() -> None:
    # off drifts from 100 to 130 over cycles; watch costs 1% and full 5% in every cycle
    windows = []
    for c, base in enumerate((100.0, 110.0, 120.0, 130.0)):
        noise = 1 + 0.002 * (-1) ** c
        windows += [_window(c, "off", base), _window(c, "watch", base * 0.99 * noise, cpu=0.5),
                    _window(c, "full", base * 0.95 / noise, cpu=1.0, step=10.5)]
    windows.append(_window(4, "watch", 50.0))  # no off in its cycle: not paired
    got = {r.arm: r for r in summarize(windows).loads}
    assert got["watch"].cycles == 4 and got["watch"].ratio == pytest.approx(0.99, abs=1e-3)
    low, high = got["watch"].ci
    assert low is not None and high is not None and low < 0.99 < high and high - low < 0.01
    assert got["full"].ratio == pytest.approx(0.95, abs=1e-3)
    assert got["full"].step_ms_ratio == pytest.approx(1.05)
    assert got["watch"].sidecar_cpu_share == pytest.approx(0.05)
    assert got["full"].sidecar_cpu_share == pytest.approx(0.1)


def test_one_cycle_gives_a_ratio_without_an_interval() -> None:
    got = summarize([_window(0, "off", 100.0), _window(0, "watch", 98.0)]).loads
    watch = next(r for r in got if r.arm == "watch")
    assert watch.ratio == pytest.approx(0.98) and watch.ci == [None, None]
    full = next(r for r in got if r.arm == "full")
    assert full.cycles == 0 and full.ratio is None and not math.isnan(full.table_changes)


def test_the_committed_record_parses_and_summarizes_to_its_summary() -> None:
    record = CostRecord.model_validate_json((COMMITTED / "cost.json").read_text())
    assert len(record.windows) == 48
    assert summarize(record.windows) == CostSummary.model_validate_json(
        (COMMITTED / "summary.json").read_text())       # the file parses as the model writes it
    again = CostRecord.model_validate_json(record.model_dump_json(by_alias=True))
    assert again == record


def test_a_renamed_field_fails_the_parse_instead_of_reading_as_a_default() -> None:
    row = _window(0, "off", 100.0).model_dump()
    row["tokens_per_second"] = row.pop("tokens_per_s")
    with pytest.raises(ValueError, match="tokens_per_s"):
        CostWindow.model_validate(row)
