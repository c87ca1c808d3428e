"""The sidecar's HTTP server: /healthz, /readyz, /metrics, /v1/state (aiohttp AppRunner).

| route | 200 | 503 |
|---|---|---|
| GET /healthz | the control loop ticked within 3 of its periods | with the reason |
| GET /readyz | engine up, a recent complete scrape, admin answering (sidecar/probes.py) | with the reason |
| GET /metrics | the sidecar's own series (sidecar/metrics.py) | |
| GET /v1/state | what it last saw, and when: estimator, â, tables, last decision, conditions | |

/healthz is deliberately not tied to vLLM being up: a vLLM restart must not restart the
sidecar. The access log is off unless ``access_log`` (then on stdout, logger sidecar.access,
never mixed into the event log on stderr); probes and /metrics are never in it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from prometheus_client.aiohttp import make_aiohttp_handler

from sidecar import probes
from sidecar.controller import Controller
from sidecar.decision import BIAS_NOTE
from sidecar.estimator import estimate
from sidecar.metrics import registry_for
from sidecar.rebuild import projected

__all__ = ["build_app", "serve", "state_of"]

QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
CONTROLLER = web.AppKey("controller", Controller)


class _AccessLogger(AbstractAccessLogger):
    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        if request.path not in QUIET_PATHS:
            self.logger.info("access", extra={"method": request.method, "path": request.path,
                                              "status": response.status,
                                              "seconds": round(time, 6)})


def _age(c: Controller, at: float | None) -> float | None:
    return None if at is None else round(c.clock() - at, 3)


def _freshness(c: Controller) -> dict[str, Any]:
    """When the sidecar last saw vLLM's /metrics and the admin endpoint answer, and the hold."""
    e = c.engine
    hold = None if not e.holding() or e.hold_until is None else {
        "version": e.hold_version, "until": e.hold_until,
        "remaining_s": round(e.hold_until - c.clock(), 3)}
    return {"last_scrape_ok_at": c.last_scrape_ok_at,
            "last_scrape_age_s": _age(c, c.last_scrape_ok_at),
            "last_admin_ok_at": e.last_ok_at, "admin_age_s": _age(c, e.last_ok_at),
            "foreign_hold": hold, "foreign_tables_seen": c.stats.foreign_tables,
            "conditions": dict(c.conditions.states),
            "condition_details": {name: dict(d) for name, d in c.conditions.details.items()}}


def state_of(c: Controller) -> dict[str, Any]:
    """The controller's state as JSON for GET /v1/state."""
    engine = c.engine.info
    is_ready, reason = probes.ready(c)
    return {
        "ready": is_ready, "ready_reason": reason, "dry_run": c.settings.dry_run,
        "source": c.source, **_freshness(c),
        "bias_note": BIAS_NOTE if c.source == "stock" else None,
        "estimator": c.state.to_dict(),
        "a_hat": estimate(c.state).tolist(),
        "a_used": projected(c.state)[0].tolist(),  # non-increasing: what rebuilds use
        "steps_since_rebuild": c.steps_since_rebuild,
        "explore_steps_seen": c.stats.explore_steps,
        "transition_steps_seen": c.stats.transition_steps,
        "rebuild_every_steps": c.settings.rebuild_every_steps,
        "allowed_k": sorted(c.allowed_k) if c.allowed_k is not None else "all",
        "engine_table": engine.table if engine is not None else None,
        "engine_table_version": engine.version if engine is not None else None,
        "recommended_table": c.recommended.to_list() if c.recommended is not None else None,
        "last_decision": (c.last_decision.model_dump(mode="json")
                          if c.last_decision is not None else None),
        "drift": [cell.model_dump() for cell in c.drift_cells],
        "step_times": {"prior_steps": c.w_T, "live": [
            {"batch_size": b, "k": k, "steps": n, "live_ms": c.live_T.live_ms((b, k))}
            for (b, k), n in sorted(c.live_T.steps.items())]},
        "guardrail": {"judging": c.guard.trial is not None,
                      "held_out": [{"table": [list(r) for r in ranges], "until": until}
                                   for ranges, until in c.guard.held.items() if until > c.clock()],
                      "rollbacks": c.stats.rollbacks},
        "traffic_changes": c.stats.changes,
        "recent_decisions": [{"time": d.time, "outcome": d.outcome, "trigger": d.trigger,
                              "old_table": d.old_table, "new_table": d.new_table,
                              "reason": d.reason} for d in c.decisions],
        "prior_acceptance": c.prior.tolist(),  # the profile's; estimator.prior may be rebased
        "profile_sha256": c.profile_sha256,    # what the checkpoint says it belongs to
    }


async def _probe(check: Callable[[], tuple[bool, str]]) -> web.Response:
    ok, reason = check()
    return web.json_response({"ok": ok, "reason": reason}, status=200 if ok else 503)


def build_app(controller: Controller) -> web.Application:
    app = web.Application()
    app[CONTROLLER] = controller

    async def healthz(request: web.Request) -> web.Response:
        return await _probe(lambda: probes.health(request.app[CONTROLLER]))

    async def readyz(request: web.Request) -> web.Response:
        return await _probe(lambda: probes.ready(request.app[CONTROLLER]))

    async def state(request: web.Request) -> web.Response:
        return web.json_response(state_of(request.app[CONTROLLER]))

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", make_aiohttp_handler(registry_for(controller)))
    app.router.add_get("/v1/state", state)
    return app


async def serve(controller: Controller, host: str, port: int, stop: asyncio.Event,
                on_bound: Callable[[int], None] | None = None) -> None:
    """Serve until ``stop`` is set; ``on_bound(port)`` once listening (port 0: a free one)."""
    access = logging.getLogger("sidecar.access") if controller.settings.access_log else None
    runner = web.AppRunner(build_app(controller), handle_signals=False, shutdown_timeout=0.5,
                           access_log_class=_AccessLogger, access_log=access)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        logging.getLogger("sidecar").info("listening", extra={"host": host, "port": bound})
        if on_bound is not None:
            on_bound(bound)
        await stop.wait()
    finally:
        await asyncio.shield(runner.cleanup())
