"""The admin server on raw sockets (no engine): malformed and incomplete requests are 4xx that
change nothing, stalled connections are closed and bounded, a client that goes away is one log
line, concurrent PUTs never lose a version, and the swap latency waits for a step."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.vllm_patch.test_admin_fuzz import TOKEN, new_engine
from tuner.launcher import free_port
from vllm_patch.admin_server import AdminServer, Limits, serve
from vllm_patch.policy import PolicyLookup
from vllm_patch.engine_state import EngineState

GOOD = json.dumps({"table": [[1, 16, 2]]}).encode()
LIMITS = Limits(idle_timeout_s=0.3, read_timeout_s=0.3, write_timeout_s=0.3, max_connections=8)


@dataclass
class Admin:
    port: int
    engine: EngineState
    server: AdminServer

    def connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return s

    def request(self, head: bytes, body: bytes = b"", half_close: bool = False) -> tuple[int, dict]:
        """Send raw bytes; read the reply until the server closes; (status, JSON body)."""
        with self.connect() as s:
            s.sendall(head + body)
            if half_close:
                s.shutdown(socket.SHUT_WR)
            return parse(read_all(s))

    def wait_idle(self) -> None:
        """Until the server holds no connection (it closes them after its timeouts), and has
        finished with them: a handler may still log after its connection is gone, and the
        server answers requests in order."""
        deadline = time.monotonic() + 10
        while self.server.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.server.open_connections == 0
        assert self.request(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[0] == 200


def read_all(s: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def parse(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head, "the server closed without a reply"
    return int(head.split()[1]), json.loads(body)


def put_head(length: str | int, route: str = "/v1/table", token: str | None = TOKEN) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"PUT {route} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


@contextlib.contextmanager
def running(limits: Limits = LIMITS) -> Iterator[Admin]:
    engine = new_engine()
    port = free_port()
    server = serve(engine, "127.0.0.1", port, TOKEN, limits)
    assert server is not None
    try:
        yield Admin(port, engine, server)
    finally:
        server.close()


@pytest.fixture
def admin() -> Iterator[Admin]:
    with running() as a:
        yield a


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "0x10", "+16", "16, 16", "1" * 30])
@pytest.mark.parametrize("half_close", [False, True])
def test_malformed_content_length_is_a_400_that_changes_nothing(admin: Admin, length: str,
                                                                half_close: bool) -> None:
    status, body = admin.request(put_head(length), GOOD, half_close=half_close)
    assert status == 400 and "Content-Length" in body["error"], body
    assert admin.engine.table is not None and admin.engine.table.version == 1


def test_short_body_then_half_close_is_a_408_that_changes_nothing(admin: Admin) -> None:
    status, body = admin.request(put_head(len(GOOD) + 10), GOOD, half_close=True)
    assert status == 408 and "nothing was changed" in body["error"]
    assert admin.engine.table is not None and admin.engine.table.version == 1


def test_short_body_then_close_changes_nothing(admin: Admin) -> None:
    with admin.connect() as s:
        s.sendall(put_head(len(GOOD) + 10) + GOOD)
    admin.wait_idle()
    assert admin.engine.table is not None and admin.engine.table.version == 1
    assert admin.request(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


def test_complete_body_then_half_close_gets_its_reply(admin: Admin) -> None:
    status, body = admin.request(put_head(len(GOOD)), GOOD, half_close=True)
    assert status == 200 and body["table"] == [[1, 16, 2]] and body["version"] == 2


def test_oversized_bodies_are_413(admin: Admin) -> None:
    big = LIMITS.max_body_bytes + 1
    assert admin.request(put_head(big), b"x" * big)[0] == 413
    chunk = b"x" * 8192
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(9)) + b"0\r\n\r\n"
    head = (f"PUT /v1/table HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    assert admin.request(head, chunked)[0] == 413
    assert admin.engine.table is not None and admin.engine.table.version == 1


def test_stalled_connections_are_bounded_and_closed(admin: Admin) -> None:
    threads = threading.active_count()
    stalled = []
    for i in range(40):  # half of them stop in the headers, half in the body
        s = admin.connect()
        s.sendall(put_head(100)[:20] if i % 2 else put_head(100) + b'{"table"')
        stalled.append(s)
        assert admin.server.open_connections <= LIMITS.max_connections
    assert threading.active_count() == threads  # no thread per connection
    for s in stalled:  # every one is closed by the server: refused, timed out, or a 408
        with s:
            raw = read_all(s)
            assert raw == b"" or parse(raw)[0] == 408
    admin.wait_idle()
    assert admin.engine.table is not None and admin.engine.table.version == 1
    assert admin.request(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == (200, {"ok": True})


def reset(s: socket.socket) -> None:
    """Close with an RST instead of a FIN (SO_LINGER on, timeout 0)."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def test_client_reset_mid_body_is_one_quiet_line(admin: Admin,
                                                 logs: list[logging.LogRecord]) -> None:
    s = admin.connect()
    s.sendall(put_head(len(GOOD) + 10) + GOOD)
    time.sleep(0.05)  # the server is now waiting for the rest of the body
    reset(s)
    admin.wait_idle()
    deadline = time.monotonic() + 10  # the line comes from the handler, after the connection
    while not (gone := [r for r in logs if "went away" in r.getMessage()]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(gone) == 1 and gone[0].levelno == logging.INFO
    assert not [r for r in logs if r.exc_info or r.levelno >= logging.WARNING]
    assert admin.engine.table is not None and admin.engine.table.version == 1


def test_client_reset_before_the_reply_logs_no_traceback(admin: Admin,
                                                         logs: list[logging.LogRecord]) -> None:
    for _ in range(5):
        s = admin.connect()
        s.sendall(b"GET /v1/stats HTTP/1.1\r\nHost: x\r\n\r\n")
        reset(s)
    admin.wait_idle()
    assert not [r for r in logs if r.exc_info or r.levelno >= logging.WARNING]
    assert len([r for r in logs if r.levelno == logging.INFO]) <= 1
    assert admin.request(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


def test_other_methods_and_routes(admin: Admin) -> None:
    assert admin.request(b"POST /v1/table HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")[0] == 405
    assert admin.request(b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 404
    assert admin.request(put_head(2, route="/v1/nothing"), b"{}")[0] == 404
    assert admin.request(b"garbage\r\n\r\n")[0] == 400


def put(url: str, body: bytes) -> dict:
    req = urllib.request.Request(url, data=body, method="PUT",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def test_concurrent_puts_each_get_their_own_version() -> None:
    with running(Limits(max_connections=64)) as admin:
        check_concurrent_puts(admin)


def check_concurrent_puts(admin: Admin) -> None:
    versions: list[int] = []
    url = f"http://127.0.0.1:{admin.port}/v1/table"

    def one(k: int) -> None:
        versions.append(put(url, json.dumps({"table": [[1, 16, k % 4]]}).encode())["version"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(versions) == list(range(2, 18))
    assert admin.engine.table is not None and admin.engine.table.version == 17


def test_a_conditional_put_writes_only_over_the_version_it_read(admin: Admin) -> None:
    url = f"http://127.0.0.1:{admin.port}/v1/table"
    assert admin.engine.table is not None
    read = admin.engine.table.version
    assert put(url, json.dumps({"table": [[1, 16, 1]], "if_version": read}).encode())[
        "version"] == read + 1
    with pytest.raises(urllib.error.HTTPError) as got:  # read is stale now
        put(url, json.dumps({"table": [[1, 16, 3]], "if_version": read}).encode())
    with got.value as refused:  # its body is the open response: closed here, not by the GC
        assert refused.code == 409
        err = json.load(refused)
    assert err["field"] == "if_version" and f"at version {read + 1} now" in err["error"]
    assert admin.engine.table.version == read + 1 and admin.engine.table.table.to_list() == [[1, 16, 1]]


def test_swap_latency_is_pending_until_a_step_uses_the_table(admin: Admin) -> None:
    url = f"http://127.0.0.1:{admin.port}/v1/table"
    lookup = PolicyLookup(admin.engine, lambda exc: None)
    lookup[4]  # a step on the startup table: no swap to report
    assert put(url, GOOD)["swap_latency_s"] is None
    with urllib.request.urlopen(url, timeout=10) as r:
        assert json.load(r)["swap_latency_s"] is None  # no step since the swap
    assert lookup[4] == 2  # the next step uses it
    with urllib.request.urlopen(url, timeout=10) as r:
        latency = json.load(r)["swap_latency_s"]
    assert latency is not None and latency >= 0
    assert put(url, json.dumps({"table": [[1, 16, 1]]}).encode())["swap_latency_s"] is None


def test_a_port_in_use_is_none_and_closes_everything(admin: Admin) -> None:
    threads = threading.active_count()
    assert serve(admin.engine, "127.0.0.1", admin.port, TOKEN, LIMITS) is None
    assert threading.active_count() == threads


def test_a_client_that_closes_frees_its_slot_at_once() -> None:
    """Keep-alive clients that read their reply and close: the server must not hold their
    connections until its (here long) idle timeout, or the limit would refuse the next ones."""
    with running(Limits(idle_timeout_s=60, read_timeout_s=60, max_connections=4)) as admin:
        for _ in range(12):
            with admin.connect() as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                head = b""
                while b"\r\n\r\n" not in head:
                    head += s.recv(4096)
                assert head.startswith(b"HTTP/1.1 200")
        admin.wait_idle()


def test_stats_since_returns_only_newer_steps(admin: Admin) -> None:
    for b in (1, 2, 3, 4):
        admin.engine.counters.record_step(b, 3, 0.01, tokens=b)
    get = b"GET /v1/stats?since=%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    status, body = admin.request(get % b"2")
    assert status == 200 and [s[0] for s in body["recent_steps"]] == [3, 4]
    assert body["transition_steps"] == 1  # the first step verified nothing and drafted 3
    assert body["step_times"] == [[2, 3, 0.01, 1], [3, 3, 0.01, 1], [4, 3, 0.01, 1]]
    for bad in (b"-1", b"abc", b"1e3", b"", b"1" * 30):
        status, body = admin.request(get % bad)
        assert status == 422 and body["field"] == "since", (bad, body)


def test_policy_exploration_fields(admin: Admin) -> None:
    url = f"http://127.0.0.1:{admin.port}/v1/policy"
    assert put(url, b'{"explore_every": 50}') == {"explore_every": 50, "explore_run": 3,
                                                  "hysteresis": 0, "baseline": None, "duels": [],
                                                  "duel_run": 16, "duel_share": 0.02,
                                                  "duel_horizon": 10_000, "explore_ks": []}
    assert put(url, b'{"explore_run": 5}')["explore_run"] == 5
    for body, field in ((b'{"explore_every": 5}', "explore_every"), (b'{"explore_run": 50}', "explore_run"),
                        (b'{"explore_run": 0}', "explore_run")):
        status, reply = admin.request(put_head(len(body), "/v1/policy"), body)
        assert status == 422 and reply["field"] == field, reply
    assert admin.engine.policy.explore_every == 50 and admin.engine.policy.explore_run == 5
    assert put(url, b'{"explore_every": 2, "explore_run": 1}')["explore_every"] == 2


def test_the_rotations_ks_are_checked_against_the_engine_and_kept_sorted(admin: Admin) -> None:
    url = f"http://127.0.0.1:{admin.port}/v1/policy"
    assert put(url, b'{"explore_ks": [2, 0, 2]}')["explore_ks"] == [0, 2]
    assert put(url, b'{"explore_every": 60}')["explore_ks"] == [0, 2]   # other fields keep it
    K = admin.engine.num_speculative_tokens
    body = f'{{"explore_ks": [1, {K + 1}]}}'.encode()
    status, reply = admin.request(put_head(len(body), "/v1/policy"), body)
    assert status == 422 and reply["field"] == "explore_ks" and f"k=[{K + 1}]" in reply["error"], reply
    assert admin.engine.policy.explore_ks == (0, 2)          # a refused body changes nothing
    assert put(url, b'{"explore_ks": []}')["explore_ks"] == []         # every runnable k again


def test_policy_duels_are_checked_against_the_engine(admin: Admin) -> None:
    url = f"http://127.0.0.1:{admin.port}/v1/policy"
    reply = put(url, b'{"duels": [[9, 16, [1, 2]]], "duel_run": 12, "duel_share": 0.05}')
    assert reply["duels"] == [[9, 16, [1, 2]]] and reply["duel_run"] == 12
    assert admin.engine.policy.duels == ((9, 16, (1, 2)),) and admin.engine.policy.explore_run == 3
    n = admin.engine.max_num_seqs
    K = admin.engine.num_speculative_tokens
    for body in ('{"duels": [[0, 4, [1]]]}', f'{{"duels": [[1, {n + 1}, [1]]]}}',
                 '{"duels": [[5, 4, [1]]]}', f'{{"duels": [[1, 4, [{K + 1}]]]}}',
                 '{"duel_share": 0.9}', '{"duel_run": 1}', '{"duels": [[1, 4, ["1"]]]}'):
        status, reply = admin.request(put_head(len(body), "/v1/policy"), body.encode())
        assert status == 422 and reply["field"].startswith("duel"), (body, reply)
    assert admin.engine.policy.duels == ((9, 16, (1, 2)),)  # a refused body changed nothing
    assert put(url, b'{"duels": []}')["duels"] == []
