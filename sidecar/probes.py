"""The sidecar's probes: liveness (/healthz) and readiness (/readyz), each with a reason.

Liveness is deliberately not "vLLM is up" (the kiwigrid staleness rule): it says the control
loop still turns, so a vLLM restart never restarts the sidecar. Readiness says the sidecar
can act on what it last saw: the engine connected, a complete scrape within READY_INTERVALS
intervals (plus one request timeout), and, unless dry-run, the last admin call answered.
"""

from __future__ import annotations

from sidecar.controller import Controller

__all__ = ["READY_INTERVALS", "health", "ready", "scrape_age_s"]

READY_INTERVALS = 3
# the most admin requests one tick makes: a table read on a foreign version, a sync (read,
# policy, table) and a rebuild (read, push)
ADMIN_CALLS_PER_TICK = 6


def scrape_age_s(c: Controller) -> float | None:
    """Seconds since the last complete scrape (None: none yet)."""
    return None if c.last_scrape_ok_at is None else c.clock() - c.last_scrape_ok_at


def ready(c: Controller) -> tuple[bool, str]:
    """Ready: engine connected, a recent complete scrape, the admin endpoint answering."""
    if not c.engine.is_connected:
        return False, f"waiting for the plugin's admin endpoint at {c.settings.admin_url}"
    age = scrape_age_s(c)
    scraped = c.conditions.states.get("scrape")
    if age is None:
        return False, (f"no complete scrape of {c.settings.engine_url}/metrics yet"
                       + (f" (the last one: {scraped})" if scraped else ""))
    allowance = READY_INTERVALS * c.settings.interval_s + c.settings.timeout_s
    if age > allowance:
        return False, (f"no complete scrape of {c.settings.engine_url}/metrics for {age:.1f} s "
                       f"(> {allowance:.1f} s); the last one: {scraped}")
    admin = c.conditions.states.get("admin")
    if c.engine.has_admin and not c.settings.dry_run and admin != "ok":
        return False, (f"the last call to the plugin's admin endpoint at {c.settings.admin_url} "
                       f"failed ({admin}): the sidecar cannot write the table")
    return True, "ready"


def health(c: Controller) -> tuple[bool, str]:
    """Live: a tick ended within 3 loop periods, or one is running within its budget.

    The loop period is interval_s, or the back-off delay while vLLM keeps failing.
    """
    attempts, timeout_s = c.settings.retry_attempts, c.settings.timeout_s
    allowance = 3 * max(c.settings.interval_s, c.loop_delay_s)
    last = max(t for t in (c.started_at, c.tick_started, c.tick_ended) if t is not None)
    if c.tick_started is not None and (c.tick_ended is None or c.tick_ended < c.tick_started):
        # in a tick: one scrape plus the admin requests, each with its retries (and waits)
        calls = ADMIN_CALLS_PER_TICK * attempts
        allowance += timeout_s * (1 + calls) + calls
    age = c.clock() - last
    if age > allowance:
        return False, f"the control loop has not ticked for {age:.1f} s (> {allowance:.1f} s)"
    return True, "ok"
