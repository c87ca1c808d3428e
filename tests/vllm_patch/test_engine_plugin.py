"""The plugin inside a real vLLM CPU engine: swap, validation, exploration, hysteresis,
token, reject-all and the acceptance emulator, all seen in the engine's own counters."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import STARTUP_TABLE, Engine
from tests.helpers import burst, delta
from tuner.prompts import repetitive

pytestmark = pytest.mark.engine


@pytest_asyncio.fixture(autouse=True, loop_scope="session")
async def engine_defaults(engine: Engine) -> AsyncIterator[None]:
    yield
    assert (await engine.admin("PUT", "/v1/table", {"table": STARTUP_TABLE}))[0] == 200
    assert (await engine.admin("PUT", "/v1/policy", {"explore_every": 0, "explore_run": 3,
                                                    "hysteresis": 0, "baseline": "none",
                                                    "explore_ks": []}))[0] == 200
    assert (await engine.admin("PUT", "/v1/emulation", {"rates": [1.0, 1.0, 1.0]}))[0] == 200


def prompts(engine: Engine, n: int, seed: int = 0) -> list:
    return repetitive(n, engine.vocab_size, seed=seed)


async def test_get_table_describes_the_engine(engine: Engine) -> None:
    status, body = await engine.admin("GET", "/v1/table")
    assert status == 200
    assert body["table"] == STARTUP_TABLE
    assert body["num_speculative_tokens"] == 3 and body["max_num_seqs"] == 16
    assert body["startup_k"] == [1, 3]


async def test_swap_changes_the_scheduled_k_at_the_next_step(engine: Engine) -> None:
    status, body = await engine.admin("PUT", "/v1/table", {"table": [[1, 16, 2]]})
    assert status == 200 and body["table"] == [[1, 16, 2]]
    before = await engine.stats()
    await burst(engine.url, prompts(engine, 1), max_tokens=16)
    after = await engine.stats()
    steps = delta(after, before, "engine_steps_per_k")
    assert steps.get("2", 0) >= 3 and steps.get("3", 0) == 0 and steps.get("1", 0) == 0
    assert after["swap_latency_s"] is not None and after["swap_latency_s"] < 5.0


@pytest.mark.parametrize("table, field_text", [
    ([[1, 16, 4]], "exceeds num_speculative_tokens=3"),
    ([[2, 16, 1]], "start"),
    ([[1, 8, 3], [6, 16, 1]], "overlap"),
    ("not a table", "table"),
])
async def test_invalid_table_is_rejected_and_the_old_one_stays(engine: Engine, table: object,
                                                                field_text: str) -> None:
    _, before = await engine.admin("GET", "/v1/table")
    status, body = await engine.admin("PUT", "/v1/table", {"table": table})
    assert status == 422, body
    assert field_text in body["error"]
    _, after = await engine.admin("GET", "/v1/table")
    assert after["table"] == before["table"] and after["version"] == before["version"]


async def test_unknown_fields_bad_json_and_routes(engine: Engine) -> None:
    assert (await engine.admin("PUT", "/v1/table", {"table": STARTUP_TABLE, "x": 1}))[0] == 422
    assert (await engine.admin("PUT", "/v1/policy", {"explore_every": -1}))[0] == 422
    assert (await engine.admin("GET", "/v1/nothing"))[0] == 404


async def test_mutations_need_the_token(engine: Engine) -> None:
    status, body = await engine.admin("PUT", "/v1/table", {"table": [[1, 16, 1]]}, token=None)
    assert status == 401 and "token" in body["error"]
    status, _ = await engine.admin("PUT", "/v1/table", {"table": [[1, 16, 1]]}, token="wrong")
    assert status == 401
    _, table = await engine.admin("GET", "/v1/table", token=None)  # reads stay open
    assert table["table"] == STARTUP_TABLE


async def test_exploration_runs_time_and_offer_every_allowed_k(engine: Engine) -> None:
    await engine.admin("PUT", "/v1/table", {"table": [[1, 16, 1]]})
    # half the steps explore: the budget all exploration shares (duel_share of any
    # duel_horizon steps) must allow it, or the rotation's steps run the table instead
    status, policy = await engine.admin("PUT", "/v1/policy", {
        "explore_every": 6, "explore_run": 3, "duel_share": 0.5, "duel_horizon": 100})
    assert status == 200 and policy["explore_run"] == 3
    before = await engine.stats()
    await burst(engine.url, prompts(engine, 2, seed=3), max_tokens=96)
    after = await engine.stats()
    # steady steps (k verified == k drafted) timed at every allowed k: the middle of each run
    timed = [Counter(), Counter()]
    for counts, stats in zip(timed, (after, before)):
        for _, k, _, n in stats["step_times"]:
            counts[k] += n
    assert {k for k, n in (timed[0] - timed[1]).items() if n > 0} == {0, 1, 2, 3}
    offered = delta(after, before, "request_steps_per_k")
    assert all(offered.get(str(k), 0) > 0 for k in range(4)), offered
    assert delta(after, before, "drafted_per_pos")[2] > 0  # k=3 drafted while the table says 1
    assert delta(after, before, "explore_steps") > 0
    assert after["current_k"] == 1  # exploration never becomes the hysteresis memory
    await engine.admin("PUT", "/v1/policy", {"duel_share": 0.02, "duel_horizon": 10_000})


async def test_the_rotation_visits_only_explore_ks_on_the_engine(engine: Engine) -> None:
    """The sidecar leaves out of the rotation the k's that cannot win (issue #34 item 4): on
    the engine no step runs them, while the rotation still runs the others."""
    await engine.admin("PUT", "/v1/table", {"table": [[1, 16, 1]]})
    status, policy = await engine.admin("PUT", "/v1/policy", {
        "explore_every": 6, "explore_run": 3, "duel_share": 0.5, "duel_horizon": 100,
        "explore_ks": [2]})
    assert status == 200 and policy["explore_ks"] == [2]
    before = await engine.stats()
    await burst(engine.url, prompts(engine, 2, seed=3), max_tokens=96)
    after = await engine.stats()
    steps = delta(after, before, "engine_steps_per_k")
    assert steps.get("2", 0) > 0 and steps.get("0", 0) == 0 and steps.get("3", 0) == 0, steps
    assert delta(after, before, "explore_steps") > 0
    await engine.admin("PUT", "/v1/policy", {"duel_share": 0.02, "duel_horizon": 10_000})


async def test_hysteresis_holds_k_at_an_edge(engine: Engine) -> None:
    # Table edge at B=4 (K=3 below, K=1 above). With h=3, a batch of 6 keeps K=3.
    await engine.admin("PUT", "/v1/policy", {"hysteresis": 3})
    await burst(engine.url, prompts(engine, 1), max_tokens=4)  # current K = 3
    before = await engine.stats()
    await burst(engine.url, prompts(engine, 6, seed=5), max_tokens=24)
    after = await engine.stats()
    steps = delta(after, before, "engine_steps_per_k")
    assert steps.get("1", 0) == 0 and steps.get("3", 0) > 0
    # Control: without hysteresis the same burst runs at K=1.
    await engine.admin("PUT", "/v1/policy", {"hysteresis": 0})
    before = await engine.stats()
    await burst(engine.url, prompts(engine, 6, seed=5), max_tokens=24)
    steps = delta(await engine.stats(), before, "engine_steps_per_k")
    assert steps.get("1", 0) > 0


async def test_reject_all_keeps_the_batch_in_lockstep(engine: Engine) -> None:
    await engine.admin("PUT", "/v1/table", {"table": [[1, 16, 3]]})
    status, body = await engine.admin("PUT", "/v1/emulation", {"rates": [0.0, 0.0, 0.0]})
    assert status == 200 and body["rates"] == [0.0, 0.0, 0.0]
    before = await engine.stats()
    max_tokens = 20
    replies = await burst(engine.url, prompts(engine, 4, seed=9), max_tokens=max_tokens)
    after = await engine.stats()
    assert all(r["usage"]["completion_tokens"] == max_tokens for r in replies)
    assert delta(after, before, "accepted_per_pos") == [0, 0, 0]
    assert min(delta(after, before, "drafted_per_pos")) > 0
    # One token per request per step: 4 requests of 20 tokens take ~20 steps (+1 if the
    # requests arrived over two steps), never fewer.
    steps = sum(delta(after, before, "engine_steps_per_k").values())
    assert max_tokens <= steps <= max_tokens + 2


async def test_emulator_replays_an_acceptance_profile(engine: Engine) -> None:
    await engine.admin("PUT", "/v1/table", {"table": [[1, 16, 3]]})
    rates = [0.7, 0.5, 0.3]
    assert (await engine.admin("PUT", "/v1/emulation", {"rates": rates}))[0] == 200
    before = await engine.stats()
    await burst(engine.url, prompts(engine, 8, seed=11), max_tokens=64)
    after = await engine.stats()
    drafted = delta(after, before, "drafted_per_pos")
    accepted = delta(after, before, "accepted_per_pos")
    measured = [a / d for a, d in zip(accepted, drafted)]
    assert drafted[0] > 100
    for got, want in zip(measured, rates):
        assert abs(got - want) < 0.12, (measured, rates)
    assert (await engine.admin("PUT", "/v1/emulation", {"rates": [0.5, 0.6]}))[0] == 422


async def test_nightjar_baseline_learns_per_batch_size(engine: Engine) -> None:
    await engine.admin("PUT", "/v1/table", {"table": [[1, 16, 3]]})
    status, body = await engine.admin("PUT", "/v1/policy", {"baseline": "nightjar"})
    assert status == 200 and body["baseline"] == "nightjar"
    before = await engine.stats()
    await burst(engine.url, prompts(engine, 4, seed=13), max_tokens=40)
    after = await engine.stats()
    steps = delta(after, before, "engine_steps_per_k")
    assert sum(1 for n in steps.values() if n > 0) >= 2  # it tried more than the table's k=3
    bandit = after["bandit"]
    # a step that only prefilled delivers no token: its arm's reward is 0, not an error
    assert bandit and all(mean >= 0 for _, _, mean, _ in bandit)
    assert len({k for _, k, mean, _ in bandit if mean > 0}) >= 2  # learned from tokens delivered
    assert (await engine.admin("PUT", "/v1/policy", {"baseline": "none"}))[1]["baseline"] is None


async def test_metrics_carry_the_engine_start_and_the_age_of_the_values(engine: Engine) -> None:
    stats = await engine.stats()
    async with aiohttp.ClientSession() as s, s.get(engine.url + "/metrics") as r:
        text = await r.text()
    gauges = {smp.name: smp.value for fam in text_string_to_metric_families(text)
              for smp in fam.samples if smp.name.startswith("tabletune_")}
    assert gauges["tabletune_engine_started_at_seconds"] == stats["started_at"]
    assert gauges["tabletune_stats_age_seconds"] == 0.0


async def test_recent_steps_are_exact_per_step_samples(engine: Engine) -> None:
    before = await engine.stats()
    since = sum(before["engine_steps_per_k"].values())
    await engine.admin("PUT", "/v1/table", {"table": [[1, 16, 2]]})
    replies = await burst(engine.url, prompts(engine, 2, seed=21), max_tokens=24)
    status, after = await engine.admin("GET", f"/v1/stats?since={since}")
    assert status == 200
    # (seq, B, k verified, k drafted, seconds, tokens, emitted, cycle)
    steps = after["recent_steps"]
    assert steps[0][0] == since + 1 and steps[-1][0] == sum(after["engine_steps_per_k"].values())
    for prev, cur in itertools.pairwise(steps):
        assert cur[0] == prev[0] + 1 and cur[2] == prev[3]  # verifies what the step before drafted
    assert all(k == 2 and seconds > 0 and 1 <= b <= 2 and tokens >= b and 0 <= emitted <= b * 3
               for _, b, _, k, seconds, tokens, emitted, _ in steps)
    # the engine's cycle holds the step's own execution (the first one after an idle spell
    # holds the idle time too)
    assert all(cycle >= seconds for *_, seconds, _, _, cycle in steps[1:])
    # what the steps emitted is every token the requests got: realized goodput's numerator
    assert sum(s[6] for s in steps) == sum(r["usage"]["completion_tokens"] for r in replies)
    steady = sum(1 for s in steps if s[2] == s[3])
    assert delta(after, before, "transition_steps") == len(steps) - steady
    timed = [sum(row[3] for row in s["step_times"]) for s in (after, before)]
    assert timed[0] - timed[1] == steady
    assert (await engine.admin("GET", "/v1/stats?since=x"))[0] == 422
