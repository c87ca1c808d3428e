"""One window on a running load: settle after a swap, then count with the engine's clock.

Settle (docs/measurement.md, rule 3): after a table is pushed, wait until the plugin's stats
report that table's version and at least `settle_steps` engine steps ran since the push (the
step in flight at the push may still have used the old table, and the step after a change of
k verifies the old k's drafts): not a fixed sleep, so a slow step or a host stall cannot leave
the old table in the window.

Window (rule 2): throughput is vLLM's own `vllm:generation_tokens_total` at both ends of the
window, each read stamped at the midpoint of its request, so only tokens generated inside it
count; the plugin's exact totals at both ends give what the steps carried (tuner/step_clock).
The clients' completions in the window are kept as a cross-check.

Window length in engine steps (docs/measurement.md, rule 12): a window runs `window_s`, then on
until the engine has run at least `min_steps` steps in it, so one step more or less moves it by
at most 2% (a slow model's 2-s window may hold a dozen steps).

A window whose engine count cannot be right is measured again (``implausible`` in
tuner/step_clock.py): a resumed engine's token counter can read as if it jumped by a run's whole
total or fell back to zero (docs/benchmarks.md, *Settle and window*). The plugin's step totals
over the same stretch bound what a window can have generated, so such a read is caught where it
happens instead of poisoning the intervals. The discarded window is kept (`Measured.discarded`) and the
bench writes it to cells.csv with its reason in `dropped`, so what was left out can be checked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tuner.core.admin_api import StatsReply
from tuner.core.engine_client import EngineClient
from tuner.core.errors import EngineUnavailable, ScrapeError
from tuner.load import GEN_TOKENS, StationaryLoad
from tuner.step_clock import StepLoad, implausible, step_load
from tuner.core.table import Table

POLL_S = 0.05
ATTEMPTS = 3   # windows measured before an implausible count is an error


@dataclass(frozen=True, slots=True)
class Settled:
    version: int | None
    seconds: float
    steps: int


@dataclass(frozen=True, slots=True)
class Measured:
    tokens_per_s: float
    window_s: float
    client_completed: int
    client_tokens_per_s: float
    steps: StepLoad | None
    table_version: int | None
    table_changes: int
    table: str
    discarded: tuple[tuple[Measured, str], ...] = ()   # windows measured again, and why


async def generated(engine: EngineClient) -> tuple[float, float]:
    """(monotonic midpoint of the read, vllm:generation_tokens_total summed over engines)."""
    t0 = time.monotonic()
    text = await engine.get_metrics()
    t1 = time.monotonic()
    wanted = "\n".join(line for line in text.splitlines() if line.startswith(GEN_TOKENS))
    values = [s.value for fam in text_string_to_metric_families(wanted + "\n")
              for s in fam.samples if s.name == GEN_TOKENS]
    if not values:  # a body without the counter is not a count of zero
        raise ScrapeError(f"{engine.engine_url}/metrics has no {GEN_TOKENS}: is it vLLM's?")
    return (t0 + t1) / 2, sum(values)


async def swap(admin: EngineClient, table: Table, settle_steps: int,
               timeout_s: float = 60.0) -> Settled:
    """Push `table` and wait until `settle_steps` engine steps ran on it."""
    t0 = time.monotonic()
    version = (await admin.put_table(table)).version
    return await settle(admin, version, settle_steps, t0, timeout_s)


async def settle(admin: EngineClient, version: int, settle_steps: int, t0: float,
                 timeout_s: float = 60.0, exact: bool = True) -> Settled:
    """Wait for `settle_steps` steps under table `version` (counted from the first stats read
    that shows it); EngineUnavailable when the engine runs no step within `timeout_s`. With
    `exact=False` (a sidecar's window) later versions are the policy at work, not an error."""
    base: int | None = None
    while True:
        s = await admin.get_stats()
        if s.table_version < version or (exact and s.table_version != version):
            raise EngineUnavailable(f"table version {s.table_version} where {version} was "
                                    "pushed: something else swaps tables on this engine")
        if base is None:
            base = s.engine_steps
        elif s.engine_steps - base >= settle_steps:
            return Settled(version, time.monotonic() - t0, s.engine_steps - base)
        if time.monotonic() - t0 > timeout_s:
            raise EngineUnavailable(f"{settle_steps} engine steps did not run within {timeout_s:.0f} s "
                                    "of the swap: is the load running?")
        await asyncio.sleep(POLL_S)


async def measure(engine: EngineClient, admin: EngineClient | None, load: StationaryLoad,
                  window_s: float, min_steps: int = 0) -> Measured:
    """One window of `window_s` (and at least `min_steps` engine steps) on the running `load`;
    measured again (up to ATTEMPTS) when a read lacks the counter or the count is implausible."""
    why = ""
    discarded: list[tuple[Measured, str]] = []
    for _ in range(ATTEMPTS):
        try:
            m = await _measure_once(engine, admin, load, window_s, min_steps)
        except ScrapeError as exc:
            why = str(exc)
            continue
        reason = implausible(m.tokens_per_s * m.window_s, m.steps)
        if reason is None:
            return dataclasses.replace(m, discarded=tuple(discarded))
        why = reason
        discarded.append((m, f"implausible engine count: {reason}"))
        print(f"bench: window discarded and measured again: {reason}", file=sys.stderr, flush=True)
    raise ScrapeError(f"{ATTEMPTS} windows in a row could not be counted ({why}); the engine's "
                      f"{GEN_TOKENS} is not trustworthy here")


async def _measure_once(engine: EngineClient, admin: EngineClient | None, load: StationaryLoad,
                        window_s: float, min_steps: int = 0) -> Measured:
    p0 = await admin.get_stats() if admin else None
    t0, g0 = await generated(engine)
    await asyncio.sleep(window_s)
    if admin is not None and p0 is not None and min_steps > 0:
        await _until_steps(admin, p0.engine_steps + min_steps, time.monotonic() + 20 * window_s)
    t1, g1 = await generated(engine)
    p1 = await admin.get_stats() if admin else None
    load.check()
    done, tokens = load.completed_between(t0, t1)
    table = json.dumps((await admin.get_table()).table) if admin else "[]"
    return Measured((g1 - g0) / (t1 - t0), t1 - t0, done, tokens / (t1 - t0),
                    _steps(p0, p1), p1.table_version if p1 else None,
                    p1.table_version - p0.table_version if p0 and p1 else 0, table)


async def _until_steps(admin: EngineClient, steps: int, deadline: float) -> None:
    """Wait until the engine's step counter reaches `steps` (or the deadline: a window that
    still holds fewer is kept, and summary.json counts it among those below the minimum)."""
    while time.monotonic() < deadline and (await admin.get_stats()).engine_steps < steps:
        await asyncio.sleep(POLL_S)


def _steps(p0: StatsReply | None, p1: StatsReply | None) -> StepLoad | None:
    return step_load(p0, p1) if p0 is not None and p1 is not None else None
