"""The admin endpoint's HTTP server: aiohttp's low-level server on the plugin's own daemon thread
and event loop, inside EngineCore. Routes and validation live in admin.py.

Why not the stdlib ThreadingHTTPServer it replaced (issue #15): it trusted Content-Length (a
negative one read to EOF and applied the body), spent a thread per connection with no timeout
(3,000 stalled connections held 3,016 threads inside EngineCore) and logged tracebacks when a
client went away. Here one thread serves every connection and each limit is explicit:

| what                             | limit                            | then                       |
|----------------------------------|----------------------------------|----------------------------|
| request line and headers         | aiohttp's parser (Content-Length | 400, JSON body, one line   |
|                                  | digits only)                     |                            |
| no complete request since the    | Limits.idle_timeout_s            | connection closed          |
| connect or the last reply        |                                  |                            |
| body unfinished                  | Limits.read_timeout_s            | 408; nothing changed       |
| body size                        | Limits.max_body_bytes            | 413; nothing changed       |
| reply not taken by the client    | Limits.write_timeout_s           | connection aborted         |
| open connections, per listener   | Limits.max_connections (at most  | new ones closed at accept  |
|                                  | a quarter of RLIMIT_NOFILE)      |                            |

Stalled connections must not lock a client out (issue #27.2: with 32 slots, 300 stalled
sockets, half silent and half in their headers, refused 9 of 10 good requests over 30 s). An
idle connection costs a protocol object and a parser, no thread, so the limit is high (1024),
and one that has not sent a complete request within 2 s is closed. Closing the oldest idle
connection to admit a new one was tried and dropped: asyncio accepts a burst of connections
before it reads any, so under a reconnecting flood above the limit the good connection was
evicted by those accepted after it before its request was read. Above the limit the answer is
``uds``: the endpoint also listens on a Unix-domain socket (mode 0660), a listener with its own
connections that no TCP client can reach; the sidecar in the
same pod uses it through a shared emptyDir (deploy/base/deployment.yaml).

A client that half-closes (shuts down its write side) still gets its reply, so a short body
followed by a half-close is a 408, never an applied table; an idle connection that gets a FIN
closes at once, freeing its slot. A client that goes away costs one
INFO line without a traceback (the first of each kind; later ones at DEBUG). Nothing here
raises into vLLM: a handler bug is a 500 and one logged traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from vllm_patch import admin
from vllm_patch.admin import HttpError
from vllm_patch.settings import MAX_BODY_BYTES
from vllm_patch.engine_state import EngineState

log = logging.getLogger("vllm.tabletune")


@dataclass(frozen=True, slots=True)
class Limits:
    """The server's bounds (module docstring); tests shorten the timeouts."""

    max_body_bytes: int = MAX_BODY_BYTES
    idle_timeout_s: float = 2.0    # no complete request yet: from the connect or the last reply
    read_timeout_s: float = 5.0    # the body
    write_timeout_s: float = 5.0   # the reply
    max_connections: int = 1024    # per listener; idle ones are cheap (module docstring)
    backlog: int = 1024            # the kernel caps it at net.core.somaxconn


class QuietLog:
    """One INFO line for the first event of each kind, DEBUG after that: a client looping on
    resets or garbage cannot flood vLLM's log."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, kind: str, msg: str, *args: Any) -> None:
        first = kind not in self.seen
        self.seen.add(kind)
        log.log(logging.INFO if first else logging.DEBUG,
                "TableTune admin: " + msg + ("; further ones are logged at DEBUG" if first else ""),
                *args)


# web.RequestHandler is public (aiohttp.web.__all__) but not documented for subclassing; what
# is overridden is asyncio's Protocol interface (connection_lost, eof_received) and handle_error,
# and no public setting of web.Server gives a close callback, a writable half-close or a JSON
# reply to a request the parser refused.
class _Connection(web.RequestHandler):
    """aiohttp's per-connection protocol, with three changes: it reports its close (the connection
    count), it keeps a half-closed connection writable while its request is handled, and a
    malformed request is one log line."""

    def __init__(self, on_closed: Callable[[], None], quiet: QuietLog, manager: web.Server,
                 loop: asyncio.AbstractEventLoop, **kwargs: Any) -> None:
        super().__init__(manager, loop=loop, **kwargs)
        self._on_closed: Callable[[], None] | None = on_closed
        self._quiet = quiet
        self._event_loop = loop
        self.busy = False  # a request of this connection is being handled (AdminServer._handle)
        self.eof = False   # the client shut down its write side
        # aiohttp's shutdown() sets self.transport to None after a close() that may still wait
        # on unsent bytes: the server's stop aborts this one, so no socket outlives the loop
        self.socket_transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.socket_transport = transport

    def connection_lost(self, exc: BaseException | None) -> None:
        """aiohttp's cleanup, then the connection count (exactly once)."""
        try:
            super().connection_lost(exc)
        finally:
            if self._on_closed is not None:
                self._on_closed()
                self._on_closed = None

    def eof_received(self) -> bool:  # type: ignore[override]  # asyncio allows bool | None
        """The client shut down its write side: stay writable (True)."""
        # True keeps the write side open, so a client that half-closed mid-body gets its 408 at
        # the read timeout, not a silent close. An idle connection closes at once (its slot is
        # free again); checked one loop turn later, after the handler of a request that arrived
        # just before the FIN has started and marked the connection busy.
        self.eof = True
        self._event_loop.call_soon(self.close_if_idle)
        return True

    def close_if_idle(self) -> None:
        """Close a half-closed connection that has no request in hand."""
        if self.eof and not self.busy and self.transport is not None:
            self.transport.close()

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None, message: str | None = None) -> web.StreamResponse:
        """aiohttp's reply to a request its parser refused (or a 500): JSON, one log line."""
        if request.writer.output_size > 0:
            raise ConnectionError("reply already started; cannot send the error")
        reason = (message or str(exc) or type(exc).__name__).strip().splitlines()[0]
        kind = "malformed request" if status < 500 else "request failed"
        self._quiet(kind, "%s from %s (%d: %s)", kind, request.remote, status, reason)
        resp = web.json_response({"error": f"{kind}: {reason}", "field": None}, status=status)
        resp.force_close()
        return resp


class _Refused(asyncio.Protocol):
    """A connection over the limit: closed at once (the client sees a reset and retries)."""

    def __init__(self, pending: set[_Refused]) -> None:
        self.pending = pending  # the server's: made, not yet lost (its stop waits for them)
        self.pending.add(self)
        self.socket_transport: asyncio.BaseTransport | None = None

    def connection_lost(self, exc: BaseException | None) -> None:
        self.pending.discard(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.socket_transport = transport
        """Close at once."""
        transport.close()


class _Listener:
    """One listening socket's connections, oldest first, and its limit."""

    def __init__(self, name: str, limit: int) -> None:
        self.name, self.limit = name, limit
        self.connections: dict[_Connection, None] = {}  # insertion order: oldest first

    def admit(self, quiet: QuietLog) -> bool:
        """Room for one more? At the limit a new connection is closed at accept."""
        if len(self.connections) < self.limit:
            return True
        quiet("limit", "refused a connection on %s: %d open, the limit is %d", self.name,
              len(self.connections), self.limit)
        return False


class AdminServer:
    """The admin endpoint: start() binds (raising OSError), close() stops everything it made."""

    def __init__(self, engine: EngineState, token: str | None, limits: Limits = Limits()) -> None:
        self.engine, self.token, self.limits = engine, token, limits
        self.quiet = QuietLog()
        self.listeners: list[_Listener] = []
        self.uds: str | None = None
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_error)
        self._thread = threading.Thread(target=self._loop.run_forever, name="tabletune-admin",
                                        daemon=True)
        self._servers: list[asyncio.Server] = []
        self._web: web.Server | None = None
        self._refused: set[_Refused] = set()  # refused connections not yet lost

    @property
    def open_connections(self) -> int:
        return sum(len(lst.connections) for lst in self.listeners)

    # -- lifecycle (called from any thread) ------------------------------------------------
    def start(self, host: str, port: int, uds: str | None = None) -> None:
        """Bind host:port (and the Unix socket ``uds``) and serve on the daemon thread; OSError
        (everything closed) if not."""
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(host, port, uds), self._loop).result(10.0)
        except BaseException:
            self.close()
            raise

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop listening, close every connection, stop the loop and its thread."""
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout_s)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout_s)
        if not self._thread.is_alive():  # a loop still running cannot be closed
            self._loop.close()

    async def _start(self, host: str, port: int, uds: str | None) -> None:
        # The connection settings go to _Connection (see _protocol), which this server's own
        # protocol factory would otherwise build; it only tracks connections and shuts them down.
        self._web = web.Server(self._handle, loop=self._loop)
        limit = _connection_limit(self.limits.max_connections)
        tcp = _Listener(f"{host}:{port}", limit)
        self.listeners.append(tcp)
        self._servers.append(await self._loop.create_server(
            lambda: self._protocol(tcp), host, port, backlog=self.limits.backlog))
        if uds is not None:
            _remove_stale_socket(uds)
            unix = _Listener(uds, limit)
            self.listeners.append(unix)
            self._servers.append(await self._loop.create_unix_server(
                lambda: self._protocol(unix), uds, backlog=self.limits.backlog))
            self.uds = uds
            os.chmod(uds, 0o660)  # the pod's group (fsGroup) may connect, nobody else

    async def _stop(self) -> None:
        # stop accepting, but close the servers last: an accepted connection whose transport is
        # made after its server closed trips 3.11's Server._attach assertion inside asyncio, and
        # that half-made transport's socket leaks (CI's flaky ResourceWarning after the flood test)
        for server in self._servers:
            for sock in server.sockets:
                self._loop.remove_reader(sock.fileno())
        for _ in range(3):  # the connections already accepted get their transports
            await asyncio.sleep(0)
        if self._web is not None:
            await self._web.shutdown(timeout=1.0)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # a connection whose client stopped reading keeps unsent bytes, and close() waits for
        # them forever: abort it, or its socket outlives the loop (an unclosed transport, which
        # the garbage collector reports in whatever runs next: CI's flaky admin fuzz test)
        for _ in range(200):  # until every connection is lost, i.e. its socket closed
            pending = self._pending()
            if not pending:
                break
            for transport in (p.socket_transport for p in pending):
                if transport is not None:  # None: accepted, connection_made still to run
                    transport.abort()  # type: ignore[attr-defined]  # idempotent
            await asyncio.sleep(0.005)
        for server in self._servers:
            server.close()
        if self.uds is not None:
            _remove_stale_socket(self.uds)

    def _pending(self) -> list[_Connection | _Refused]:
        """Every connection this server accepted that is not yet lost."""
        return [*(c for lst in self.listeners for c in lst.connections), *self._refused]

    # -- connections ------------------------------------------------------------------------
    def _protocol(self, listener: _Listener) -> asyncio.BaseProtocol:
        if not listener.admit(self.quiet):
            return _Refused(self._refused)
        assert self._web is not None
        conn = _Connection(lambda: listener.connections.pop(conn, None), self.quiet, self._web,
                           loop=self._loop, access_log=None, logger=log,
                           keepalive_timeout=self.limits.idle_timeout_s,
                           lingering_time=self.limits.read_timeout_s)
        listener.connections[conn] = None
        return conn

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        self.quiet("loop", "%s (%s)", context.get("message", "event loop error"),
                   exc if exc is not None else "no exception")

    # -- requests ---------------------------------------------------------------------------
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        conn = request.protocol if isinstance(request.protocol, _Connection) else None
        if conn is not None:
            conn.busy = True
        try:
            return await self._reply(request)
        finally:
            if conn is not None:
                conn.busy = False
                conn.close_if_idle()

    async def _reply(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            status, payload = 200, await self._respond(request)
        except HttpError as exc:
            status, payload = exc.status, exc.body()
        except ConnectionError as exc:
            self.quiet("gone", "client %s went away before its request was complete (%s); "
                       "nothing was changed", request.remote, exc)
            return web.Response(status=400)  # nobody reads it; aiohttp drops it quietly
        except Exception as exc:  # a bug here must not take the engine down
            log.exception("TableTune admin handler failed on %s %s", request.method, request.path)
            status, payload = 500, {"error": f"internal error: {type(exc).__name__}", "field": None}
        resp = web.json_response(payload, status=status)
        if status in (408, 413):  # the rest of the body is unread: this connection is done
            resp.force_close()
        await self._send(request, resp)
        return resp

    async def _respond(self, request: web.BaseRequest) -> dict[str, Any]:
        if request.method == "GET":
            return admin.get(self.engine, request.path, request.query)
        if request.method != "PUT":
            raise HttpError(405, f"method {request.method} not allowed; use GET or PUT")
        route = admin.put_route(request.path)
        admin.authorize(self.token, request.headers.get("Authorization", ""))
        return route(self.engine, await self._read_body(request))

    async def _read_body(self, request: web.BaseRequest) -> bytes:
        limit, timeout_s = self.limits.max_body_bytes, self.limits.read_timeout_s
        declared = request.content_length
        if declared is not None and declared > limit:
            raise HttpError(413, f"body of {declared} bytes exceeds {limit}")
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(timeout_s):
                while chunk := await request.content.readany():
                    size += len(chunk)
                    if size > limit:
                        raise HttpError(413, f"body exceeds {limit} bytes")
                    chunks.append(chunk)
        except TimeoutError:
            raise HttpError(408, f"body incomplete after {timeout_s:g} s ({size} of "
                                 f"{declared if declared is not None else 'chunked'} bytes); "
                                 "nothing was changed") from None
        except HttpProcessingError as exc:
            raise HttpError(400, f"malformed body: {exc.message}") from None
        return b"".join(chunks)

    async def _send(self, request: web.BaseRequest, resp: web.StreamResponse) -> None:
        """Write the reply here, under the write timeout (aiohttp would wait forever)."""
        try:
            async with asyncio.timeout(self.limits.write_timeout_s):
                await resp.prepare(request)
                await resp.write_eof()
        except TimeoutError:
            self.quiet("stalled", "client %s did not take its reply within %g s; connection "
                       "closed", request.remote, self.limits.write_timeout_s)
            if request.transport is not None:
                request.transport.abort()
        except ConnectionError as exc:
            self.quiet("gone", "client %s went away before its reply (%s)", request.remote, exc)


def _connection_limit(wanted: int) -> int:
    """``wanted``, but at most a quarter of the process's file descriptors: the engine needs
    the rest, and an accept() that fails for want of one pauses asyncio's accepting for 1 s."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return wanted if soft == resource.RLIM_INFINITY else max(1, min(wanted, soft // 4))


def _remove_stale_socket(path: str) -> None:
    """A socket file left by an engine that died (bind would fail on it); never another file."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


def serve(engine: EngineState, host: str, port: int, token: str | None,
          limits: Limits = Limits(), uds: str | None = None) -> AdminServer | None:
    """Start the admin server on a daemon thread; None (and a log line) if it cannot bind."""
    server = AdminServer(engine, token, limits)
    try:
        server.start(host, port, uds)
    except OSError as exc:
        log.error("TableTune admin endpoint could not bind %s:%d%s (%s); vLLM keeps serving "
                  "without it", host, port, f" and {uds}" if uds else "", exc)
        return None
    log.info("TableTune admin endpoint on http://%s:%d%s (token %s)", host, port,
             f" and unix:{uds}" if uds else "", "required" if token else "not configured")
    return server
