"""The sidecar's own counters, read by its /metrics (sidecar/metrics.py) and /v1/state."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["Stats"]


@dataclass(slots=True)
class Stats:
    """Counters for the sidecar's own /metrics."""

    rebuilds: Counter[str] = field(default_factory=Counter)  # by outcome
    failures: Counter[str] = field(default_factory=Counter)  # by kind
    pushes: int = 0
    changes: int = 0    # traffic changes detected (sidecar/change.py)
    rollbacks: int = 0  # pushes the guardrail rolled back (sidecar/guardrail.py)
    resets: int = 0
    foreign_tables: int = 0  # table changes by someone else (foreign_table events)
    scrapes: int = 0
    # a Summary's count and sum kept here, not in a prometheus_client.Summary: the scrape-time
    # collector (sidecar/metrics.py) builds every series from this one record, /v1/state too
    scrape_seconds: float = 0.0  # sum over successful scrapes
    last_scrape_seconds: float | None = None
    explore_steps: float = 0.0  # the plugin's exploration steps seen (across the allowed k)
    transition_steps: float = 0.0  # steps whose verified and drafted k differ (not timed)
