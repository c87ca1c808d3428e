"""Two scrapes -> one interval's counts (sidecar/scrape_delta.py): restart, incomplete, new series."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.scrape_delta import compare, delta, is_reset
from tests.tuner.core.test_scrape import (BODY, LINES, _bytes, _mutate, byte_op, engine_counts,
                                         exposition, line_op)
from tuner.core.errors import ScrapeError
from tuner.core.scrape import Snapshot, parse


def snapshot(**changes: object) -> Snapshot:
    base = Snapshot(accepted_per_pos=(5.0, 3.0), drafted_per_pos=(8.0, 6.0), num_drafts=8.0,
                    num_draft_tokens=14.0, num_accepted_tokens=8.0, num_requests_running=2.0,
                    engine_steps={2: 8.0}, request_steps={2: 8.0},
                    step_time={(1, 2): (0.1, 8.0)}, table_version=1,
                    stock_accepted_per_pos=(5.0, 3.0))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_delta_of_growing_counters() -> None:
    prev = snapshot()
    cur = snapshot(accepted_per_pos=(9.0, 4.0), drafted_per_pos=(12.0, 10.0), num_drafts=12.0,
                   engine_steps={2: 10.0, 1: 3.0}, step_time={(1, 2): (0.3, 10.0)},
                   table_version=2, num_requests_running=0.0)
    assert not is_reset(prev, cur)
    d = delta(prev, cur)
    assert d.accepted_per_pos == (4.0, 1.0) and d.drafted_per_pos == (4.0, 4.0)
    assert d.num_drafts == 4.0 and d.num_draft_tokens == 0.0
    assert d.engine_steps == {2: 2.0, 1: 3.0} and d.request_steps == {2: 0.0}
    assert d.step_time[(1, 2)] == pytest.approx((0.2, 2.0))


def test_delta_without_plugin_has_no_drafted() -> None:
    prev, cur = snapshot(drafted_per_pos=None), snapshot(drafted_per_pos=None, num_drafts=9.0)
    assert delta(prev, cur).drafted_per_pos is None


@pytest.mark.parametrize("changes", [
    {"num_drafts": 7.0},
    {"accepted_per_pos": (5.0, 2.0), "stock_accepted_per_pos": (5.0, 2.0)},
    {"drafted_per_pos": (0.0, 0.0)},
    {"accepted_per_pos": (5.0, 3.0, 0.0), "drafted_per_pos": (8.0, 6.0, 0.0)},
    {"request_steps": {2: 1.0}},
    {"step_time": {(1, 2): (0.05, 8.0)}},
    {"engine_started_at": 2.0},
])
def test_restart_detection(changes: dict[str, Any]) -> None:
    prev, cur = snapshot(engine_started_at=1.0), snapshot(**changes)
    if "engine_started_at" not in changes:
        cur = dataclasses.replace(cur, engine_started_at=1.0)
    assert is_reset(prev, cur) and compare(prev, cur).kind == "restart"
    with pytest.raises(ScrapeError, match="cannot subtract these scrapes \\(restart"):
        delta(prev, cur)


@pytest.mark.parametrize(("changes", "reason"), [
    ({"drafted_per_pos": None}, "drafted"),
    ({"engine_steps": {}}, r"engine_steps\[2\]"),
    ({"explore_steps": None}, "explore_steps"),
    ({"engine_started_at": None}, "engine_started_at"),
    ({"accepted_source": "stock", "drafted_per_pos": None}, "plugin_accepted"),
])
def test_missing_series_are_an_incomplete_scrape_not_a_restart(changes: dict[str, Any],
                                                               reason: str) -> None:
    prev = snapshot(accepted_source="plugin", explore_steps=3.0, engine_started_at=1.0)
    cur = dataclasses.replace(prev, num_drafts=9.0, **changes)
    comparison = compare(prev, cur)
    assert comparison.kind == "incomplete" and not is_reset(prev, cur)
    assert re.search(reason, comparison.reason), comparison.reason
    with pytest.raises(ScrapeError, match="incomplete"):
        delta(prev, cur)


def test_stale_plugin_values_are_an_incomplete_scrape() -> None:
    prev, cur = snapshot(stats_age_s=0.0), snapshot(num_drafts=9.0, stats_age_s=3.0)
    assert compare(prev, cur, max_stats_age_s=5.0).kind == "ok"
    comparison = compare(prev, cur, max_stats_age_s=2.0)
    assert comparison.kind == "incomplete" and "3.0 s old (> 2.0 s)" in comparison.reason
    # a restart is still a restart while stale: the stock counters went down
    assert compare(prev, snapshot(num_drafts=1.0, stats_age_s=3.0), 2.0).kind == "restart"


def test_series_appearing_start_a_new_baseline() -> None:
    stock = snapshot(drafted_per_pos=None, engine_steps={}, request_steps={}, step_time={})
    plugin = snapshot(accepted_source="plugin", accepted_per_pos=(6.0, 4.0))
    assert compare(stock, plugin).kind == "rebaseline"
    assert compare(snapshot(), snapshot(engine_started_at=5.0)).kind == "rebaseline"
    # a k or a step-time cell first used is not new series: it counts from 0
    more = snapshot(engine_steps={2: 8.0, 0: 1.0}, step_time={(1, 2): (0.1, 8.0), (4, 0): (0.1, 1.0)})
    assert compare(snapshot(), more).kind == "ok"


def test_table_version_going_down_is_not_a_reset() -> None:
    assert not is_reset(snapshot(), snapshot(table_version=0, num_requests_running=0.0))


def test_real_restart_is_detected_end_to_end() -> None:
    before = parse(exposition({("tiny", "0"): engine_counts(3, 5.0)}))
    after = parse(exposition({("tiny", "0"): engine_counts(3, 1.0)}))
    assert is_reset(before, after) and not is_reset(after, before)


def test_explore_steps_delta_and_reset() -> None:
    prev, cur = snapshot(explore_steps=3.0), snapshot(explore_steps=7.0)
    assert delta(prev, cur).explore_steps == 4.0
    assert is_reset(cur, prev)
    assert compare(snapshot(explore_steps=3.0), snapshot()).kind == "incomplete"  # vanished
    assert delta(snapshot(), snapshot()).explore_steps == 0.0


def test_switching_accepted_source_is_not_a_restart() -> None:
    plugin = snapshot(accepted_source="plugin")
    assert compare(snapshot(), plugin).kind == "rebaseline"  # the plugin's series appeared
    assert compare(plugin, snapshot()).kind == "incomplete"  # they are missing


@settings(max_examples=200)
@given(st.lists(line_op, max_size=6), st.lists(byte_op, max_size=2))
def test_comparing_with_any_parsed_body_never_raises(line_ops: list[tuple[Any, ...]],
                                                     byte_ops: list[tuple[Any, ...]]) -> None:
    lines = list(LINES)
    for op in line_ops:
        lines = _mutate(lines, op)
    body = "".join(lines)
    for op in byte_ops:
        body = _bytes(body, op)
    try:
        snap = parse(body)
    except ScrapeError:
        return
    base = parse(BODY)
    for prev, cur in ((base, snap), (snap, base)):
        if compare(prev, cur, max_stats_age_s=2.0).kind == "ok":
            delta(prev, cur)
