"""The API server's collector against a real admin server: fresh values, then the last good
values with their age while the engine does not answer, then a restart told by its start time."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.vllm_patch.test_admin_fuzz import TOKEN, new_engine
from tuner.launcher import free_port
from vllm_patch.admin_server import serve
from vllm_patch.metrics import PluginCollector


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
