"""The plugin's admin API: routes, validation and replies. The HTTP server is admin_server.py.

Routes (JSON in and out; PUTs need `Authorization: Bearer <token>` when a token is configured;
bodies and replies are the models of tuner/core/admin_api.py):

| route                  | body                                     | effect / reply                       |
|------------------------|------------------------------------------|--------------------------------------|
| GET  /healthz          |                                          | {"ok": true}                         |
| GET  /v1/table         |                                          | TableReply                           |
| PUT  /v1/table         | {"table": [[s, e, K], ...]}              | swap at the next step; TableReply    |
|                        |                                          |  with "clipped" (fit_to_engine)      |
| GET  /v1/policy        |                                          | PolicyReply                          |
| PUT  /v1/policy        | {"explore_every"?, "explore_run"?,       | PolicyReply (422: explore_run must   |
|                        |  "hysteresis"?, "baseline"?, "duels"?,   |  stay < explore_every; a duel's      |
|                        |  "duel_run"?, "duel_share"?,             |  range or k, or an explore_ks k,     |
|                        |  "duel_horizon"?, "explore_ks"?}         |  outside the engine's)               |
| GET  /v1/stats         | ?since=SEQ (optional)                    | StatsReply; recent_steps: seq > SEQ  |
| GET  /v1/emulation     |                                          | EmulationReply                       |
| PUT  /v1/emulation     | {"rates": [a1, a2, ...]}                 | 409 unless enabled at startup        |

Errors, as {"error", "field"}: 400 malformed request or body not JSON, 401 missing/wrong token,
404 unknown route, 405 method, 408 body not received in time, 409 not possible on this engine,
413 body too large, 422 invalid body or query (the reply names the field and the reason).
A request that fails changes nothing.

The handlers only validate and rebind immutable state; the engine thread picks it up at its
next step. Read-modify-write of the table and policy happens under `engine.admin_lock`, so
concurrent PUTs each get their own version.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from tuner.core.admin_api import (Duel, EmulationBody, EmulationReply, ErrorReply, PolicyBody,
                                  PolicyReply, TableBody, TableReply, check_exploration)
from tuner.core.errors import InvalidTable
from tuner.core.table import check_for_engine, fit_to_engine
from vllm_patch import emulation
from vllm_patch.engine_state import EngineState, Policy, TableState, accepted_per_pos, drafted_per_pos

log = logging.getLogger("vllm.tabletune")


class HttpError(Exception):
    """A 4xx (or 5xx) reply: status, a message that names the value and the fix, the field."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field

    def body(self) -> dict[str, Any]:
        """The reply body, built as the ErrorReply clients parse."""
        return ErrorReply(error=self.message, field=self.field).model_dump(mode="json")


def swap_latency(engine: EngineState) -> float | None:
    """Seconds from the current table's swap to the first step that used it; None while no step
    has (pending), and for the startup table."""
    version = engine.applied_version  # read before the latency: the engine thread writes it last
    latency = engine.swap_latency_s
    table = engine.table
    return latency if table is not None and version == table.version else None


def table_reply(engine: EngineState) -> dict[str, Any]:
    """GET /v1/table: built as the TableReply clients parse, so no field can drift."""
    t = engine.table
    return TableReply(
        table=t.table.to_list() if t else None,
        num_speculative_tokens=engine.num_speculative_tokens,
        max_num_seqs=engine.max_num_seqs, startup_k=sorted(engine.startup_k),
        version=t.version if t else 0, swapped_at=t.swapped_at if t else None,
        restrict_k=engine.restrict_k, swap_latency_s=swap_latency(engine),
        cudagraph_capture_sizes=(list(engine.cudagraph_capture_sizes)
                                 if engine.cudagraph_capture_sizes is not None else None),
        max_num_batched_tokens=engine.max_num_batched_tokens,
        runner=engine.runner, graph_k=sorted(graph_k(engine))
    ).model_dump(mode="json", exclude={"clipped"})  # what a PUT cut: PUT's reply only


def graph_k(engine: EngineState) -> set[int]:
    """The k's this engine runs without a penalty: the startup table's on the V2 runner (full
    CUDA graphs are captured per k of that table), every k = 0..K otherwise."""
    return set(engine.startup_k) if engine.runner == "v2" else set(engine.runnable_k)


def stats_reply(engine: EngineState, since: int | None = None) -> dict[str, Any]:
    """GET /v1/stats (StatsReply's fields, a test keeps them equal; a dict, not the model:
    validating a ring of ~8000 steps on every poll would cost the engine); `since`: only the
    recent steps with seq > since.

    Steps are numbered from 1 by the engine (the newest seq is the sum of engine_steps_per_k),
    so a poller passes the last seq it saw; the numbering restarts with the engine (started_at).
    """
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
            "transition_steps": c.transition_steps, "recent_steps": c.steps_after(since),
            "resume_drafted_per_pos": drafted_per_pos(c.resume_request_steps, c.num_positions),
            "resume_accepted_per_pos": accepted_per_pos(c.resume_request_steps, c.num_positions),
            "finished_requests": c.finished_requests, "finished_proposed": c.finished_proposed,
            "finished_accepted": c.finished_accepted,
            "swap_latency_s": swap_latency(engine), "hook_errors": engine.hook_errors,
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
    """PUT /v1/table: validate, then rebind a new TableState with the next version."""
    if engine.table is None:
        raise HttpError(409, "this vLLM was started without num_speculative_tokens_per_batch_size; "
                             "start it with any DSD table so the scheduler has a lookup to swap")
    try:
        sent = TableBody.model_validate_json(body)
        # stored as vLLM's lookup uses it: at most max_num_seqs ranges, whatever was sent
        table, clipped = fit_to_engine(sent.parsed(), engine.max_num_seqs)
        check_for_engine(table, engine.num_speculative_tokens, engine.max_num_seqs,
                         set(engine.runnable_k) if engine.restrict_k else None)
    except ValidationError as exc:
        raise _validation_error(exc) from None
    except (InvalidTable, ValueError) as exc:
        raise HttpError(422, str(exc), "table") from None
    dense = tuple(table.dense(engine.max_num_seqs, engine.num_speculative_tokens))
    with engine.admin_lock:  # two PUTs must not both build version n+1 from version n
        old = engine.table
        if sent.if_version is not None and sent.if_version != old.version:
            raise HttpError(409, f"if_version={sent.if_version}: the table is at version "
                                 f"{old.version} now (someone else wrote it); GET it and decide "
                                 "again", "if_version")
        engine.table = TableState(table, dense, old.version + 1, time.time())  # rebind: atomic
    log.info("TableTune: table v%d -> v%d: %s%s", old.version, old.version + 1, table.to_list(),
             f" ({clipped})" if clipped else "")
    return table_reply(engine) | {"clipped": clipped}


def put_policy(engine: EngineState, body: bytes) -> dict[str, Any]:
    """PUT /v1/policy: any subset of the fields; the others keep their value."""
    try:
        p = PolicyBody.model_validate_json(body)
    except ValidationError as exc:
        raise _validation_error(exc) from None
    with engine.admin_lock:
        old = engine.policy
        baseline = old.baseline if p.baseline is None else (None if p.baseline == "none" else p.baseline)
        new = Policy(old.explore_every if p.explore_every is None else p.explore_every,
                     old.hysteresis if p.hysteresis is None else p.hysteresis, baseline,
                     old.explore_run if p.explore_run is None else p.explore_run,
                     old.duels if p.duels is None else p.duels,
                     old.duel_run if p.duel_run is None else p.duel_run,
                     old.duel_share if p.duel_share is None else p.duel_share,
                     old.duel_horizon if p.duel_horizon is None else p.duel_horizon,
                     old.explore_ks if p.explore_ks is None else tuple(sorted(set(p.explore_ks))))
        try:
            check_exploration(new.explore_every, new.explore_run)
        except ValueError as exc:  # the field this body set (a default may be the other side)
            raise HttpError(422, str(exc),
                            "explore_run" if p.explore_run is not None else "explore_every") from None
        check_duels(engine, new.duels)
        check_runnable(engine, new.explore_ks, "explore_ks", "explore_ks")
        if baseline != old.baseline:
            engine.bandit = None  # a fresh bandit each time the baseline is switched on
        engine.policy = new
    return policy_reply(engine)


def check_runnable(engine: EngineState, ks: tuple[int, ...], where: str, field: str) -> None:
    """422 naming `where` unless every k is one this engine may run."""
    bad = sorted(set(ks) - set(engine.runnable_k))
    if bad:
        raise HttpError(422, f"{where}: k={bad} not runnable here (allowed: "
                             f"{sorted(engine.runnable_k)})", field)


def check_duels(engine: EngineState, duels: tuple[Duel, ...]) -> None:
    """Each duel a range inside 1..max_num_seqs and k's this engine may run; 422 naming it."""
    for i, (lo, hi, ks) in enumerate(duels):
        if not 1 <= lo <= hi <= engine.max_num_seqs:
            raise HttpError(422, f"duels[{i}]: range {lo}..{hi} must lie in 1..max_num_seqs="
                                 f"{engine.max_num_seqs} with start <= end", "duels")
        check_runnable(engine, tuple(ks), f"duels[{i}]", "duels")


def policy_reply(engine: EngineState) -> dict[str, Any]:
    """GET /v1/policy, built as the PolicyReply clients parse."""
    p = engine.policy
    return PolicyReply(explore_every=p.explore_every, explore_run=p.explore_run,
                       hysteresis=p.hysteresis, baseline=p.baseline,
                       duels=tuple(p.duels),
                       duel_run=p.duel_run, duel_share=p.duel_share,
                       duel_horizon=p.duel_horizon,
                       explore_ks=p.explore_ks).model_dump(mode="json")


def put_emulation(engine: EngineState, body: bytes) -> dict[str, Any]:
    """PUT /v1/emulation: publish new rates to the workers (409 unless enabled at startup)."""
    if not engine.emulation_enabled:
        raise HttpError(409, "acceptance emulation is off; start vLLM with "
                             "TABLETUNE_EMULATE_ACCEPTANCE=a1,a2,... to make it settable")
    try:
        rates = EmulationBody.model_validate_json(body).rates
    except ValidationError as exc:
        raise _validation_error(exc) from None
    with engine.admin_lock:
        emulation.publish(rates)
        engine.emulation = rates
    return emulation_reply(engine)


def emulation_reply(engine: EngineState) -> dict[str, Any]:
    """GET /v1/emulation, built as the EmulationReply clients parse."""
    return EmulationReply(enabled=engine.emulation_enabled,
                          rates=list(engine.emulation) if engine.emulation is not None
                          else None).model_dump(mode="json")


def _since(query: Mapping[str, str]) -> int | None:
    raw = query.get("since")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise HttpError(422, f"since={raw!r}: expected the seq of a step (an integer >= 0), "
                             "e.g. since=0 for every recent step", "since")
    return int(raw)


GETS: dict[str, Callable[[EngineState, Mapping[str, str]], dict[str, Any]]] = {
    "/healthz": lambda e, q: {"ok": True}, "/v1/table": lambda e, q: table_reply(e),
    "/v1/policy": lambda e, q: policy_reply(e), "/v1/stats": lambda e, q: stats_reply(e, _since(q)),
    "/v1/emulation": lambda e, q: emulation_reply(e)}
PUTS: dict[str, Callable[[EngineState, bytes], dict[str, Any]]] = {
    "/v1/table": put_table, "/v1/policy": put_policy, "/v1/emulation": put_emulation}


def get(engine: EngineState, path: str, query: Mapping[str, str]) -> dict[str, Any]:
    """The reply of GET `path`; HttpError 404 for an unknown route."""
    route = GETS.get(path)
    if route is None:
        raise HttpError(404, f"no route GET {path}; routes: {', '.join(sorted(GETS))}")
    return route(engine, query)


def put_route(path: str) -> Callable[[EngineState, bytes], dict[str, Any]]:
    """The handler of PUT `path`; HttpError 404 for an unknown route."""
    route = PUTS.get(path)
    if route is None:
        raise HttpError(404, f"no route PUT {path}; routes: {', '.join(sorted(PUTS))}")
    return route


def authorize(token: str | None, authorization: str) -> None:
    """Constant-time check of `Authorization: Bearer <token>`; HttpError 401 when it fails."""
    if token is not None and not hmac.compare_digest(authorization.encode(errors="replace"),
                                                     f"Bearer {token}".encode()):
        raise HttpError(401, "missing or wrong bearer token (Authorization header)")
