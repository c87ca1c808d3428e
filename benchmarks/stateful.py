"""Policies with state that learns, on the bench's one engine, paused between their windows.

- A sidecar (`sidecar-from-quarter`, `-from-documented`): the real `tabletune sidecar` process,
  started once from its table and left `converge_s` to learn before its first window. Outside
  its windows it is frozen (SIGSTOP) and the engine gets the bench's plain policy back (no
  exploration), so the other windows measure plain tables; entering a window restores its
  table and policy and thaws it (SIGCONT): it carries its estimate across the whole run.
- The bandit (`nightjar-style`): the plugin's per-batch-size ε-greedy baseline. The plugin
  starts a fresh bandit each time it is switched on, so every window gets its own, after
  `learn_s` of learning (a plugin that kept it across a pause would let it carry over).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.proc import cpu_seconds
from benchmarks.window import Settled, settle
from tabletune.sidecar_process import sidecar_process
from tuner.core.admin_api import PolicyReply
from tuner.core.engine_client import EngineClient
from tuner.launcher import free_port
from tuner.core.table import Table
from benchmarks.engines import TOKEN


# the benches' sidecar: 0.5 s scrapes and a rebuild every 100 steps, so it learns within a
# bench's minutes, every k allowed; USER_DEFAULTS: as a user starts it (benchmarks/noharm.py)
BENCH_SIDECAR = ("--interval-s", "0.5", "--rebuild-every-steps", "100", "--allowed-k", "all")
USER_DEFAULTS: tuple[str, ...] = ()


def sidecar_log(log_dir: Path, port: int) -> Path:
    return log_dir / f"sidecar-{port}.log"


def sidecar(profile_path: Path, log_dir: Path, engine_url: str, admin_url: str,
            args: tuple[str, ...] = (), base: tuple[str, ...] = BENCH_SIDECAR,
            port: int | None = None) -> Any:
    """`tabletune sidecar` beside the engine with the `base` flags (the benches' by default),
    its HTTP server on `port` (a free one if None), then `args`."""
    port = port or free_port()
    return sidecar_process(profile_path, engine_url, admin_url, TOKEN, sidecar_log(log_dir, port),
                           (*base, "--listen-port", str(port), *args))


def _policy_fields(p: PolicyReply) -> dict[str, Any]:
    """Every field a sidecar sets, duels included: a frozen sidecar's duels would otherwise go
    on exploring in the plain windows."""
    return {"explore_every": p.explore_every, "explore_run": p.explore_run,
            "hysteresis": p.hysteresis, "duels": p.duels, "duel_run": p.duel_run,
            "duel_share": p.duel_share, "duel_horizon": p.duel_horizon, "explore_ks": p.explore_ks}


class PausedSidecar:
    """One sidecar process for the whole run, thawed only for its own windows."""

    def __init__(self, start: Table, admin: EngineClient, plain: PolicyReply, profile_path: Path,
                 log_dir: Path, engine_url: str, converge_s: float, args: tuple[str, ...],
                 base: tuple[str, ...] = BENCH_SIDECAR) -> None:
        self.start, self.admin, self.plain = start, admin, plain
        self.converge_s = converge_s
        self.port = free_port()  # its /v1/state and /metrics
        self.log = sidecar_log(log_dir, self.port)
        self._process = sidecar(profile_path, log_dir, engine_url, admin.admin_url, args, base,
                                self.port)
        self._stack = contextlib.AsyncExitStack()
        self._proc: subprocess.Popen[bytes] | None = None
        self._table: Table | None = None
        self._policy: PolicyReply | None = None
        self.converged_s: float | None = None  # seconds from its start to its last push in converge

    async def enter(self, settle_steps: int) -> Settled:
        t0 = time.monotonic()
        if self._proc is None:
            await self._put_if_changed(self.start)
            self._proc = await self._stack.enter_async_context(self._process)
            self.converged_s = await self._converge()
        else:
            assert self._table is not None and self._policy is not None
            await self._put_if_changed(self._table)
            await self.admin.put_policy(**_policy_fields(self._policy))
            self._proc.send_signal(signal.SIGCONT)
        version = (await self.admin.get_table()).version
        return await settle(self.admin, version, settle_steps, t0, exact=False)

    async def _put_if_changed(self, table: Table) -> None:
        """Push `table` unless the engine runs it: every push is a new version, and a sidecar
        that never pushed would take a new version of the same table for someone else's."""
        if (await self.admin.get_table()).parsed_table() != table:
            await self.admin.put_table(table)

    async def _converge(self) -> float:
        t0, version, last = time.monotonic(), (await self.admin.get_table()).version, 0.0
        while time.monotonic() - t0 < self.converge_s:
            await asyncio.sleep(0.5)
            v = (await self.admin.get_table()).version
            if v != version:
                version, last = v, time.monotonic() - t0
        return last

    async def leave(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)
        info = await self.admin.get_table()
        self._table = info.parsed_table()
        self._policy = await self.admin.get_policy()
        await self.admin.put_policy(**_policy_fields(self.plain))

    def pid(self) -> int | None:
        """The process id once started."""
        return None if self._proc is None else self._proc.pid

    def cpu_s(self) -> float:
        """Its user + system CPU seconds so far (0 before it started or after it ended)."""
        return cpu_seconds(self.pid())

    def returncode(self) -> int | None:
        """The process's exit status once it ended (None: running, or not started)."""
        return None if self._proc is None else self._proc.poll()

    async def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)  # a stopped process would hold SIGTERM pending
        await self._stack.aclose()


class FreshBandit:
    """The plugin's nightjar-style bandit: switched on (fresh) for each window."""

    def __init__(self, table: Table, admin: EngineClient, learn_s: float) -> None:
        self.table, self.admin, self.learn_s = table, admin, learn_s
        self.converged_s: float | None = None

    async def enter(self, settle_steps: int) -> Settled:
        t0 = time.monotonic()
        version = (await self.admin.put_table(self.table)).version
        await self.admin.put_policy(baseline="nightjar")
        await asyncio.sleep(self.learn_s)
        return await settle(self.admin, version, settle_steps, t0)

    async def leave(self) -> None:
        await self.admin.put_policy(baseline="none")

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.admin.put_policy(baseline="none")
