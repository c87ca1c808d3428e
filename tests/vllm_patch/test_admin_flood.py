"""Stalled connections cannot lock the sidecar out of the admin endpoint (#27.2), real sockets.

The attack of the issue: 300 TCP connections held open, half silent and half stopped inside
their headers, each reopened as soon as the server closes it. Meanwhile a client that sends a
well-formed request at once, as the sidecar does, must be served (p99 within 2 s), over TCP
and over the Unix-domain socket, and the server thread count stays flat.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from tests.vllm_patch.test_admin_fuzz import TOKEN, new_engine
from tests.vllm_patch.test_admin_server import GOOD, parse, put_head, read_all
from tuner.launcher import free_port
from vllm_patch.admin_server import Limits, serve

NUM_STALLED = 300
GET = b"GET /v1/table HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


@contextlib.contextmanager
def stalled(port: int, count: int = NUM_STALLED) -> Iterator[list[int]]:
    """``count`` stalled connections, reopened as the server closes them (one thread, a
    selector); yields [reopened] (a count, updated as it goes)."""
    sel, stop, reopened = selectors.DefaultSelector(), threading.Event(), [0]

    def open_one(i: int) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"" if i % 2 else put_head(100)[:25])  # silent, or inside the headers
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, i)
        except OSError:
            time.sleep(0.01)  # refused: try again on the next turn

    def attack() -> None:
        for i in range(count):
            open_one(i)
        while not stop.is_set():
            for key, _ in sel.select(timeout=0.05):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                try:
                    data = s.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:  # closed by the server: reopen at once
                    sel.unregister(s)
                    s.close()
                    reopened[0] += 1
                    open_one(key.data)
            while len(sel.get_map()) < count and not stop.is_set():
                open_one(len(sel.get_map()))

    thread = threading.Thread(target=attack, daemon=True)
    thread.start()
    try:
        time.sleep(1.0)  # every stalled connection is open before the clients start
        yield reopened
    finally:
        stop.set()
        thread.join(10)
        for key in list(sel.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        sel.close()


def served_within(connect: Callable[[], socket.socket], seconds: float) -> list[float]:
    """A sidecar-like client for ``seconds``: a GET, then an authorized PUT, every 50 ms, each
    on a new connection; every latency (connect to the whole reply). Refusals fail the test."""
    latencies: list[float] = []
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        close = put_head(len(GOOD)).replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
        request = GET if i % 2 else close + GOOD
        t0 = time.monotonic()
        with connect() as s:
            s.sendall(request)
            status, _ = parse(read_all(s))
        latencies.append(time.monotonic() - t0)
        assert status == 200
        i += 1
        time.sleep(0.05)
    return latencies


def tcp(port: int) -> Callable[[], socket.socket]:
    return lambda: socket.create_connection(("127.0.0.1", port), timeout=10)


def unix(path: Path) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(str(path))
        return s
    return connect


def test_300_stalled_connections_do_not_lock_a_client_out() -> None:
    port = free_port()
    server = serve(new_engine(), "127.0.0.1", port, TOKEN, Limits(idle_timeout_s=1.0))
    assert server is not None
    threads = threading.active_count()
    try:
        with stalled(port) as reopened:
            latencies = served_within(tcp(port), 6.0)
            assert server.open_connections >= NUM_STALLED // 2  # the attack held its sockets
            assert threading.active_count() == threads + 1  # the attacker's; none per connection
        assert reopened[0] >= NUM_STALLED // 2  # the idle timeout closed them, they came back
        assert np.quantile(latencies, 0.99) < 2.0, sorted(latencies)[-5:]
    finally:
        server.close()


def test_the_unix_socket_serves_while_tcp_is_flooded_past_its_limit(tmp_path: Path) -> None:
    # 300 stalled against a TCP limit of 32: TCP refuses, the Unix socket's own slots serve
    port, path = free_port(), tmp_path / "admin.sock"
    path.touch()  # not a socket: a file the server must not remove
    assert serve(new_engine(), "127.0.0.1", port, TOKEN, uds=str(path)) is None
    path.unlink()
    server = serve(new_engine(), "127.0.0.1", port, TOKEN,
                   Limits(idle_timeout_s=5.0, max_connections=32), uds=str(path))
    assert server is not None
    try:
        assert path.is_socket() and path.stat().st_mode & 0o777 == 0o660
        with stalled(port):
            latencies = served_within(unix(path), 3.0)
            assert server.listeners[0].connections and len(server.listeners[0].connections) <= 32
        assert np.quantile(latencies, 0.99) < 2.0
    finally:
        server.close()
    assert not path.exists()
    # a socket file left by an engine that died is replaced
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
    again = serve(new_engine(), "127.0.0.1", free_port(), TOKEN, uds=str(path))
    assert again is not None
    again.close()


async def test_the_engine_client_speaks_to_the_unix_socket(tmp_path: Path) -> None:
    from tuner.core.engine_client import EngineClient
    from tuner.core.table import Table

    path = tmp_path / "admin.sock"
    server = serve(new_engine(), "127.0.0.1", free_port(), TOKEN, uds=str(path))
    assert server is not None
    try:
        async with EngineClient("", f"unix:{path}", TOKEN) as client:
            assert (await client.get_table()).version == 1
            reply = await client.put_table(Table.from_list([[1, 16, 2]]))
            assert reply.table == [[1, 16, 2]] and reply.version == 2
    finally:
        server.close()
