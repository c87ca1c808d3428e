"""aiohttp client for vLLM's /metrics and the plugin's admin API, with timeouts and retries.

Errors (see tuner/errors.py for the whole tree):

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
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, ValidationError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt
from tenacity import wait_exponential_jitter

from tuner.errors import EngineUnavailable, InvalidTable
from tuner.table import Table

__all__ = ["AdminRejected", "EngineClient", "TableInfo"]


class AdminRejected(EngineUnavailable):
    """The admin API refused a request (4xx): retrying the same body cannot help."""

    def __init__(self, method: str, url: str, status: int, error: str, field: str | None) -> None:
        where = f" (field {field})" if field else ""
        super().__init__(f"{method} {url}: {status} {error}{where}")
        self.status, self.error, self.field = status, error, field


class _ServerError(Exception):
    """A 5xx: transient, retried, then reported as EngineUnavailable."""


TRANSIENT = (aiohttp.ClientError, TimeoutError, _ServerError)


class TableInfo(BaseModel):
    """The parts of the admin API's table reply the sidecar uses."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    table: list[list[int]] | None
    num_speculative_tokens: int
    max_num_seqs: int
    startup_k: list[int] = []
    version: int = 0

    def parsed_table(self) -> Table | None:
        return None if self.table is None else Table.from_list(self.table)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


def _error_body(text: str) -> tuple[str, str | None]:
    """The admin API's {"error", "field"}; the raw text when it is not that shape."""
    try:
        body = _ErrorBody.model_validate_json(text)
    except ValidationError:
        return text[:200], None
    return body.error, body.field


class _ErrorBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    error: str
    field: str | None = None


class EngineClient:
    """One aiohttp session for vLLM (``engine_url``) and the plugin (``admin_url``)."""

    def __init__(self, engine_url: str, admin_url: str, token: str | None, timeout_s: float,
                 attempts: int = 3, max_wait_s: float = 1.0) -> None:
        self.engine_url, self.admin_url = engine_url.rstrip("/"), admin_url.rstrip("/")
        self._token = token
        self.timeout_s, self.attempts, self.max_wait_s = timeout_s, attempts, max_wait_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> EngineClient:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()

    def __repr__(self) -> str:  # no token here, ever
        return f"EngineClient({self.engine_url!r}, {self.admin_url!r})"

    # -- requests ----------------------------------------------------------------------
    async def _once(self, method: str, url: str, body: Any = None) -> str:
        assert self._session is not None, "use EngineClient as an async context manager"
        headers = {}
        if method != "GET" and self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        async with self._session.request(method, url, json=body, headers=headers) as reply:
            text = await reply.text(errors="replace")
            if reply.status >= 500:
                raise _ServerError(f"{reply.status} {text[:200]}")
            if reply.status >= 400:
                raise AdminRejected(method, url, reply.status, *_error_body(text))
            return text

    async def _request(self, method: str, url: str, body: Any = None,
                       attempts: int | None = None) -> str:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(attempts or self.attempts),
            wait=wait_exponential_jitter(initial=0.1, max=self.max_wait_s, jitter=0.1),
            retry=retry_if_exception_type(TRANSIENT), reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._once(method, url, body)
        except TRANSIENT as exc:
            raise EngineUnavailable(f"{method} {url}: {_describe(exc)}") from exc
        raise AssertionError("tenacity ended without a result or an error")

    async def _admin(self, method: str, route: str, body: Any = None) -> str:
        return await self._request(method, self.admin_url + route, body)

    # -- the API -------------------------------------------------------------------------
    async def get_metrics(self) -> str:
        """vLLM's /metrics text (one try: the control loop is the retry)."""
        return await self._request("GET", self.engine_url + "/metrics", attempts=1)

    async def get_table(self) -> TableInfo:
        return self._table_info("GET", await self._admin("GET", "/v1/table"))

    async def put_table(self, table: Table) -> TableInfo:
        return self._table_info("PUT", await self._admin("PUT", "/v1/table",
                                                         {"table": table.to_list()}))

    async def put_policy(self, explore_every: int, hysteresis: int) -> dict[str, Any]:
        text = await self._admin("PUT", "/v1/policy", {"explore_every": explore_every,
                                                       "hysteresis": hysteresis})
        try:
            return _Policy.model_validate_json(text).model_dump()
        except ValidationError as exc:
            raise EngineUnavailable(f"PUT {self.admin_url}/v1/policy: reply is not a "
                                    f"policy ({exc.errors()[0]['msg']})") from None

    def _table_info(self, method: str, text: str) -> TableInfo:
        try:
            info = TableInfo.model_validate_json(text)
            info.parsed_table()
            return info
        except InvalidTable as exc:
            raise EngineUnavailable(f"{method} {self.admin_url}/v1/table: the engine reports "
                                    f"an invalid table ({exc})") from None
        except ValidationError as exc:
            raise EngineUnavailable(f"{method} {self.admin_url}/v1/table: reply is not a "
                                    f"table state ({exc.errors()[0]['msg']}); is admin_url "
                                    "the TableTune plugin's admin endpoint?") from None


class _Policy(BaseModel):
    model_config = ConfigDict(extra="ignore")
    explore_every: int
    hysteresis: int
