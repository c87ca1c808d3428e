"""`tabletune status` renders what a sidecar's /v1/state says (tabletune/status.py)."""

from __future__ import annotations

from pathlib import Path

from sidecar.server import state_of
from sidecar.state import SidecarState
from tabletune.status import RANGES_SHOWN, render
from tests.sidecar.fake_engine import TUNED, FakeEngine
from tests.sidecar.test_controller import controller_for, rebuild_once


async def test_status_shows_table_estimate_step_times_and_decisions(tmp_path: Path) -> None:
    async with controller_for(FakeEngine(), tmp_path) as (c, fake):
        await c.tick()
        fake.run(50, B=4, step_ms=27.0)
        decision = await rebuild_once(c, fake)
        assert decision is not None and decision.outcome == "pushed"
        reply = state_of(c)  # GET /v1/state, parsed as `tabletune status` parses it
        state = SidecarState.model_validate(reply)
    # the reply parses back into the model it was served from, decision and all
    assert state.last_decision is not None and state.model_dump(mode="json") == reply
    plain = render(state, "http://127.0.0.1:9109", tty=False, now=decision.time + 5)
    assert plain.startswith("sidecar http://127.0.0.1:9109: ready, pushing tables\n")
    assert f"engine table v{state.engine_table_version}: B 1-8: k=3  B 9-16: k=1" in plain
    # acceptance with its evidence, tab-separated when piped
    assert "1\t0.900\t0.900\t0.900\t360\t400" in plain  # live counts after the halving
    assert "4\t3\t27.00\t18.00\t1.50x\t50" in plain  # live against the profile's step time
    assert "(5 s ago)\tpushed\tscheduled\tB 1-8: k=3  B 9-16: k=1" in plain
    table = render(state, "http://127.0.0.1:9109", tty=True, now=decision.time + 5)
    assert "─" in table and "\t" not in table and "live ms" in table
    assert TUNED == state.engine_table
    # the model's ratio error, once pairs have checked it, read from the last decision
    assert "checked by pairs" not in plain
    checked = state.model_copy(update={"last_decision": state.last_decision.model_copy(
        update={"model_ratio_error": 0.042})})
    assert ("its ratios, checked by pairs: off at most 4.2% (a 90% bound; this, not the error "
            "above, is what a switch by the model must beat)") in render(checked, "http://x:1",
                                                                         tty=False, now=0.0)


def test_status_of_a_sidecar_that_has_seen_nothing_yet() -> None:
    state = {"ready": False, "ready_reason": "not connected to the engine yet", "dry_run": True,
             "source": None, "engine_table": None, "estimator": {}, "a_hat": []}
    text = render(SidecarState.model_validate(state), "http://x:1", tty=False, now=0.0)
    assert "NOT READY (not connected to the engine yet), dry-run" in text
    assert "no estimate yet" in text and "no rebuild yet" in text and "engine table vNone: unknown" in text


def test_status_shows_a_table_of_many_ranges_in_one_bounded_line() -> None:
    many = [[b, b, 1] for b in range(1, 4096)]  # issue #39 item 3: 72 KB of status before
    state = SidecarState.model_validate({
        "engine_table": many, "engine_table_version": 2, "recommended_table": many[:RANGES_SHOWN + 1],
        "recent_decisions": [{"time": 0.0, "outcome": "pushed", "new_table": many, "reason": "r"}],
        "guardrail": {"held_out": [{"table": many, "until": 60.0}]}})
    for tty in (False, True):
        text = render(state, "http://x:1", tty=tty, now=5.0)
        assert len(text.encode()) < 3000
        shown = "  ".join(f"B {b}-{b}: k=1" for b in range(1, RANGES_SHOWN + 1))
        assert f"engine table v2: {shown}  … {4095 - RANGES_SHOWN} more\n" in text
        assert f"recommended:     {shown}  … 1 more\n" in text
        assert text.count(f"{shown}  … {4095 - RANGES_SHOWN} more") == 3  # engine, decision, held
    exact = state.model_copy(update={"engine_table": many[:RANGES_SHOWN]})
    assert "more" not in render(exact, "http://x:1", tty=False, now=5.0).splitlines()[3]


def test_status_says_how_small_a_gain_each_duel_can_find() -> None:
    state = SidecarState.model_validate({"duel_power": [
        {"batch_size": 64, "k": 2, "ref": 3, "pairs": 30, "max_pairs": 40, "sd": 0.031,
         "smallest_gain": 0.0274}]})
    text = render(state, "http://x:1", tty=False, now=5.0)
    assert "64\t2 vs 3\t30/40\t0.031\t2.7%" in text
    empty = render(SidecarState.model_validate({}), "http://x:1", tty=False, now=5.0)
    assert "no comparison with enough pairs yet" in empty
    assert "asked of the plugin: no duels; rotation over every k" in empty


def test_status_says_what_the_plugin_was_asked_to_explore() -> None:
    state = SidecarState.model_validate({"exploration": {
        "duels": [[9, 16, [2, 1]]], "urgent": True, "rotation": [1, 2, 3]}})
    text = render(state, "http://x:1", tty=False, now=5.0)
    assert "asked of the plugin: B 9-16: k 2, 1 (urgent share); rotation over k 1, 2, 3" in text


def test_status_says_where_the_load_only_passes_through() -> None:
    """A bucket a burst drains through gives duels no pairs: the model decides it beyond its
    live error, and status says which buckets those are."""
    rows = [{"batch_size": 64, "k": 0, "predicted_tokens_per_s": 9000.0,
             "realized_tokens_per_s": 8000.0, "error": 0.118, "steps": 300.0},
            {"batch_size": 128, "k": 0, "predicted_tokens_per_s": 12000.0,
             "realized_tokens_per_s": 11000.0, "error": 0.087, "steps": 40.0, "pairable": False,
             "unpaired_runs": 3},
            {"batch_size": 120, "k": 0, "predicted_tokens_per_s": 12000.0,
             "realized_tokens_per_s": 11000.0, "error": 0.087, "steps": 16.0, "pairable": False,
             "lined_up": False, "startable": False},
            {"batch_size": 48, "k": 0, "predicted_tokens_per_s": 5000.0,
             "realized_tokens_per_s": 4000.0, "error": 0.223, "steps": 32.0, "pairable": False,
             "startable": False}]
    borrowed = [{"batch_size": 56, "error": 0.118, "between": [48, 64], "pairable": False,
                 "startable": False}]
    state = SidecarState.model_validate({"ready": True, "ready_reason": "ok", "dry_run": False,
                                         "source": "plugin", "model_error": rows,
                                         "borrowed_error": borrowed})
    text = render(state, "http://x:1", tty=False, now=0.0)
    assert "64\t0\t9000\t8000\t11.8%\t300\tyes" in text
    assert ("B up to 56: too few steps, borrows 11.8% (between 48 and 64); duels pair: no: the "
            "load passes through (entered under another k: no run can start)") in text
    assert "128\t0\t12000\t11000\t8.7%\t40\tno: the load passes through (3 runs unpaired)\n" in text
    # held too briefly says it all: no run would line up whether or not one could start
    assert ("120\t0\t12000\t11000\t8.7%\t16\tno: the load passes through "
            "(held too briefly for a run)\n") in text
    assert ("48\t0\t5000\t4000\t22.3%\t32\tno: the load passes through "
            "(entered under another k: no run can start)") in text
