"""The honor check on a running engine (tuner/core/honor.py judges what this measures).

A table is swapped in through the plugin, B fresh requests decode, and the plugin's step ring and
counters are read around them. `tabletune tune` reuses its own sweep (every k at every B, its
ring read per sample: StepSample.drafts) and adds one table with an edge; `python -m
benchmarks.honor` measures it all on its own, with a second engine for the drafting side.
"""

from __future__ import annotations

from tuner.core.engine_client import AdminRejected, EngineClient
from tuner.core.errors import EngineUnavailable
from tuner.core.honor import (
    TOLERANCE,
    Burst,
    EdgePlan,
    HonorCell,
    HonorCheck,
    check,
    counts_between,
    measured_cell,
    sweep_cell,
)
from tuner.core.profile import Profile
from tuner.core.table import Table
from tuner.sweep import CellTimer

__all__ = ["edge_cells", "from_profile", "put_table", "run_burst"]


async def put_table(admin: EngineClient, table: Table) -> None:
    """The table into the engine (it applies at the next step)."""
    try:
        await admin.put_table(table)
    except AdminRejected as exc:
        raise EngineUnavailable(f"the plugin refused the table {table.to_list()}: {exc}") from exc


async def run_burst(timer: CellTimer, admin: EngineClient, table: Table, B: int,
                    decode_tokens: int) -> Burst:
    """B fresh requests of decode_tokens tokens under ``table``: the ring rows of their steps and
    the counters around them."""
    await put_table(admin, table)
    before = await timer.stats()
    if before is None:
        raise EngineUnavailable("the plugin's /v1/stats did not answer before an honor burst; is "
                                "TABLETUNE_ADMIN_PORT set for this vLLM?")
    await timer.burst(B, decode_tokens)
    after = await timer.stats(since=before.engine_steps)
    if after is None:
        raise EngineUnavailable("the plugin's /v1/stats did not answer after an honor burst"
                                + ("" if timer.server.is_running else " (vLLM has exited)"))
    return Burst(rows=list(after.recent_steps), counts=counts_between(before, after))


async def edge_cells(timer: CellTimer, admin: EngineClient, plan: EdgePlan, K: int,
                     decode_tokens: int, repeats: int = 1,
                     tolerance: float = TOLERANCE) -> list[HonorCell]:
    """The edge table's cells below and above its edge."""
    cells = []
    for B in (plan.B_below, plan.B_above):
        bursts = [await run_burst(timer, admin, plan.table, B, decode_tokens) for _ in range(repeats)]
        cells.append(measured_cell(bursts, plan.table, B, K, tolerance))
    return cells


def from_profile(profile: Profile, edge: list[HonorCell] | None = None,
                 runner: str | None = None) -> HonorCheck:
    """The check from the tuner's own sweep: per cell (B, k) its samples' verified drafts (a
    one-range table [[1, N, k]] ran them) and its median step time; the edge cells and the
    runner given, else those of the profile's earlier check."""
    old = profile.honor
    K, n = profile.K, profile.engine.max_num_seqs
    step_ms = {(c.B, c.k): c.step_ms for c in profile.cells}
    cells = []
    for (B, k), samples in sorted(profile.samples_by_cell().items()):
        drafts = [s.drafts for s in samples if s.drafts is not None]
        steps = sum(s.drafts_steps or 0 for s in samples if s.drafts is not None)
        ms = step_ms.get((B, k))
        cells.append(sweep_cell(B, k, K, n, drafts, steps,
                                None if ms is None else round(ms, 4)))
    return check(cells, K, edge=edge if edge is not None else (old.edge if old else []),
                 runner=runner or (old.runner if old else None))

