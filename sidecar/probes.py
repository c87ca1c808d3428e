"""The sidecar's probes: liveness (/healthz) and readiness (/readyz), each with a reason.

Liveness is deliberately not "vLLM is up" (the kiwigrid staleness rule): it says the control
loop still turns, so a vLLM restart never restarts the sidecar. Readiness says the sidecar
can act on what it last saw: the engine connected, a complete scrape within READY_INTERVALS
intervals (plus one request timeout), and, unless dry-run, the last admin call answered.

The rules (:func:`readiness`, :func:`liveness`) take plain values and the loop's Heartbeat:
the routes ask Controller.readiness()/liveness(), which read a few timestamps and never build
the snapshot (a probe must stay cheap and must not fail on what the snapshot computes); the
snapshot (sidecar/state.py) publishes the same verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sidecar.settings import SidecarSettings

__all__ = ["READY_INTERVALS", "Heartbeat", "liveness", "readiness"]

READY_INTERVALS = 3
# the most admin requests one tick makes: a table read on a foreign version, a sync (read,
# policy, table) and a rebuild (read, push)
ADMIN_CALLS_PER_TICK = 6


@dataclass(slots=True)
class Heartbeat:
    """When the loop started, its last tick began and ended, and its current pause (back-off)."""

    started_at: float
    loop_delay_s: float
    tick_started: float | None = None
    tick_ended: float | None = None


def readiness(settings: SidecarSettings, connected: bool, has_admin: bool,
              scrape_age_s: float | None, conditions: Mapping[str, str]) -> tuple[bool, str]:
    """Ready: engine connected, a recent complete scrape, the admin endpoint answering.
    ``scrape_age_s``: seconds since the last complete scrape (None: none yet)."""
    if not connected:
        return False, f"waiting for the plugin's admin endpoint at {settings.admin_url}"
    scraped = conditions.get("scrape")
    if scrape_age_s is None:
        return False, (f"no complete scrape of {settings.engine_url}/metrics yet"
                       + (f" (the last one: {scraped})" if scraped else ""))
    allowance = READY_INTERVALS * settings.interval_s + settings.timeout_s
    if scrape_age_s > allowance:
        return False, (f"no complete scrape of {settings.engine_url}/metrics for "
                       f"{scrape_age_s:.1f} s (> {allowance:.1f} s); the last one: {scraped}")
    admin = conditions.get("admin")
    if has_admin and not settings.dry_run and admin != "ok":
        return False, (f"the last call to the plugin's admin endpoint at {settings.admin_url} "
                       f"failed ({admin}): the sidecar cannot write the table")
    return True, "ready"


def liveness(settings: SidecarSettings, now: float, beat: Heartbeat) -> tuple[bool, str]:
    """Live: a tick ended within 3 loop periods, or one is running within its budget.

    The loop period is interval_s, or the back-off delay (``loop_delay_s``) while vLLM keeps
    failing.
    """
    attempts, timeout_s = settings.retry_attempts, settings.timeout_s
    tick_started, tick_ended, loop_delay_s = beat.tick_started, beat.tick_ended, beat.loop_delay_s
    allowance = 3 * max(settings.interval_s, loop_delay_s)
    last = max(t for t in (beat.started_at, tick_started, tick_ended) if t is not None)
    if tick_started is not None and (tick_ended is None or tick_ended < tick_started):
        # in a tick: one scrape plus the admin requests, each with its retries (and waits)
        calls = ADMIN_CALLS_PER_TICK * attempts
        allowance += timeout_s * (1 + calls) + calls
    age = now - last
    if age > allowance:
        return False, f"the control loop has not ticked for {age:.1f} s (> {allowance:.1f} s)"
    return True, "ok"
