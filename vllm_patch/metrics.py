"""Publish the plugin's counters on vLLM's own /metrics (API-server process).

The counters live in EngineCore; /metrics is served by the API server. A prometheus-client
Collector registered in the API server fetches the engine's `/v1/stats` at scrape time, so the
sidecar (or Prometheus) reads everything from one endpoint, with vLLM's model_name/engine labels.

A failed fetch (the engine is busy, restarting, or its admin thread is slow) serves the last good
values again, so the series never vanish: a consumer must not read a missing series as an engine
restart. Two gauges say what it got:
- `tabletune_stats_age_seconds`: age of the values served (0 when this scrape fetched them);
- `tabletune_engine_started_at_seconds`: the engine's start time (stats.started_at), which
  changes exactly when the engine restarted, so a counter that went down with the same start
  time is a stale scrape, never a restart.
Failures are logged once per state change (failing, then back).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tuner.core.admin_api import NO_STEPS

log = logging.getLogger("vllm.tabletune")
FETCH_TIMEOUT_S = 0.5


class PluginCollector:
    """Scrape-time collector: the engine's stats, or the last good ones with their age."""

    def __init__(self, stats_url: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.stats_url = stats_url
        self.clock = clock
        self.failing = False
        self.last: dict[str, Any] | None = None
        self.last_at = 0.0  # clock() of the last good fetch

    def fetch(self) -> dict[str, Any] | None:
        """The engine's stats now; None (logged once per state change) when they do not come."""
        try:
            # past any step's seq: the per-step ring (~300 kB of JSON, encoded on the engine's
            # admin thread) is not exported, so none of it travels
            with urllib.request.urlopen(f"{self.stats_url}?since={NO_STEPS}",
                                        timeout=FETCH_TIMEOUT_S) as r:
                stats: dict[str, Any] = json.load(r)
        except (OSError, ValueError) as exc:
            if not self.failing:
                log.warning("TableTune: engine stats unavailable at %s (%s); /metrics serves "
                            "the last good values, aged by tabletune_stats_age_seconds, until "
                            "it answers", self.stats_url, exc)
            self.failing = True
            return None
        if self.failing:
            log.info("TableTune: engine stats are back")
        self.failing = False
        return stats

    def collect(self) -> Iterator[Metric]:
        """The plugin's series (prometheus-client calls this at every scrape)."""
        stats = self.fetch()
        now = self.clock()
        if stats is not None:
            self.last, self.last_at = stats, now
        if self.last is None:  # never fetched: nothing to serve yet
            return
        yield from families(self.last, age_s=max(0.0, now - self.last_at) if stats is None else 0.0)


def families(s: dict[str, Any], age_s: float = 0.0) -> Iterator[Metric]:
    """The plugin's series from one /v1/stats reply, served `age_s` seconds after it came:
    the counters here, then the gauges."""
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
    yield counter("tabletune_step_seconds",
                  "Wall time of steady engine steps (k verified == k drafted) per (batch-size "
                  "bucket, k).",
                  ["batch_size", "k"], [([str(b), str(k)], sec) for b, k, sec, _ in s["step_times"]])
    yield counter("tabletune_steps_timed", "Timed steady engine steps per (batch-size bucket, k).",
                  ["batch_size", "k"], [([str(b), str(k)], n) for b, k, _, n in s["step_times"]])
    yield counter("tabletune_transition_steps",
                  "Engine steps whose verified k (the previous step's) and drafted k differ; "
                  "not in tabletune_step_seconds.", [], [([], s["transition_steps"])])
    yield counter("tabletune_resume_draft_tokens_per_pos",
                  "Request-steps offered a draft length > position right after a K=0 stretch "
                  "(>= 4 steps that drafted nothing).", ["position"],
                  [([str(i)], v) for i, v in enumerate(s.get("resume_drafted_per_pos", []))])
    yield counter("tabletune_resume_accepted_tokens_per_pos",
                  "... whose first position+1 drafts were all accepted.", ["position"],
                  [([str(i)], v) for i, v in enumerate(s.get("resume_accepted_per_pos", []))])
    if s.get("finished_proposed") is not None:
        yield counter("tabletune_finished_requests", "Requests finished (their drafts counted in "
                      "tabletune_finished_*).", [], [([], s["finished_requests"])])
        yield counter("tabletune_finished_proposed", "Request-steps with a proposal, of finished "
                      "requests (a long request in pieces of 256).", [],
                      [([], s["finished_proposed"])])
        yield counter("tabletune_finished_accepted", "... whose first draft was kept.", [],
                      [([], s["finished_accepted"])])
    yield counter("tabletune_explore_steps", "Steps of exploration runs (at a k other than the "
                  "table's).", [],
                  [([], s["explore_steps"])])
    yield counter("tabletune_hook_errors", "Hook failures that fell back to vLLM's behaviour.", [],
                  [([], s["hook_errors"])])
    yield from gauges(s, age_s)


def gauges(s: dict[str, Any], age_s: float) -> Iterator[Metric]:
    """The plugin's gauges from one /v1/stats reply, served `age_s` seconds after it came."""
    base = [s["model_name"], "0"]

    def gauge(name: str, doc: str, value: float) -> Metric:
        m = GaugeMetricFamily(name, doc, labels=["model_name", "engine"])
        m.add_metric(base, value)
        return m

    yield gauge("tabletune_table_version", "Version of the engine's DSD table.", s["table_version"])
    yield gauge("tabletune_engine_started_at_seconds",
                "Wall-clock start of the engine these values come from (changes on a restart).",
                s["started_at"])
    yield gauge("tabletune_stats_age_seconds",
                "Age of the plugin values served (0: fetched by this scrape; > 0: the engine's "
                "stats did not answer and the last good values are served again).", age_s)
