"""The sidecar's probes: liveness (/healthz) and readiness (/readyz), each with a reason.

Liveness is deliberately not "vLLM is up" (the kiwigrid staleness rule): it says the control
loop still turns, so a vLLM restart never restarts the sidecar. Readiness says the sidecar
has what it needs to act: a profile (it exists), the engine connected, one good scrape.
"""

from __future__ import annotations

from sidecar.controller import Controller

__all__ = ["health", "ready"]


def ready(c: Controller) -> tuple[bool, str]:
    """Ready: profile loaded (the controller exists), engine connected, one scrape succeeded."""
    if not c.is_connected:
        return False, f"waiting for the plugin's admin endpoint at {c.settings.admin_url}"
    if c.last_scrape_ok is None:
        return False, f"no successful scrape of {c.settings.engine_url}/metrics yet"
    return True, "ready"


def health(c: Controller) -> tuple[bool, str]:
    """Live: a tick ended within 3 loop periods, or one is running within its budget.

    The loop period is interval_s, or the back-off delay while vLLM keeps failing.
    """
    attempts, timeout_s = c.settings.retry_attempts, c.settings.timeout_s
    allowance = 3 * max(c.settings.interval_s, c.loop_delay_s)
    last = max(t for t in (c.started_at, c.tick_started, c.tick_ended) if t is not None)
    if c.tick_started is not None and (c.tick_ended is None or c.tick_ended < c.tick_started):
        # in a tick: one scrape plus up to four admin requests, each with its retries
        allowance += timeout_s * (1 + 4 * attempts) + 4 * attempts
    age = c.clock() - last
    if age > allowance:
        return False, f"the control loop has not ticked for {age:.1f} s (> {allowance:.1f} s)"
    return True, "ok"
