"""The API server's collector against a real admin server: fresh values, then the last good
values with their age while the engine does not answer, then a restart told by its start time;
and the same counters read from /v1/stats directly."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.vllm_patch.test_admin_fuzz import TOKEN, new_engine
from tuner.launcher import free_port
from vllm_patch.admin_server import serve
from tuner.core.admin_api import StatsReply
from tuner.core.scrape import from_stats, has_counters, parse
from vllm_patch.admin import stats_reply
from vllm_patch.metrics import PluginCollector, families


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items()
                                  if k not in ("model_name", "engine")))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_failed_fetch_serves_the_last_good_values_with_their_age(
        logs: list[logging.LogRecord]) -> None:
    port = free_port()
    engine = new_engine()
    engine.counters.record_request_step(3, 3, 2)
    clock = Clock()
    registry = CollectorRegistry()
    registry.register(PluginCollector(f"http://127.0.0.1:{port}/v1/stats", clock=clock))
    assert scrape(registry) == {}  # nothing fetched yet: nothing to serve

    server = serve(engine, "127.0.0.1", port, TOKEN)
    assert server is not None
    try:
        fresh = scrape(registry)
    finally:
        server.close()
    assert fresh[("tabletune_stats_age_seconds", ())] == 0.0
    assert fresh[("tabletune_engine_started_at_seconds", ())] == engine.started_at
    assert fresh[("tabletune_accepted_tokens_per_pos_total", (("position", "1"),))] == 1.0

    clock.now += 7.0
    stale = scrape(registry)  # the engine does not answer: same values, aged
    assert stale[("tabletune_stats_age_seconds", ())] == 7.0
    assert {k: v for k, v in stale.items() if k[0] != "tabletune_stats_age_seconds"} == \
        {k: v for k, v in fresh.items() if k[0] != "tabletune_stats_age_seconds"}
    clock.now += 2.0
    assert scrape(registry)[("tabletune_stats_age_seconds", ())] == 9.0

    restarted = new_engine()  # a restart: counters from zero, another start time
    restarted.started_at = engine.started_at + 60
    server = serve(restarted, "127.0.0.1", port, TOKEN)
    assert server is not None
    try:
        back = scrape(registry)
    finally:
        server.close()
    assert back[("tabletune_stats_age_seconds", ())] == 0.0
    assert back[("tabletune_engine_started_at_seconds", ())] == restarted.started_at
    assert back[("tabletune_accepted_tokens_per_pos_total", (("position", "1"),))] == 0.0
    # one line per state change: failing (before the first fetch), back, failing, back
    changes = [r.levelname for r in logs if "engine stats" in r.getMessage()]
    assert changes == ["WARNING", "INFO", "WARNING", "INFO"]


def test_the_plugins_stats_and_its_metrics_series_give_the_sidecar_the_same_counters() -> None:
    """The sidecar reads the counters from /v1/stats where it can (tuner/core/scrape.from_stats),
    else the plugin's series on /metrics (scrape.parse): the same engine gives the same values
    either way."""
    engine = new_engine()
    c = engine.counters
    for offered, drafted, accepted in ((3, 3, 2), (3, 1, 1), (3, 0, 0), (2, 2, 2), (0, 0, 0)):
        c.record_request_step(offered, drafted, accepted)
    for k, seconds in ((3, 0.012), (3, 0.011), (0, 0.008), (0, 0.009), (2, 0.010)):
        c.record_step(4, k, seconds, tokens=4, emitted=6)
    reply = stats_reply(engine)
    stock = ('vllm:spec_decode_num_drafts_total 3\nvllm:spec_decode_num_draft_tokens_total 8\n'
             'vllm:spec_decode_num_accepted_tokens_total 5\n' + "".join(
                 f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} 1\n'
                 for i in range(3)))
    registry = CollectorRegistry()
    registry.register(Families(reply))  # type: ignore[arg-type]
    via_metrics = parse(stock + generate_latest(registry).decode())
    via_stats = from_stats(StatsReply.model_validate(reply))
    assert has_counters(StatsReply.model_validate(reply))
    same = ("accepted_per_pos", "drafted_per_pos", "engine_steps", "request_steps", "step_time",
            "table_version", "explore_steps", "transition_steps", "engine_started_at",
            "resume_drafted_per_pos", "resume_accepted_per_pos", "proposed_per_pos", "finished",
            "accepted_source", "stats_age_s")
    assert {f: getattr(via_stats, f) for f in same} == {f: getattr(via_metrics, f) for f in same}
    assert via_stats.accepted_per_pos == (3.0, 2.0, 0.0) and via_stats.step_time
    assert via_stats.num_accepted_tokens == 5.0 and via_stats.num_drafts == 4.0  # exact, not stock


class Families:
    """The plugin's /metrics series from one /v1/stats reply, as the API server's collector
    serves them."""

    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply = reply

    def collect(self) -> Iterator[Metric]:
        yield from families(self.reply)
