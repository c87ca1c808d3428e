"""The one client for vLLM's /metrics and the plugin's admin API: timeouts, retries, typed errors.

Every TableTune part that talks to the plugin uses it: the sidecar, the tuner, the demo and the
benchmarks. Bodies and replies are the models of tuner/core/admin_api.py.

Errors (see tuner/core/errors.py for the whole tree):

    EngineUnavailable      connection refused or reset, timeout, 5xx, a reply that is not
     │                     what the API documents; raised after the retries are spent
     └── AdminRejected     a 4xx from the admin API: never retried; carries status, error, field

Admin requests are retried with tenacity (exponential backoff with jitter, ``attempts`` tries)
on connection errors, timeouts and 5xx. ``/metrics`` is fetched once per call: the sidecar's
loop is its retry, with its own back-off. The bearer token goes only into the Authorization
header of PUTs; it is never part of a message, a log line or an exception.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

from tuner.core.admin_api import NO_STEPS, EmulationReply, ErrorReply, PolicyReply, StatsReply, TableReply
from tuner.core.errors import EngineUnavailable, InvalidTable, ScrapeError
from tuner.core.table import Table

__all__ = ["AdminRejected", "EngineClient", "ReplyTooLarge"]

R = TypeVar("R", bound=BaseModel)


class AdminRejected(EngineUnavailable):
    """The admin API refused a request (4xx): retrying the same body cannot help."""

    def __init__(self, method: str, url: str, status: int, error: str, field: str | None) -> None:
        where = f" (field {field})" if field else ""
        super().__init__(f"{method} {url}: {status} {error}{where}")
        self.status, self.error, self.field = status, error, field


class _ServerError(Exception):
    """A 5xx: transient, retried, then reported as EngineUnavailable."""


class ReplyTooLarge(EngineUnavailable):
    """A reply over max_body_bytes (from /metrics: ScrapeError instead, it is unreadable)."""


class _TooLarge(Exception):
    """A reply over max_body_bytes: not retried (the next would be as large)."""


TRANSIENT = (aiohttp.ClientError, TimeoutError, _ServerError)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


def _error_body(text: str) -> tuple[str, str | None]:
    """The admin API's {"error", "field"}; the raw text when it is not that shape."""
    try:
        body = ErrorReply.model_validate_json(text)
    except ValidationError:
        return text[:200], None
    return body.error, body.field


class EngineClient:
    """One aiohttp session for vLLM (``engine_url``) and the plugin (``admin_url``).

    Use as an async context manager. ``max_body_bytes`` caps what a /metrics read may return
    (vLLM's body is ~50-70 KB): a larger one is refused, not parsed.
    """

    def __init__(self, engine_url: str = "", admin_url: str = "", token: str | None = None,
                 timeout_s: float = 5.0, attempts: int = 3, max_wait_s: float = 1.0,
                 max_body_bytes: int = 4 * 1024 * 1024) -> None:
        self.engine_url, self.admin_url = engine_url.rstrip("/"), admin_url.rstrip("/")
        # "unix:/path": the admin endpoint's Unix-domain socket (TABLETUNE_ADMIN_UDS), which no
        # TCP client can crowd out (vllm_patch/admin_server.py)
        self._uds = self.admin_url[len("unix:"):] if self.admin_url.startswith("unix:") else None
        self._admin_base = "http://localhost" if self._uds else self.admin_url
        self._admin_session: aiohttp.ClientSession | None = None
        self._token = token
        self.timeout_s, self.attempts, self.max_wait_s = timeout_s, attempts, max_wait_s
        self.max_body_bytes = max_body_bytes
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> EngineClient:
        # force_close: uvicorn drops idle keep-alive connections after 5 s, and a request racing
        # that close fails with ServerDisconnectedError (seen between tuner cells on the GPU)
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            connector=aiohttp.TCPConnector(limit=0, force_close=True))
        if self._uds is not None:
            self._admin_session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.UnixConnector(path=self._uds, force_close=True))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        for session in (self._session, self._admin_session):
            if session is not None:
                await session.close()

    def __repr__(self) -> str:  # no token here, ever
        return f"EngineClient({self.engine_url!r}, {self.admin_url!r})"

    # -- requests ----------------------------------------------------------------------
    def _shown(self, url: str, admin: bool) -> str:
        """The URL as the caller gave it (unix:/path/v1/table, not http://localhost/...)."""
        return self.admin_url + url[len(self._admin_base):] if admin else url

    async def _once(self, method: str, url: str, body: Any = None, admin: bool = False) -> str:
        session = self._admin_session if admin and self._admin_session else self._session
        assert session is not None, "use EngineClient as an async context manager"
        shown = self._shown(url, admin)
        headers = {}
        if method != "GET" and self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        async with session.request(method, url, json=body, headers=headers) as reply:
            size = reply.content_length
            if size is not None and size > self.max_body_bytes:
                raise _TooLarge(f"{shown}: reply of {size} bytes exceeds {self.max_body_bytes}")
            # read() returns what has arrived, up to n: a reply larger than a socket read (the
            # plugin's whole step ring, ~0.5 MB) came back cut at ~128 kB. Read to the end.
            chunks, total = [], 0
            async for chunk in reply.content.iter_any():
                total += len(chunk)
                if total > self.max_body_bytes:
                    raise _TooLarge(f"{shown}: reply exceeds {self.max_body_bytes} bytes")
                chunks.append(chunk)
            raw = b"".join(chunks)
            text = raw.decode(reply.get_encoding() if reply.charset else "utf-8", errors="replace")
            if reply.status >= 500:
                raise _ServerError(f"{reply.status} {text[:200]}")
            if reply.status >= 400:
                raise AdminRejected(method, shown, reply.status, *_error_body(text))
            return text

    async def _request(self, method: str, url: str, body: Any = None,
                       attempts: int | None = None, admin: bool = False) -> str:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(attempts or self.attempts),
            wait=wait_exponential_jitter(initial=0.1, max=self.max_wait_s, jitter=0.1),
            retry=retry_if_exception_type(TRANSIENT), reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._once(method, url, body, admin)
        except TRANSIENT as exc:
            raise EngineUnavailable(f"{method} {self._shown(url, admin)}: {_describe(exc)}") from exc
        except _TooLarge as exc:
            raise ReplyTooLarge(f"{method} {exc}") from None
        raise AssertionError("tenacity ended without a result or an error")

    async def _admin(self, model: type[R], method: str, route: str, body: Any = None) -> R:
        url = self.admin_url + route
        text = await self._request(method, self._admin_base + route, body, admin=True)
        try:
            return model.model_validate_json(text)
        except ValidationError as exc:
            raise EngineUnavailable(f"{method} {url}: the reply is not a {model.__name__} "
                                    f"({exc.errors()[0]['msg']}); is admin_url the TableTune "
                                    "plugin's admin endpoint?") from None

    # -- the API -------------------------------------------------------------------------
    async def get_metrics(self) -> str:
        """vLLM's /metrics text (one try: the caller's loop is the retry); a body over
        max_body_bytes is ScrapeError (unreadable), not an engine that is down."""
        try:
            return await self._request("GET", self.engine_url + "/metrics", attempts=1)
        except ReplyTooLarge as exc:
            raise ScrapeError(str(exc)) from None

    async def get_table(self) -> TableReply:
        return self._checked(await self._admin(TableReply, "GET", "/v1/table"), "GET")

    async def put_table(self, table: Table, if_version: int | None = None) -> TableReply:
        """Write ``table``; with ``if_version``, only over that version (else AdminRejected
        with status 409 and field "if_version": someone else wrote the table since)."""
        body: dict[str, Any] = {"table": table.to_list()}
        if if_version is not None:
            body["if_version"] = if_version
        reply = await self._admin(TableReply, "PUT", "/v1/table", body)
        return self._checked(reply, "PUT")

    async def get_policy(self) -> PolicyReply:
        return await self._admin(PolicyReply, "GET", "/v1/policy")

    async def put_policy(self, **fields: Any) -> PolicyReply:
        """Set any of the policy's fields (explore_every, hysteresis, baseline)."""
        return await self._admin(PolicyReply, "PUT", "/v1/policy", fields)

    async def get_stats(self, since: int | None = NO_STEPS) -> StatsReply:
        """The plugin's counters; per-step samples only after seq ``since`` (the default: none,
        for polls that only count; None: the whole ring, ~300 kB)."""
        route = "/v1/stats" if since is None else f"/v1/stats?since={int(since)}"
        return await self._admin(StatsReply, "GET", route)

    async def get_emulation(self) -> EmulationReply:
        return await self._admin(EmulationReply, "GET", "/v1/emulation")

    async def put_emulation(self, rates: list[float]) -> EmulationReply:
        return await self._admin(EmulationReply, "PUT", "/v1/emulation", {"rates": rates})

    def _checked(self, info: TableReply, method: str) -> TableReply:
        try:
            info.parsed_table()
        except InvalidTable as exc:
            raise EngineUnavailable(f"{method} {self.admin_url}/v1/table: the engine reports "
                                    f"an invalid table ({exc})") from None
        return info
