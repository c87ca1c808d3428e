"""The sidecar's own counters, read by its /metrics (sidecar/metrics.py) and /v1/state.

Each count has the one method that moves it, so the controller and the engine table say what
happened (``stats.failed("push_rejected")``) and never write the record's fields themselves.
A pydantic model, so that the published snapshot (sidecar/state.py) holds a typed copy.
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field

__all__ = ["Stats"]


class Stats(BaseModel):
    """Counters for the sidecar's own /metrics."""

    rebuilds: Counter[str] = Field(default_factory=Counter)  # by outcome
    failures: Counter[str] = Field(default_factory=Counter)  # by kind
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

    def scraped(self, seconds: float) -> None:
        """A successful scrape of vLLM's /metrics that took ``seconds``."""
        self.scrapes += 1
        self.scrape_seconds += seconds
        self.last_scrape_seconds = seconds

    def failed(self, kind: str) -> None:
        """A failure by kind (sidecar/metrics.FAILURE_KINDS, or a new kind)."""
        self.failures[kind] += 1

    def rebuilt(self, outcome: str) -> None:
        self.rebuilds[outcome] += 1

    def pushed(self) -> None:
        """A table written to the engine (re-pushes included)."""
        self.pushes += 1

    def traffic_changed(self) -> None:
        """A change of traffic detected."""
        self.changes += 1

    def rolled_back(self) -> None:
        self.rollbacks += 1

    def engine_restarted(self) -> None:
        """An engine restart seen."""
        self.resets += 1

    def foreign_table(self) -> None:
        """A table change by someone else."""
        self.foreign_tables += 1

    def stepped(self, explore: float, transition: float) -> None:
        """One interval's exploration and transition steps."""
        self.explore_steps += explore
        self.transition_steps += transition
