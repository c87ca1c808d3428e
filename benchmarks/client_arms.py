"""A client bench's arms on one engine, each a shape's runs of vLLM's client.

- a table arm (the do-no-harm bench's `table`, the field bench's `fixed-k2`, `tuned`, ...): the
  engine runs that table with the plain policy (no exploration, no duels); a sidecar, if there
  is one, frozen (SIGSTOP; benchmarks/stateful.PausedSidecar).
- a sidecar arm (the do-no-harm bench's `sidecar`, the field bench's `sidecar-from-quarter`,
  `watch-from-tuned`, ...): that arm's own sidecar thawed with its table and policy restored,
  every other one frozen; started with the user's defaults (`tabletune sidecar --profile P`;
  the engine's URLs and its own port are wiring, not tuning).

- the plain arm (the field bench's `nospec`): vLLM without speculation, its own engine and no
  plugin (`admin` None): no table to set, and the engine's counts only from vLLM's /metrics.

- the bandit arm (the field bench's `nightjar-style`): every sidecar frozen, the plugin's
  Nightjar-style baseline switched on, which starts a fresh bandit (vllm_patch/admin.py); it
  is switched off before any other arm.

Each arm waits `idle_s` (a quiet spell, the sidecar awake in its arm), then runs the shape's
client runs back to back, each starting fresh. Around every run the engine's own counters are
read (generated tokens, the plugin's steps, acceptance and table version) as a cross-check of
the client's figures; after a sidecar arm its GET /v1/state and /metrics say what it did.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.arm_run import ArmRun, EngineCounts, Phase, SidecarSeen
from benchmarks.field_client import ClientResult, client_argv, run_client
from benchmarks.stateful import PausedSidecar
from benchmarks.traffic import ClientRun, Shape
from benchmarks.window import generated
from tuner.core.engine_client import EngineClient
from tuner.core.errors import EngineUnavailable
from sidecar.state import SidecarState
from tuner.core.table import Table
from tuner.step_clock import step_load

NOTABLE = ("pushed", "rolled_back", "rejected", "failed", "held")  # decisions kept per arm
COUNTS = ("pushes", "traffic_changes", "rollbacks", "foreign_tables")
READY_S = 120.0  # a fresh sidecar's imports on a loaded 2-core box
TICK_S = 1.0      # the sidecar's interval at the user's defaults
CATCH_UP_S = 15.0  # the longest wait for a thawed sidecar's catch-up tick


class Awake:
    """One sidecar of a bench and what the bench knows of it: awake or frozen, since when, and
    its counters at the last reading."""

    def __init__(self, sidecar: PausedSidecar) -> None:
        self.sidecar = sidecar
        self.is_thawed = False
        self.thawed_at = 0.0
        self.seen: Reading | None = None  # the sidecar's counters at its last reading

    async def freeze(self) -> None:
        if self.is_thawed:
            await self.sidecar.leave()
            self.is_thawed = False

    async def thaw(self) -> None:
        if self.is_thawed:
            return
        woke = time.time()
        await self.sidecar.enter(settle_steps=0)  # no traffic yet: nothing to settle on
        self.is_thawed, self.thawed_at = True, time.monotonic()
        if self.seen is None:  # a fresh sidecar: its counters start here
            self.seen = await self.read(deadline=time.monotonic() + READY_S)
        else:
            await self.caught_up(woke, deadline=time.monotonic() + CATCH_UP_S)

    async def caught_up(self, woke: float, deadline: float) -> None:
        """Until the thawed sidecar scraped once more after its first tick: that tick reads
        every step the other arms left in the ring (and may rebuild), work a sidecar never
        frozen spreads over many ticks; on 2 cores it would land in the arm's first seconds."""
        url = f"http://127.0.0.1:{self.sidecar.port}/v1/state"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0)) as s:
            while time.monotonic() < deadline:
                try:
                    async with s.get(url) as r:
                        seen = SidecarState.model_validate(await r.json()).last_scrape_ok_at or 0.0
                    if seen > woke + TICK_S:  # a tick that began after the first one ended
                        return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.2)

    async def observe(self) -> SidecarSeen:
        """What the sidecar did since its last reading: counts, the thawed minutes, the
        notable decisions, and its state now."""
        before = self.seen
        assert before is not None  # read when it was first thawed
        now = await self.read(deadline=time.monotonic() + 30.0)
        # awake since it was thawed, or since the reading before when it stayed awake
        minutes = (now.monotonic - max(self.thawed_at, before.monotonic)) / 60
        self.seen = now
        state = now.state
        newest = before.newest
        decisions = [d for d in state.recent_decisions if d.time > newest and d.outcome in NOTABLE]
        return SidecarSeen(**{k: now.counts[k] - before.counts[k] for k in COUNTS},
                           minutes=round(minutes, 3), decisions=decisions,
                           cumulative=dict(now.counts), engine_table=state.engine_table,
                           a_hat=state.a_hat, rebuilds=now.rebuilds,
                           cpu_s=round(now.cpu_s - before.cpu_s, 3))

    async def read(self, deadline: float) -> Reading:
        """The sidecar's counters from its /v1/state and /metrics, retried until `deadline`
        (a sidecar still starting does not answer yet)."""
        sidecar = self.sidecar
        base = f"http://127.0.0.1:{sidecar.port}"
        timeout = aiohttp.ClientTimeout(total=5.0)
        while True:
            try:
                async with aiohttp.ClientSession(timeout=timeout) as s:
                    async with s.get(base + "/v1/state") as r:
                        state = await r.json()
                    async with s.get(base + "/metrics") as r:
                        metrics = await r.text()
                return _reading(SidecarState.model_validate(state), metrics, sidecar.cpu_s())
            except (aiohttp.ClientError, TimeoutError) as exc:
                if sidecar.returncode() is not None or time.monotonic() > deadline:
                    raise EngineUnavailable(f"{base}: the sidecar does not answer ({exc}); "
                                            f"see its log {sidecar.log}") from exc
                await asyncio.sleep(1.0)


class Arms:
    """The engine, its sidecars and vLLM's client, and which arm the engine is in."""

    def __init__(self, server_url: str, engine: EngineClient, admin: EngineClient | None,
                 sidecars: Mapping[str, PausedSidecar], tables: Mapping[str, Table], model: Path,
                 served_name: str, out: Path, idle_s: float,
                 client_flags: tuple[str, ...] = (), bandit: str | None = None) -> None:
        self.host, port = server_url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        self.engine, self.admin, self.tables = engine, admin, tables
        self.sidecars = {arm: Awake(s) for arm, s in sidecars.items()}  # arm -> its sidecar
        self.client_flags = client_flags  # e.g. the client's --goodput SLOs
        self.model, self.served_name, self.out, self.idle_s = model, served_name, out, idle_s
        self.bandit = bandit           # the arm whose k the plugin's bandit picks
        self.bandit_on = False

    async def run(self, shape: Shape, arm: str, seed: int, tag: str) -> ArmRun:
        """One arm of one shape: its runs' client results and engine counts, and (a sidecar
        arm) what its sidecar did meanwhile."""
        t0 = time.monotonic()
        awake = await self.enter(arm)
        await asyncio.sleep(self.idle_s)
        phases = [await self._phase(run, seed, f"{tag}-{i}") for i, run in enumerate(shape.runs)]
        seen = await awake.observe() if awake is not None else None
        return ArmRun(shape=shape.name, arm=arm, seed=seed,
                      wall_s=round(time.monotonic() - t0, 2), phases=phases, sidecar=seen)

    async def enter(self, arm: str) -> Awake | None:
        """The engine in `arm`: every other sidecar frozen, the bandit off unless it is the arm,
        then the arm's own sidecar thawed (its table and policy restored), a fresh bandit, or
        the arm's table pushed unless the engine runs it; nothing on an engine without the
        plugin (no speculation)."""
        if self.admin is None:
            return None
        for other, s in self.sidecars.items():  # at most one sidecar awake: the arm's own
            if other != arm:
                await s.freeze()
        if self.bandit_on:  # off first: a sidecar's restored policy keeps the baseline it finds
            await self.admin.put_policy(baseline="none")
            self.bandit_on = False
        if arm == self.bandit:
            await self.admin.put_policy(baseline="nightjar")
            self.bandit_on = True
            return None
        awake = self.sidecars.get(arm)
        if awake is not None:
            await awake.thaw()
        elif (await self.admin.get_table()).parsed_table() != self.tables[arm]:
            await self.admin.put_table(self.tables[arm])
        return awake

    async def _phase(self, run: ClientRun, seed: int, tag: str) -> Phase:
        s0 = await self.admin.get_stats() if self.admin is not None else None
        _, g0 = await generated(self.engine)
        argv = [*client_argv(run, self.host, self.port, self.model, self.served_name, seed),
                *self.client_flags]
        result = await run_client(argv, self.out / "logs" / "client.log")
        # the model folder by name only: results carry no machine paths
        result |= {key: self.model.name for key in ("model_id", "tokenizer_id") if key in result}
        _, g1 = await generated(self.engine)
        s1 = await self.admin.get_stats() if self.admin is not None else None
        path = self.out / "runs" / f"{tag}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))
        client = ClientResult.model_validate(result)
        if s0 is None or s1 is None:  # no plugin: vLLM's own count of tokens only
            return Phase(file=str(path.relative_to(self.out)), argv=run.flags(), client=client,
                         engine=EngineCounts(generated_tokens=g1 - g0, steps=None, step_ms=None,
                                             table_version=[0, 0], accepted_per_pos=[],
                                             drafted_per_pos=[]))
        load = step_load(s0, s1)
        return Phase(file=str(path.relative_to(self.out)), argv=run.flags(),
                     client=client,
                     engine=EngineCounts(
                         generated_tokens=g1 - g0, steps=s1.engine_steps - s0.engine_steps,
                         step_ms=load.step_ms if load else None,
                         steps_per_k={k: n - s0.engine_steps_per_k.get(k, 0)
                                      for k, n in sorted(s1.engine_steps_per_k.items())},
                         explore_steps=s1.explore_steps - s0.explore_steps,
                         table_version=[s0.table_version, s1.table_version],
                         accepted_per_pos=_delta(s0.accepted_per_pos, s1.accepted_per_pos),
                         drafted_per_pos=_delta(s0.drafted_per_pos, s1.drafted_per_pos)))

    async def close(self) -> None:
        try:
            if self.bandit_on and self.admin is not None:  # the sidecars close if the engine is gone
                await self.admin.put_policy(baseline="none")
        finally:
            for s in self.sidecars.values():
                await s.sidecar.close()


@dataclass(frozen=True, slots=True)
class Reading:
    """One reading of the sidecar: its state, the counts an arm reports, and when."""

    state: SidecarState
    counts: dict[str, int]    # COUNTS, since the sidecar started
    rebuilds: dict[str, int]  # by outcome
    monotonic: float
    cpu_s: float              # the sidecar process's CPU seconds so far

    @property
    def newest(self) -> float:
        """The time of its newest decision (0 before any)."""
        return max((d.time for d in self.state.recent_decisions), default=0.0)


def _reading(state: SidecarState, metrics: str, cpu_s: float) -> Reading:
    pushes, rebuilds = 0, {}
    for fam in text_string_to_metric_families(metrics):
        for s in fam.samples:
            if s.name == "tabletune_sidecar_pushes_total":
                pushes = int(s.value)
            elif s.name == "tabletune_sidecar_rebuilds_total":
                rebuilds[s.labels["outcome"]] = int(s.value)
    counts = {"pushes": pushes, "traffic_changes": state.traffic_changes,
              "rollbacks": state.guardrail.rollbacks, "foreign_tables": state.foreign_tables_seen}
    return Reading(state, counts, rebuilds, time.monotonic(), cpu_s)


def _delta(before: list[int], after: list[int]) -> list[int]:
    return [b - a for a, b in zip(before, after, strict=True)]
