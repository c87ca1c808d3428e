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
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sidecar.controller import Controller
from sidecar.metrics import registry_for

__all__ = ["build_app", "serve", "state_of"]

QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
CONTROLLER = web.AppKey("controller", Controller)
CACHE_S = 0.2  # /v1/state and /metrics are at most this old (a fifth of the default interval)


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


class Rendered:
    """A body rendered at most once per ``ttl_s`` however many clients ask: 200 clients
    polling /v1/state and /metrics rendered a snapshot each and stretched the 1-s control
    loop, which shares this event loop, to 2 s (issue #39)."""

    def __init__(self, render: Callable[[], bytes], ttl_s: float) -> None:
        self._render, self._ttl_s = render, ttl_s
        self._body, self._at = b"", -math.inf

    def body(self) -> bytes:
        now = time.monotonic()
        if now - self._at >= self._ttl_s:
            self._body, self._at = self._render(), now
        return self._body


def build_app(controller: Controller, cache_s: float | None = None) -> web.Application:
    """``cache_s``: how old /v1/state and /metrics may be (None: CACHE_S as it is now)."""
    cache_s = CACHE_S if cache_s is None else cache_s
    app = web.Application()
    app[CONTROLLER] = controller
    state_body = Rendered(lambda: json.dumps(state_of(controller)).encode(), cache_s)
    registry = registry_for(controller.snapshot)
    metrics_body = Rendered(lambda: generate_latest(registry), cache_s)

    async def healthz(request: web.Request) -> web.Response:
        return await _probe(request.app[CONTROLLER].liveness)

    async def readyz(request: web.Request) -> web.Response:
        return await _probe(request.app[CONTROLLER].readiness)

    async def state(request: web.Request) -> web.Response:
        return web.Response(body=state_body.body(), content_type="application/json")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=metrics_body.body(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
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
