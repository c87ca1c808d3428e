"""PUT /v1/table on a K=3, max_num_seqs=32 engine (the admin server in-process, no engine): a
table reaching past max_num_seqs is stored cut as vLLM's lookup cuts it, the reply says what was
cut, K is checked on every range kept (issue #39 item 3)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.vllm_patch.test_admin_fuzz import TOKEN, new_engine, put, serving
from tuner.core.admin_api import TableReply
from tuner.core.engine_client import AdminRejected, EngineClient
from tuner.core.table import Table
from vllm_patch.settings import MAX_BODY_BYTES
from vllm_patch.engine_state import EngineState

START = Table.from_list([[1, 4, 3], [5, 32, 1]])
MANY = [[b, b, 1] for b in range(1, 4096)]  # the issue's 4,095-range table


@pytest.fixture
def admin() -> Iterator[tuple[str, EngineState]]:
    with serving(new_engine(START, max_num_seqs=32)) as served:
        yield served


def put_table(url: str, table: list[list[int]]) -> tuple[int, dict[str, Any]]:
    return put(url + "/v1/table", json.dumps({"table": table}, separators=(",", ":")).encode())


@pytest.mark.parametrize(("sent", "stored", "clipped"), [
    ([[1, 33, 1]], [[1, 32, 1]], "ranges[0] end_bs=33 cut to 32"),
    ([[1, 8, 3], [9, 10**9, 1]], [[1, 8, 3], [9, 32, 1]], "ranges[1] end_bs=1000000000 cut to 32"),
    (MANY, MANY[:32], "ranges[32..4094] dropped (start_bs > 32)"),
    # K=9 on a K=3 engine, but in a range vLLM drops: it never reaches the engine
    ([[1, 32, 1], [33, 40, 9]], [[1, 32, 1]], "ranges[1] dropped (start_bs > 32)"),
])
def test_a_table_past_max_num_seqs_is_stored_cut_and_the_reply_says_so(
        admin: tuple[str, EngineState], sent: list[list[int]], stored: list[list[int]],
        clipped: str) -> None:
    url, engine = admin
    status, reply = put_table(url, sent)
    assert status == 200, reply
    assert reply["table"] == stored and reply["version"] == 2
    assert reply["clipped"] == f"fitted to max_num_seqs=32 as vLLM does: {clipped}"
    assert engine.table is not None and engine.table.table.to_list() == stored
    assert engine.table.dense == tuple(Table.from_list(sent).dense(32, 3))
    with urllib.request.urlopen(url + "/v1/table", timeout=5) as r:
        body = r.read()
    assert json.loads(body)["table"] == stored and "clipped" not in json.loads(body)
    assert len(body) < 2048  # the 4,095-range table was 67 KB here


def test_the_issues_table_is_under_the_body_limit() -> None:
    body = json.dumps({"table": MANY}, separators=(",", ":")).encode()
    assert 50_000 < len(body) <= MAX_BODY_BYTES  # so it is the fit, not the limit, that bounds it


def test_a_table_that_fits_is_stored_as_sent(admin: tuple[str, EngineState]) -> None:
    url, engine = admin
    status, reply = put_table(url, [[1, 8, 3], [20, 30, 0]])  # a gap and a short tail: vLLM's own
    assert status == 200 and reply["table"] == [[1, 8, 3], [20, 30, 0]] and reply["clipped"] is None


@pytest.mark.parametrize(("sent", "error"), [
    ([[1, 8, 4]], "ranges[0]: K=4 exceeds num_speculative_tokens=3"),
    # a kept range is checked even when its end is cut
    ([[1, 8, 1], [9, 40, 9]], "ranges[1]: K=9 exceeds num_speculative_tokens=3"),
    # the whole body must be a table vLLM accepts, dropped ranges included
    ([[1, 32, 1], [40, 33, 1]], "ranges[1]: start_bs=40 > end_bs=33"),
])
def test_k_beyond_the_engines_in_a_kept_range_is_422(admin: tuple[str, EngineState],
                                                    sent: list[list[int]], error: str) -> None:
    url, engine = admin
    status, reply = put_table(url, sent)
    assert status == 422 and reply["field"] == "table" and reply["error"].startswith(error)
    assert engine.table is not None and engine.table.version == 1


async def test_the_client_reads_what_was_cut(admin: tuple[str, EngineState]) -> None:
    url, _ = admin
    async with EngineClient(admin_url=url, token=TOKEN) as client:
        reply = await client.put_table(Table.from_list([[1, 8, 3], [9, 64, 1]]))
        assert isinstance(reply, TableReply) and reply.table == [[1, 8, 3], [9, 32, 1]]
        assert reply.clipped is not None and "ranges[1] end_bs=64 cut to 32" in reply.clipped
        assert (await client.get_table()).clipped is None
        with pytest.raises(AdminRejected, match=r"ranges\[0\]: K=4"):
            await client.put_table(Table.from_list([[1, 64, 4]]))


def test_an_older_plugins_reply_parses() -> None:
    reply = TableReply.model_validate({"table": [[1, 32, 1]], "num_speculative_tokens": 3,
                                       "max_num_seqs": 32})
    assert reply.clipped is None
