"""The plugin's local admin endpoint: a stdlib ThreadingHTTPServer on a daemon thread.

Routes (JSON in and out; PUTs need `Authorization: Bearer <token>` when a token is configured):

| route              | body                                        | effect / reply                          |
|--------------------|---------------------------------------------|-----------------------------------------|
| GET  /healthz      |                                             | {"ok": true}                            |
| GET  /v1/table     |                                             | TableReply                              |
| PUT  /v1/table     | {"table": [[s, e, K], ...]}                 | swap at the next step; TableReply       |
| GET  /v1/policy    |                                             | {"explore_every", "hysteresis", ...}    |
| PUT  /v1/policy    | {"explore_every"?: int, "hysteresis"?: int} | PolicyReply                             |
| GET  /v1/stats     |                                             | the counters (StatsReply)               |
| GET  /v1/emulation |                                             | {"enabled", "rates"}                    |
| PUT  /v1/emulation | {"rates": [a1, a2, ...]}                    | 409 unless enabled at startup           |

Errors: 400 malformed JSON, 401 missing/wrong token, 404 unknown route, 409 not possible on this
engine, 413 body too large, 422 invalid body (the reply names the field and the reason).
The handler only validates and rebinds an immutable state; the engine thread picks it up.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import ValidationError

from tuner.admin_api import EmulationBody, PolicyBody, TableBody
from tuner.errors import InvalidTable
from tuner.table import check_for_engine
from vllm_patch import emulation
from vllm_patch.settings import MAX_BODY_BYTES
from vllm_patch.state import EngineState, Policy, TableState

log = logging.getLogger("vllm.tabletune")


class HttpError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


def table_reply(engine: EngineState) -> dict[str, Any]:
    t = engine.table
    return {"table": t.table.to_list() if t else None,
            "num_speculative_tokens": engine.num_speculative_tokens,
            "max_num_seqs": engine.max_num_seqs, "startup_k": sorted(engine.startup_k),
            "version": t.version if t else 0, "swapped_at": t.swapped_at if t else None,
            "restrict_k": engine.restrict_k, "swap_latency_s": engine.swap_latency_s}


def stats_reply(engine: EngineState) -> dict[str, Any]:
    with engine.lock:
        c = engine.counters
        return {
            "model_name": engine.model_name, "num_speculative_tokens": engine.num_speculative_tokens,
            "max_num_seqs": engine.max_num_seqs, "started_at": engine.started_at,
            "table_version": engine.table.version if engine.table else 0,
            "current_k": engine.current_k, "steps": engine.steps,
            "drafted_per_pos": list(c.drafted_per_pos), "accepted_per_pos": list(c.accepted_per_pos),
            "histogram": [[d, a, n] for (d, a), n in sorted(c.histogram.items())],
            "request_steps_per_k": {str(k): n for k, n in sorted(c.request_steps_per_k.items())},
            "engine_steps_per_k": {str(k): n for k, n in sorted(c.engine_steps_per_k.items())},
            "explore_steps": c.explore_steps,
            "scheduled_requests": c.scheduled_requests, "scheduled_tokens": c.scheduled_tokens,
            "step_times": [[b, k, s, c.steps_timed[(b, k)]]
                           for (b, k), s in sorted(c.step_seconds.items())],
            "swap_latency_s": engine.swap_latency_s, "hook_errors": engine.hook_errors,
            "bandit": None if engine.bandit is None else
            [[b, k, round(m, 1), engine.bandit.pulls[(b, k)]]
             for (b, k), m in sorted(engine.bandit.means.items())],
        }


def _validation_error(exc: ValidationError) -> HttpError:
    err = exc.errors()[0]
    if err["type"] == "json_invalid":
        return HttpError(400, f"body is not JSON: {err['msg']}")
    field = ".".join(str(p) for p in err.get("loc", ())) or None
    return HttpError(422, f"{field}: {err['msg']}" if field else err["msg"], field)


def put_table(engine: EngineState, body: bytes) -> dict[str, Any]:
    if engine.table is None:
        raise HttpError(409, "this vLLM was started without num_speculative_tokens_per_batch_size; "
                             "start it with any DSD table so the scheduler has a lookup to swap")
    try:
        table = TableBody.model_validate_json(body).parsed()
        check_for_engine(table, engine.num_speculative_tokens, engine.max_num_seqs,
                         set(engine.startup_k) if engine.restrict_k else None)
    except ValidationError as exc:
        raise _validation_error(exc) from None
    except (InvalidTable, ValueError) as exc:
        raise HttpError(422, str(exc), "table") from None
    dense = tuple(table.dense(engine.max_num_seqs, engine.num_speculative_tokens))
    old = engine.table
    engine.table = TableState(table, dense, old.version + 1, time.time())  # rebind: atomic
    log.info("TableTune: table v%d -> v%d: %s", old.version, old.version + 1, table.to_list())
    return table_reply(engine)


def put_policy(engine: EngineState, body: bytes) -> dict[str, Any]:
    try:
        p = PolicyBody.model_validate_json(body)
    except ValidationError as exc:
        raise _validation_error(exc) from None
    old = engine.policy
    baseline = old.baseline if p.baseline is None else (None if p.baseline == "none" else p.baseline)
    if baseline != old.baseline:
        engine.bandit = None  # a fresh bandit each time the baseline is switched on
    engine.policy = Policy(old.explore_every if p.explore_every is None else p.explore_every,
                           old.hysteresis if p.hysteresis is None else p.hysteresis, baseline)
    return policy_reply(engine)


def policy_reply(engine: EngineState) -> dict[str, Any]:
    return {"explore_every": engine.policy.explore_every, "hysteresis": engine.policy.hysteresis,
            "baseline": engine.policy.baseline}


def put_emulation(engine: EngineState, body: bytes) -> dict[str, Any]:
    if not engine.emulation_enabled:
        raise HttpError(409, "acceptance emulation is off; start vLLM with "
                             "TABLETUNE_EMULATE_ACCEPTANCE=a1,a2,... to make it settable")
    try:
        rates = EmulationBody.model_validate_json(body).rates
    except ValidationError as exc:
        raise _validation_error(exc) from None
    emulation.publish(rates)
    engine.emulation = rates
    return emulation_reply(engine)


def emulation_reply(engine: EngineState) -> dict[str, Any]:
    return {"enabled": engine.emulation_enabled,
            "rates": list(engine.emulation) if engine.emulation is not None else None}


GETS: dict[str, Callable[[EngineState], dict[str, Any]]] = {
    "/healthz": lambda e: {"ok": True}, "/v1/table": table_reply, "/v1/policy": policy_reply,
    "/v1/stats": stats_reply, "/v1/emulation": emulation_reply}
PUTS: dict[str, Callable[[EngineState, bytes], dict[str, Any]]] = {
    "/v1/table": put_table, "/v1/policy": put_policy, "/v1/emulation": put_emulation}


def make_handler(engine: EngineState, token: str | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "tabletune-admin"

        def log_message(self, format: str, *args: Any) -> None:  # keep vLLM's log clean
            pass

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, fn: Callable[[], dict[str, Any]]) -> None:
            try:
                self._reply(200, fn())
            except HttpError as exc:
                self._reply(exc.status, {"error": exc.message, "field": exc.field})
            except Exception as exc:  # a bug here must not take the engine down
                log.exception("TableTune admin handler failed")
                self._reply(500, {"error": f"internal error: {type(exc).__name__}"})

        def do_GET(self) -> None:
            route = GETS.get(self.path.split("?")[0])
            if route is None:
                return self._reply(404, {"error": f"no route GET {self.path}"})
            self._serve(lambda: route(engine))

        def do_PUT(self) -> None:
            self._serve(self._put)

        def _put(self) -> dict[str, Any]:
            route = PUTS.get(self.path.split("?")[0])
            if route is None:
                raise HttpError(404, f"no route PUT {self.path}")
            if token is not None:
                got = self.headers.get("Authorization", "")
                if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
                    raise HttpError(401, "missing or wrong bearer token (Authorization header)")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                raise HttpError(413, f"body of {length} bytes exceeds {MAX_BODY_BYTES}")
            return route(engine, self.rfile.read(length))

    return Handler


def serve(engine: EngineState, host: str, port: int, token: str | None) -> ThreadingHTTPServer | None:
    """Start the admin server on a daemon thread; None (and a log line) if it cannot bind."""
    try:
        httpd = ThreadingHTTPServer((host, port), make_handler(engine, token))
    except OSError as exc:
        log.error("TableTune admin endpoint could not bind %s:%d (%s); vLLM keeps serving "
                  "without it", host, port, exc)
        return None
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="tabletune-admin", daemon=True).start()
    log.info("TableTune admin endpoint on http://%s:%d (token %s)", host, port,
             "required" if token else "not configured")
    return httpd
