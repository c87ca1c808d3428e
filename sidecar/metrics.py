"""The sidecar's own Prometheus series, built at scrape time from one SidecarState snapshot.

| series | labels | meaning |
|---|---|---|
| tabletune_sidecar_acceptance | position | â_i (eq. â), position 0-based like vLLM's |
| tabletune_sidecar_prior_weight | | w, after any decay |
| tabletune_sidecar_live_drafted | position | live drafted_i since the last halving |
| tabletune_sidecar_table_k | table, batch_size_start, batch_size_end | k per range (first TABLE_K_RANGES) |
| tabletune_sidecar_table_ranges | table | ranges in the table (engine, recommended) |
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

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import CollectorRegistry

from sidecar.counters import Stats
from sidecar.state import SidecarState

__all__ = ["FAILURE_KINDS", "TABLE_K_RANGES", "SidecarCollector", "registry_for"]

# exported at 0 from the start, so an alert's increase() has a series to watch
FAILURE_KINDS = frozenset({"scrape_unavailable", "scrape_unreadable", "scrape_incomplete",
                           "admin_unavailable", "push_failed", "push_rejected", "policy_rejected",
                           "checkpoint", "tick_error"})


Rows = list[tuple[list[str], float]]

# per-range series of a table: a table of many ranges (one PUT) must not multiply the series
TABLE_K_RANGES = 32


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


def _table_rows(name: str, table: list[list[int]] | None) -> Rows:
    if table is None:
        return []
    return [([name, str(start), str(end)], float(k)) for start, end, k in table[:TABLE_K_RANGES]]


def _range_counts(tables: dict[str, list[list[int]] | None]) -> Rows:
    return [([name], float(len(table))) for name, table in tables.items() if table is not None]


class SidecarCollector:
    """A prometheus Collector: every series is read from one snapshot, taken when scraped."""

    def __init__(self, snapshot: Callable[[], SidecarState]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        state = self.snapshot()
        process = state.in_process()
        positions = [str(i) for i in range(len(state.a_hat))]
        yield _gauge("tabletune_sidecar_acceptance", "Estimated acceptance a_i (eq. â).",
                     ["position"], list(zip(([p] for p in positions), state.a_hat, strict=True)))
        yield _gauge("tabletune_sidecar_live_drafted", "Live drafted_i since the last halving.",
                     ["position"], list(zip(([p] for p in positions), state.estimator.drafted,
                                            strict=True)))
        yield _gauge("tabletune_sidecar_prior_weight", "Weight w of the prior.", [],
                     [([], state.estimator.w)])
        yield _gauge("tabletune_sidecar_prior_acceptance", "The profile's a_i (the prior).",
                     ["position"], list(zip(([p] for p in positions), state.prior_acceptance,
                                            strict=True)))
        yield _gauge("tabletune_sidecar_goodput_tokens_per_second", "Predicted goodput "
                     "G(B, k) = B·τ(k)/T̂(B, k) per k at the last interval's mean batch size B, "
                     "from â and the live step times.", ["k", "batch_size"],
                     [([str(g.k), str(g.batch_size)], g.tokens_per_s) for g in process.goodput])
        yield _gauge("tabletune_sidecar_condition", "1 for each condition's current state "
                     "(scrape, admin, sync, drift, resume, checkpoint).", ["condition", "state"],
                     [([name, s], 1.0) for name, s in sorted(state.conditions.items())])
        yield _gauge("tabletune_sidecar_table_k", "k per range of the engine's table "
                     "(table=engine) and of the recommended one (table=recommended), the first "
                     f"{TABLE_K_RANGES} ranges of each.",
                     ["table", "batch_size_start", "batch_size_end"],
                     _table_rows("engine", state.engine_table)
                     + _table_rows("recommended", state.recommended_table))
        yield _gauge("tabletune_sidecar_table_ranges", "Ranges in the engine's and the "
                     f"recommended table (above {TABLE_K_RANGES}, table_k shows only the first).",
                     ["table"], _range_counts({"engine": state.engine_table,
                                               "recommended": state.recommended_table}))
        yield from self._counters(process.stats)
        yield _gauge("tabletune_sidecar_step_time_drift_ratio",
                     "Live engine step time / the profile's T(B, k).", ["batch_size", "k"],
                     [([str(x.batch_size), str(x.k)], x.ratio) for x in state.drift])
        yield _gauge("tabletune_sidecar_step_time_live_steps",
                     "Live steps behind T̂ per (B bucket, k) cell.", ["batch_size", "k"],
                     [([str(c.batch_size), str(c.k)], c.steps) for c in state.step_times.live])
        yield _gauge("tabletune_sidecar_guardrail_trial", "1 while a pushed table is being "
                     "judged against live goodput before it.", [],
                     [([], float(state.guardrail.judging))])
        yield _gauge("tabletune_sidecar_ready", "1 when /readyz answers 200.", [],
                     [([], float(state.ready))])
        yield _gauge("tabletune_sidecar_foreign_hold", "1 while holding off after someone "
                     "else changed the engine's table.", [], [([], float(state.foreign_hold is not None))])
        age = process.scrape_age_s
        yield _gauge("tabletune_sidecar_last_scrape_age_seconds", "Seconds since the last "
                     "complete vLLM /metrics scrape.", [], [] if age is None else [([], age)])
        yield _gauge("tabletune_sidecar_estimate_biased", "1 while counting from vLLM's stock "
                     "counters (no plugin): the estimate is biased low.", [],
                     [([], float(state.source == "stock"))])

    @staticmethod
    def _counters(s: Stats) -> Iterator[Metric]:
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


def registry_for(snapshot: Callable[[], SidecarState]) -> CollectorRegistry:
    """A registry of our own (never the global one), so tests and processes stay isolated;
    ``snapshot``: Controller.snapshot."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SidecarCollector(snapshot))
    return registry
