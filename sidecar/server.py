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

from sidecar.controller import Controller
from sidecar.metrics import registry_for

__all__ = ["build_app", "serve", "state_of"]

QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
CONTROLLER = web.AppKey("controller", Controller)


class _AccessLogger(AbstractAccessLogger):
    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        if request.path not in QUIET_PATHS:
            self.logger.info("access", extra={"method": request.method, "path": request.path,
                                              "status": response.status,
                                              "seconds": round(time, 6)})


def state_of(c: Controller) -> dict[str, Any]:
    """The controller's state as JSON for GET /v1/state (sidecar/state.py)."""
    return c.snapshot().model_dump(mode="json")


async def _probe(check: Callable[[], tuple[bool, str]]) -> web.Response:
    ok, reason = check()
    return web.json_response({"ok": ok, "reason": reason}, status=200 if ok else 503)


def build_app(controller: Controller) -> web.Application:
    app = web.Application()
    app[CONTROLLER] = controller

    async def healthz(request: web.Request) -> web.Response:
        return await _probe(request.app[CONTROLLER].liveness)

    async def readyz(request: web.Request) -> web.Response:
        return await _probe(request.app[CONTROLLER].readiness)

    async def state(request: web.Request) -> web.Response:
        return web.json_response(state_of(request.app[CONTROLLER]))

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", make_aiohttp_handler(registry_for(controller.snapshot)))
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
