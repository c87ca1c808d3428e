"""Publish the plugin's counters on vLLM's own /metrics (API-server process).

The counters live in EngineCore; /metrics is served by the API server. A prometheus-client
Collector registered in the API server fetches the engine's `/v1/stats` at scrape time, so the
sidecar (or Prometheus) reads everything from one endpoint, with vLLM's model_name/engine labels.
A failed fetch yields no plugin series for that scrape (logged once per state change).
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

log = logging.getLogger("vllm.tabletune")
FETCH_TIMEOUT_S = 0.5


class PluginCollector:
    def __init__(self, stats_url: str) -> None:
        self.stats_url = stats_url
        self.failing = False

    def fetch(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(self.stats_url, timeout=FETCH_TIMEOUT_S) as r:
                stats: dict[str, Any] = json.load(r)
        except (OSError, ValueError) as exc:
            if not self.failing:
                log.warning("TableTune: engine stats unavailable at %s (%s); plugin series are "
                            "missing from /metrics until it answers", self.stats_url, exc)
            self.failing = True
            return None
        if self.failing:
            log.info("TableTune: engine stats are back")
        self.failing = False
        return stats

    def collect(self) -> Iterator[Metric]:
        stats = self.fetch()
        if stats is not None:
            yield from families(stats)


def families(s: dict[str, Any]) -> Iterator[Metric]:
    base = [s["model_name"], "0"]
    names = ["model_name", "engine"]

    def counter(name: str, doc: str, extra: list[str], rows: list[tuple[list[str], float]]) -> Metric:
        m = CounterMetricFamily(name, doc, labels=names + extra)
        for labels, value in rows:
            m.add_metric(base + labels, value)
        return m

    yield counter("vllm:spec_decode_num_draft_tokens_per_pos",
                  "Request-steps offered a draft length > position (empty drafts included).",
                  ["position"], [([str(i)], v) for i, v in enumerate(s["drafted_per_pos"])])
    yield counter("tabletune_accepted_tokens_per_pos",
                  "Request-steps whose first position+1 drafts were all accepted.",
                  ["position"], [([str(i)], v) for i, v in enumerate(s["accepted_per_pos"])])
    yield counter("tabletune_request_steps", "Request-steps per offered K.", ["k"],
                  [([k], v) for k, v in s["request_steps_per_k"].items()])
    yield counter("tabletune_engine_steps", "Engine steps per scheduled K.", ["k"],
                  [([k], v) for k, v in s["engine_steps_per_k"].items()])
    yield counter("tabletune_spec_hist", "Request-steps per (drafted, accepted).",
                  ["drafted", "accepted"], [([str(d), str(a)], n) for d, a, n in s["histogram"]])
    yield counter("tabletune_step_seconds", "Engine step wall time per (batch-size bucket, K).",
                  ["batch_size", "k"], [([str(b), str(k)], sec) for b, k, sec, _ in s["step_times"]])
    yield counter("tabletune_steps_timed", "Timed engine steps per (batch-size bucket, K).",
                  ["batch_size", "k"], [([str(b), str(k)], n) for b, k, _, n in s["step_times"]])
    yield counter("tabletune_explore_steps", "Exploration steps run at the largest K.", [],
                  [([], s["explore_steps"])])
    yield counter("tabletune_hook_errors", "Hook failures that fell back to vLLM's behaviour.", [],
                  [([], s["hook_errors"])])
    version = GaugeMetricFamily("tabletune_table_version", "Version of the engine's DSD table.",
                                labels=names)
    version.add_metric(base, s["table_version"])
    yield version
