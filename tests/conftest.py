"""Shared fixtures: one real vLLM CPU server for the whole session.

It runs ngram with K=3, a DSD table, the plugin's admin endpoint (with a token) and the
acceptance emulator enabled at rates 1.0 (no cap) so tests can switch it to reject-all.
Tests that change the table, policy or emulation put the defaults back (see `engine_defaults`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from hypothesis import settings

from benchmarks.synthetic import paper_profile
from tuner.engine_defaults import default_model, plugin_env, vocab_size
from tuner.launcher import ServerConfig, SpeculativeSpec, VllmServer, free_port, launch
from tuner.core.table import Table

# No per-example deadline: the session's vLLM shares the cores with the tests, and speed is
# measured in benchmarks, not asserted in tests (a 200 ms deadline flaked under that load).
settings.register_profile("tabletune", deadline=None)
settings.load_profile("tabletune")

TOKEN = "test-token-123"
STARTUP_TABLE = [[1, 4, 3], [5, 16, 1]]
MAX_NUM_SEQS = 16


@dataclass
class Engine:
    server: VllmServer
    admin_url: str
    token: str
    vocab_size: int

    @property
    def url(self) -> str:
        return self.server.url

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def admin(self, method: str, route: str, body: Any = None,
                    token: str | None = "default") -> tuple[int, dict[str, Any]]:
        headers = self.auth() if token == "default" else (
            {"Authorization": f"Bearer {token}"} if token else {})
        async with aiohttp.ClientSession() as s:
            async with s.request(method, self.admin_url + route, json=body, headers=headers) as r:
                return r.status, await r.json()

    async def stats(self) -> dict[str, Any]:
        status, body = await self.admin("GET", "/v1/stats")
        assert status == 200
        return body


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def engine() -> AsyncIterator[Engine]:
    paths = default_model()
    admin_port = free_port()
    cfg = ServerConfig(
        model=paths.target, max_num_seqs=MAX_NUM_SEQS,
        speculative=SpeculativeSpec(num_speculative_tokens=3, table=Table.from_list(STARTUP_TABLE)),
        env=plugin_env(admin_port, token=TOKEN, emulate=(1.0, 1.0, 1.0)))
    async with launch(cfg) as server:
        vocab = vocab_size(paths.target)
        yield Engine(server, f"http://127.0.0.1:{admin_port}", TOKEN, vocab)


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    """The paper's synthetic profile (K=3, max_num_seqs=16) with its table, saved: what a
    command's input checks need, no engine."""
    p = paper_profile()
    p.table = p.build().table.to_list()
    p.save(tmp_path / "profile.json")
    return tmp_path / "profile.json"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
