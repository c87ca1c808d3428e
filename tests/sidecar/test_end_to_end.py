"""The sidecar on the real vLLM CPU engine (session `engine` fixture: K=3, max_num_seqs=16).

The paper's repair experiment, small: start from a deliberately wrong table, drive greedy
repetitive traffic (high acceptance), and the sidecar rewrites the engine's table to the one
the profile's step times call for (trusted here: step_prior_weight 1e9, so this is the
acceptance half of the loop; live step times: test_online_engine.py). A dry run beside it only
recommends.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from sidecar.app import main
from tests.conftest import STARTUP_TABLE, Engine
from tests.helpers import burst
from tests.sidecar.fake_engine import make_profile, settings
from tuner.core.goodput import choose_table, interpolate_step_times
from tuner.prompts import repetitive
from tuner.core.table import Table, documented_table, shrink

pytestmark = pytest.mark.engine

TRAFFIC_BUDGET_S = 40.0  # per phase; two phases stay under the ~90 s traffic budget


@pytest_asyncio.fixture(autouse=True, loop_scope="session")
async def engine_defaults(engine: Engine) -> AsyncIterator[None]:
    yield
    assert (await engine.admin("PUT", "/v1/table", {"table": STARTUP_TABLE}))[0] == 200
    assert (await engine.admin("PUT", "/v1/policy", {"explore_every": 0, "hysteresis": 0}))[0] == 200
    assert (await engine.admin("PUT", "/v1/emulation", {"rates": [1.0, 1.0, 1.0]}))[0] == 200


def distance(a: Table, b: Table, max_num_seqs: int = 16, K: int = 3) -> int:
    """Sum over B of |k_a(B) - k_b(B)|."""
    return sum(abs(x - y) for x, y in zip(a.dense(max_num_seqs, K), b.dense(max_num_seqs, K),
                                          strict=True))


async def sidecar_state(port: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/v1/state") as r:
        state: dict[str, Any] = await r.json()
        return state


async def drive(engine: Engine, tmp_path: Path, *, dry_run: bool) -> dict[str, Any]:
    """Run the whole sidecar in-process under load until it has rebuilt; its final state."""
    profile_path = tmp_path / f"profile-{dry_run}.json"
    make_profile(model="tiny").save(profile_path)
    s = settings(profile_path, engine.url, engine.admin_url, admin_token=engine.token,
                 interval_s=0.25, rebuild_every_steps=40, prior_weight=100.0, explore_every=0,
                 hysteresis=0, timeout_s=2.0, dry_run=dry_run, step_prior_weight=1e9,
                 checkpoint=tmp_path / f"state-{dry_run}.json")
    stop, bound = asyncio.Event(), asyncio.get_running_loop().create_future()
    task = asyncio.create_task(main(s, stop, bound.set_result, handle_signals=False))
    try:
        port = await asyncio.wait_for(bound, 10)
        deadline = time.monotonic() + TRAFFIC_BUDGET_S
        seed = 0
        while (await sidecar_state(port))["last_decision"] is None:
            assert time.monotonic() < deadline, "no rebuild within the traffic budget"
            await burst(engine.url, repetitive(16, engine.vocab_size, seed=seed), max_tokens=48)
            seed += 1
            await asyncio.sleep(2 * s.interval_s)  # let the sidecar scrape the tail
        state = await sidecar_state(port)
        # what an operator types first: the real command against the running sidecar
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tabletune.cli", "status", "--sidecar",
            f"http://127.0.0.1:{port}", "--format", "plain", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err
        text = out.decode()
        assert f"engine table v{state['engine_table_version']}: " in text
        assert "\tdry_run\t" in text if dry_run else "\tpushed\t" in text, text
        return state
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 5) == 0


async def test_sidecar_repairs_a_wrong_table_and_dry_run_only_recommends(
        engine: Engine, tmp_path: Path) -> None:
    profile = make_profile(model="tiny")
    # the table the profile's step times call for at the prior's acceptance (k=3 to B=8, then
    # k=1); greedy repetitive traffic keeps live acceptance high, so the sidecar heads there
    T = interpolate_step_times(profile.grid, profile.step_time_matrix(), 16)
    tuned = choose_table(T, profile.acceptance.a, 0.005, {1, 3}).table
    wrong = shrink(documented_table(3, 16))
    if wrong == tuned:
        wrong = Table.from_list([[1, 16, 0]])
    assert distance(wrong, tuned) > 0, (wrong, tuned)

    # dry run: a recommendation in /v1/state, the engine's table untouched
    _, before = await engine.admin("PUT", "/v1/table", {"table": wrong.to_list()})
    state = await drive(engine, tmp_path, dry_run=True)
    _, after = await engine.admin("GET", "/v1/table")
    assert after["version"] == before["version"] and after["table"] == wrong.to_list()
    assert state["last_decision"]["outcome"] == "dry_run"
    assert state["source"] == "plugin" and state["bias_note"] is None
    assert state["recommended_table"] == state["last_decision"]["new_table"]
    assert distance(Table.from_list(state["recommended_table"]), tuned) < distance(wrong, tuned)

    # the real thing: the engine's table is rewritten toward the profile's table
    state = await drive(engine, tmp_path, dry_run=False)
    _, after = await engine.admin("GET", "/v1/table")
    new = Table.from_list(after["table"])
    assert new == tuned or distance(new, tuned) < distance(wrong, tuned), (state["last_decision"])
    assert state["last_decision"]["outcome"] == "pushed"
    assert min(state["a_hat"]) > 0.5  # greedy repetitive traffic: high live acceptance


async def test_chat_completions_answer_200(engine: Engine) -> None:
    """The tiny model has a chat template, so the demo's vLLM serves chat too (issue #15.6)."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "def count"}],
            "max_tokens": 8, "temperature": 0.0}
    async with aiohttp.ClientSession() as s, s.post(engine.url + "/v1/chat/completions",
                                                    json=body) as r:
        reply = await r.json()
    assert r.status == 200, reply
    (choice,) = reply["choices"]
    assert choice["message"]["role"] == "assistant" and reply["usage"]["completion_tokens"] > 0
