"""The admin endpoint on its own (no engine): random bodies never produce a 5xx and never change
the table unless they are a valid table; token and size limits hold."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.launcher import free_port
from tuner.core.table import Table
from vllm_patch.admin_server import serve
from vllm_patch.settings import MAX_BODY_BYTES
from vllm_patch.engine_state import Counters, EngineState, Policy, TableState

TOKEN = "fuzz-token"
START = Table.from_list([[1, 4, 3], [5, 16, 1]])


def new_engine(start: Table = START, max_num_seqs: int = 16) -> EngineState:
    """A K=3 engine's state running ``start`` (no vLLM: the admin endpoint's side only)."""
    return EngineState(table=TableState(start, tuple(start.dense(max_num_seqs, 3)), 1, time.time()),
                       policy=Policy(), num_speculative_tokens=3, max_num_seqs=max_num_seqs,
                       model_name="m", startup_k=frozenset({1, 3}), restrict_k=False,
                       counters=Counters(num_positions=3), applied_version=1)


@contextmanager
def serving(engine: EngineState) -> Iterator[tuple[str, EngineState]]:
    """The admin endpoint in-process on a free port, closed by the test that opened it."""
    port = free_port()
    server = serve(engine, "127.0.0.1", port, TOKEN)
    assert server is not None
    try:
        yield f"http://127.0.0.1:{port}", engine
    finally:
        server.close()


@pytest.fixture(scope="module")
def admin() -> Iterator[tuple[str, EngineState]]:
    with serving(new_engine()) as served:
        yield served


def put(url: str, body: bytes, token: str | None = TOKEN) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=body, method="PUT")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        with e:  # its body is the open response: closed here, not by the garbage collector
            return e.code, json.load(e)


json_values = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats()
                           | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(["/v1/table", "/v1/policy", "/v1/emulation"]),
       body=st.one_of(json_values.map(lambda v: json.dumps(v).encode()),
                      st.fixed_dictionaries({"table": json_values}).map(lambda v: json.dumps(v).encode()),
                      st.binary(max_size=40)))
def test_random_bodies_never_5xx_and_never_corrupt_the_table(admin: tuple[str, EngineState],
                                                             route: str, body: bytes) -> None:
    url, engine = admin
    before = engine.table
    status, reply = put(url + route, body)
    assert status < 500, reply
    after = engine.table
    assert after is not None and before is not None
    if after is not before:  # only a valid table may change it, and it must be fully valid
        assert status == 200 and route == "/v1/table"
        assert after.dense == tuple(after.table.dense(16, 3)) and after.version == before.version + 1


def test_token_and_size_limits(admin: tuple[str, EngineState]) -> None:
    url, _ = admin
    good = json.dumps({"table": [[1, 16, 2]]}).encode()
    assert put(url + "/v1/table", good, token=None)[0] == 401
    assert put(url + "/v1/table", good, token="wrong")[0] == 401
    assert put(url + "/v1/table", b"x" * (MAX_BODY_BYTES + 1))[0] == 413
    status, reply = put(url + "/v1/table", good)
    assert status == 200 and reply["table"] == [[1, 16, 2]]
    assert put(url + "/v1/emulation", json.dumps({"rates": [0.5]}).encode())[0] == 409


def test_policy_baseline_switch(admin: tuple[str, EngineState]) -> None:
    url, engine = admin
    status, reply = put(url + "/v1/policy", json.dumps({"baseline": "nightjar"}).encode())
    assert status == 200 and reply["baseline"] == "nightjar" and engine.policy.baseline == "nightjar"
    assert put(url + "/v1/policy", json.dumps({"baseline": "ucb"}).encode())[0] == 422
    status, reply = put(url + "/v1/policy", json.dumps({"baseline": "none"}).encode())
    assert status == 200 and reply["baseline"] is None
