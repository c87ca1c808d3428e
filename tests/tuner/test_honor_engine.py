"""The honor check on the session's real vLLM CPU engine (V1 runner, ngram K=3): an edge table
swapped in through the plugin, a burst below and one above its edge, the drafts each request
verified read from the plugin's step ring. Speed is not asserted."""

from __future__ import annotations

import pytest

from tests.conftest import STARTUP_TABLE, Engine
from tuner.core.engine_client import EngineClient
from tuner.core.honor import check, edge_plan
from tuner.core.table import Table
from tuner.honor_run import edge_cells
from tuner.prompts import repetitive
from tuner.sweep import CellTimer

pytestmark = pytest.mark.engine


async def test_the_cpu_engine_verifies_the_tables_k_below_and_above_an_edge(engine: Engine) -> None:
    plan = edge_plan([2, 6], 3, 16, edge=2)
    assert plan is not None and plan.table.to_list() == [[1, 2, 3], [3, 16, 1]]
    prompts = lambda n, seed: repetitive(n, engine.vocab_size, seed=seed)  # noqa: E731
    async with EngineClient(admin_url=engine.admin_url, token=engine.token) as admin, \
            CellTimer(engine.server, engine.admin_url, prompts) as timer:
        await admin.put_emulation([0.0, 0.0, 0.0])  # reject-all: the batch stays at B
        try:
            cells = await edge_cells(timer, admin, plan, 3, decode_tokens=12)
        finally:
            await admin.put_table(Table.from_list(STARTUP_TABLE))
            await admin.put_emulation([1.0, 1.0, 1.0])
    below, above = cells
    assert (below.B, below.k, above.B, above.k) == (2, 3, 6, 1)
    # ngram may propose fewer than k (no match), never more
    assert all(c.verdict == "honored" and c.steps >= 5 for c in cells), cells
    assert above.drafts is not None and above.drafts <= 1.25
    assert below.counts is not None and below.counts.engine_steps_per_k.get(3, 0) >= 5
    assert above.counts is not None and above.counts.engine_steps_per_k.get(1, 0) >= 5
    assert check([], 3, edge=cells).verified == "honored"
