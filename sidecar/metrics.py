"""The sidecar's own Prometheus series, built at scrape time from the controller's state.

| series | labels | meaning |
|---|---|---|
| tabletune_sidecar_acceptance | position | â_i (eq. â), position 0-based like vLLM's |
| tabletune_sidecar_prior_weight | | w, after any decay |
| tabletune_sidecar_live_drafted | position | live drafted_i since the last halving |
| tabletune_sidecar_table_k | table, batch_size_start, batch_size_end | k per range (engine, recommended) |
| tabletune_sidecar_rebuilds_total | outcome | rebuilds by outcome |
| tabletune_sidecar_pushes_total | | tables written to the engine (re-pushes included) |
| tabletune_sidecar_failures_total | kind | scrape_unavailable, scrape_unreadable, push_rejected, ... |
| tabletune_sidecar_engine_resets_total | | engine restarts seen |
| tabletune_sidecar_foreign_tables_total | | table changes by someone else (foreign_table events) |
| tabletune_sidecar_foreign_hold | | 1 while holding off after a foreign table |
| tabletune_sidecar_last_scrape_age_seconds | | since the last complete scrape (absent before one) |
| tabletune_sidecar_scrape_seconds | | summary of successful /metrics scrapes |
| tabletune_sidecar_step_time_drift_ratio | batch_size, k | live step time / profile T |
| tabletune_sidecar_ready, _estimate_biased | | 1/0 |
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import CollectorRegistry

from sidecar import probes
from sidecar.controller import Controller
from sidecar.estimator import estimate
from sidecar.rebuild import projected
from tuner.core.goodput import tau
from tuner.core.table import Table

__all__ = ["FAILURE_KINDS", "SidecarCollector", "registry_for"]

# exported at 0 from the start, so an alert's increase() has a series to watch
FAILURE_KINDS = frozenset({"scrape_unavailable", "scrape_unreadable", "scrape_incomplete",
                           "admin_unavailable", "push_failed", "push_rejected", "policy_rejected",
                           "checkpoint", "tick_error"})


Rows = list[tuple[list[str], float]]


def _family(cls: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str, doc: str,
            labels: list[str], rows: Rows) -> GaugeMetricFamily | CounterMetricFamily:
    family = cls(name, doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


def _gauge(name: str, doc: str, labels: list[str], rows: Rows) -> GaugeMetricFamily | CounterMetricFamily:
    return _family(GaugeMetricFamily, name, doc, labels, rows)


def _counter(name: str, doc: str, labels: list[str], rows: Rows) -> GaugeMetricFamily | CounterMetricFamily:
    return _family(CounterMetricFamily, name, doc, labels, rows)


def _table_rows(name: str, table: Table | None) -> list[tuple[list[str], float]]:
    if table is None:
        return []
    return [([name, str(start), str(end)], float(k)) for start, end, k in table.ranges]


def _goodput(c: Controller) -> list[tuple[list[str], float]]:
    if c.last_batch is None:
        return []
    B = min(max(int(round(c.last_batch)), 1), c.profile.engine.max_num_seqs)
    T = c.blend().T[B - 1]  # ms
    taus = tau(projected(c.state)[0])
    ks = range(len(T)) if c.allowed_k is None else sorted(c.allowed_k)
    return [([str(k), str(B)], float(B * taus[k] / T[k] * 1000.0)) for k in ks]


class SidecarCollector:
    """A prometheus Collector: everything is read from the controller when scraped."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        c = self.controller
        positions = [str(i) for i in range(c.K)]
        yield _gauge("tabletune_sidecar_acceptance", "Estimated acceptance a_i (eq. â).",
                     ["position"], list(zip(([p] for p in positions),
                                            estimate(c.state).tolist(), strict=True)))
        yield _gauge("tabletune_sidecar_live_drafted", "Live drafted_i since the last halving.",
                     ["position"], list(zip(([p] for p in positions),
                                            c.state.drafted.tolist(), strict=True)))
        yield _gauge("tabletune_sidecar_prior_weight", "Weight w of the prior.", [],
                     [([], c.state.w)])
        yield _gauge("tabletune_sidecar_prior_acceptance", "The profile's a_i (the prior).",
                     ["position"], list(zip(([p] for p in positions), c.prior.tolist(), strict=True)))
        yield _gauge("tabletune_sidecar_goodput_tokens_per_second", "Predicted goodput "
                     "G(B, k) = B·τ(k)/T̂(B, k) per k at the last interval's mean batch size B, "
                     "from â and the live step times.", ["k", "batch_size"], _goodput(c))
        yield _gauge("tabletune_sidecar_condition", "1 for each condition's current state "
                     "(scrape, admin, sync, drift, resume, checkpoint).", ["condition", "state"],
                     [([name, state], 1.0) for name, state in sorted(c.conditions.states.items())])
        engine = c.engine.info.parsed_table() if c.engine.info is not None else None
        yield _gauge("tabletune_sidecar_table_k", "k per range of the engine's table "
                     "(table=engine) and of the recommended one (table=recommended).",
                     ["table", "batch_size_start", "batch_size_end"],
                     _table_rows("engine", engine) + _table_rows("recommended", c.recommended))
        yield from self._counters()
        yield _gauge("tabletune_sidecar_step_time_drift_ratio",
                     "Live engine step time / the profile's T(B, k).", ["batch_size", "k"],
                     [([str(x.batch_size), str(x.k)], x.ratio) for x in c.drift_cells])
        yield _gauge("tabletune_sidecar_step_time_live_steps",
                     "Live steps behind T̂ per (B bucket, k) cell.", ["batch_size", "k"],
                     [([str(b), str(k)], n) for (b, k), n in sorted(c.live_T.steps.items())])
        yield _gauge("tabletune_sidecar_guardrail_trial", "1 while a pushed table is being "
                     "judged against live goodput before it.", [],
                     [([], float(c.guard.trial is not None))])
        yield _gauge("tabletune_sidecar_ready", "1 when /readyz answers 200.", [],
                     [([], float(probes.ready(c)[0]))])
        yield _gauge("tabletune_sidecar_foreign_hold", "1 while holding off after someone "
                     "else changed the engine's table.", [], [([], float(c.engine.holding()))])
        age = probes.scrape_age_s(c)
        yield _gauge("tabletune_sidecar_last_scrape_age_seconds", "Seconds since the last "
                     "complete vLLM /metrics scrape.", [], [] if age is None else [([], age)])
        yield _gauge("tabletune_sidecar_estimate_biased", "1 while counting from vLLM's stock "
                     "counters (no plugin): the estimate is biased low.", [],
                     [([], float(c.source == "stock"))])

    def _counters(self) -> Iterator[Metric]:
        s = self.controller.stats
        yield _counter("tabletune_sidecar_rebuilds", "Rebuilds by outcome.", ["outcome"],
                       [([o], float(n)) for o, n in sorted(s.rebuilds.items())])
        yield _counter("tabletune_sidecar_pushes", "Tables written to the engine.", [],
                       [([], float(s.pushes))])
        yield _counter("tabletune_sidecar_failures", "Failures by kind.", ["kind"],
                       [([k], float(s.failures.get(k, 0)))
                        for k in sorted(FAILURE_KINDS | set(s.failures))])
        yield _counter("tabletune_sidecar_engine_resets", "Engine restarts seen.", [],
                       [([], float(s.resets))])
        yield _counter("tabletune_sidecar_foreign_tables", "Engine table changes by someone "
                       "else.", [], [([], float(s.foreign_tables))])
        yield _counter("tabletune_sidecar_traffic_changes", "Changes of acceptance or step "
                       "time detected (each rebuilt at once).", [], [([], float(s.changes))])
        yield _counter("tabletune_sidecar_rollbacks", "Pushes the guardrail rolled back.", [],
                       [([], float(s.rollbacks))])
        yield SummaryMetricFamily("tabletune_sidecar_scrape_seconds",
                                  "Duration of successful vLLM /metrics scrapes.",
                                  count_value=s.scrapes, sum_value=s.scrape_seconds)


def registry_for(controller: Controller) -> CollectorRegistry:
    """A registry of our own (never the global one), so tests and processes stay isolated."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SidecarCollector(controller))
    return registry
