"""The whole sidecar process: HTTP endpoints, stop Event, SIGTERM, checkpoint, exit codes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecar import checkpoint
from sidecar.app import backoff_delay, control_loop, main, run
from sidecar.controller import Controller
from sidecar.server import CACHE_S
from sidecar.settings import SidecarSettings
from tests.sidecar.fake_engine import TOKEN, TUNED, FakeEngine, make_profile, running, settings, write_profile
from tuner.core.engine_client import EngineClient
from tuner.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]


async def get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        body = await r.text()
        return r.status, json.loads(body) if r.content_type == "application/json" else body


async def until(predicate: Any, timeout_s: float = 30.0) -> None:
    """Poll ``predicate`` until true; the deadline only catches a hang, it times nothing."""
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


@asynccontextmanager
async def sidecar(s: SidecarSettings) -> AsyncIterator[tuple[str, asyncio.Event, asyncio.Task[int]]]:
    """main() in this loop: its base URL, its stop Event and its task; always stopped and
    awaited on the way out, whatever the test did."""
    stop, bound = asyncio.Event(), asyncio.get_running_loop().create_future()
    task = asyncio.create_task(main(s, stop, bound.set_result, handle_signals=False))
    try:
        await asyncio.wait({bound, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # main ended before it listened: raise what it raised
        yield f"http://127.0.0.1:{bound.result()}", stop, task
    finally:
        stop.set()
        await asyncio.wait({task}, timeout=30)
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
        bound.cancel()


async def ready_at(base: str) -> None:
    async def is_ready() -> bool:
        return (await get(base + "/readyz"))[0] == 200
    await until(is_ready)


async def test_main_serves_probes_metrics_state_and_stops(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with running(FakeEngine()) as fake:
        path = tmp_path / "ckpt" / "estimator.json"
        # timeout_s widens /readyz's window (3 intervals + one timeout): a loaded machine
        # must not make the sidecar look unready between two scrapes
        s = settings(write_profile(tmp_path / "p.json"), fake.url, checkpoint=path,
                     timeout_s=5.0)
        async with sidecar(s) as (base, stop, task):
            assert (await get(base + "/healthz"))[0] == 200
            await ready_at(base)
            fake.run(150)

            async def rebuilt() -> bool:
                return (await get(base + "/v1/state"))[1]["last_decision"] is not None
            await until(rebuilt)
            _, state = await get(base + "/v1/state")
            assert state["last_decision"]["outcome"] == "pushed" and fake.table == TUNED
            assert state["recommended_table"] == TUNED and state["engine_table"] == TUNED
            assert state["bias_note"] is None and state["source"] == "plugin"

            status, text = await get(base + "/metrics")
            assert status == 200
            for line in ['tabletune_sidecar_acceptance{position="0"}',
                         'tabletune_sidecar_table_k{batch_size_end="16",batch_size_start="9",'
                         'table="recommended"} 1.0',
                         'tabletune_sidecar_rebuilds_total{outcome="pushed"} 1.0',
                         "tabletune_sidecar_pushes_total 1.0",
                         "tabletune_sidecar_scrape_seconds_count",
                         "tabletune_sidecar_ready 1.0", "tabletune_sidecar_estimate_biased 0.0"]:
                assert line in text, line
            stop.set()
            assert await task == 0
        restored = checkpoint.load(path)
        assert restored is not None and restored.to_dict() == state["estimator"]
        # the access log is off by default: nothing but events in the log
        assert not [r for r in caplog.records if r.name.endswith("access")]


async def test_stop_interrupts_the_sleep_between_ticks(tmp_path: Path) -> None:
    async with running(FakeEngine()) as fake:
        s = settings(write_profile(tmp_path / "p.json"), fake.url, interval_s=3600.0)
        async with sidecar(s) as (base, stop, task):
            await ready_at(base)  # one tick done: the loop now sleeps for an hour
            gets = fake.metrics_gets
            stop.set()
            assert await task == 0
        assert fake.metrics_gets == gets  # stopped from the sleep, with no further tick


async def test_stop_during_a_hanging_scrape_cancels_it_after_the_grace(tmp_path: Path) -> None:
    async with running(FakeEngine()) as fake:
        s = settings(write_profile(tmp_path / "p.json"), fake.url, timeout_s=300.0)
        async with sidecar(s) as (base, stop, task):
            await ready_at(base)
            fake.metrics_fault = "hang"
            fake.hanging.clear()
            await fake.hanging.wait()  # a scrape is in the hang now
            assert (await get(base + "/healthz"))[0] == 200  # a slow vLLM is not a dead sidecar
            stop.set()
            assert await task == 0
            assert not fake.hang_over.is_set()  # main did not wait for the scrape to answer


async def test_healthz_goes_stale_without_ticks_but_not_when_vllm_is_down(tmp_path: Path) -> None:
    now = [1000.0]
    s = settings(write_profile(tmp_path / "p.json"), "http://127.0.0.1:9", interval_s=1.0)
    async with EngineClient(s.engine_url, s.admin_url, None, 0.1, 1) as client:
        c = Controller(s, make_profile(), client, clock=lambda: now[0])
        assert c.liveness() == (True, "ok")
        await c.tick()  # vLLM is down: still a tick
        assert c.liveness()[0] and not c.readiness()[0]
        now[0] += 2.9
        assert c.liveness()[0]
        now[0] += 0.2
        ok, reason = c.liveness()
        assert not ok and "has not ticked for 3.1 s" in reason
        c.beat.loop_delay_s = 10.0  # backing off: the allowance follows the loop's period
        assert c.liveness()[0]


async def test_a_tick_that_raises_is_counted_said_once_and_backs_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    s = settings(write_profile(tmp_path / "p.json"), "http://127.0.0.1:9", interval_s=0.01)
    stop, calls = asyncio.Event(), []

    async def tick() -> None:
        calls.append(1)
        if len(calls) == 3:
            stop.set()
        raise RuntimeError("a bug")

    async with EngineClient(s.engine_url, s.admin_url, None, 0.1, 1) as client:
        c = Controller(s, make_profile(), client)
        monkeypatch.setattr(c, "tick", tick)
        with caplog.at_level(logging.WARNING, logger="sidecar"):
            await control_loop(c, stop)
    assert c.stats.failures["tick_error"] == 3 and c.observer.consecutive_failures == 3
    assert c.snapshot().conditions["tick"] == "error: RuntimeError"
    assert c.beat.loop_delay_s == backoff_delay(s, 3)  # the period /healthz allows for
    said = [r for r in caplog.records if r.getMessage() == "tick failed; carrying on"]
    assert len(said) == 1 and said[0].exc_info is not None  # once, with the traceback


def test_backoff_doubles_up_to_the_ceiling(tmp_path: Path) -> None:
    s = settings(tmp_path / "p.json", "http://x", interval_s=1.0, backoff_max_s=5.0)
    assert [backoff_delay(s, n) for n in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def sidecar_cmd(profile: Path, url: str, port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sidecar", "--profile", str(profile),
            "--engine-url", url, "--admin-url", url, "--listen-port", str(port),
            "--interval-s", "0.05", "--rebuild-every-steps", "100", "--model-name", "tiny",
            *extra]


async def test_sigterm_stops_the_process_with_state_saved(tmp_path: Path) -> None:
    async with running(FakeEngine()) as fake:
        port, ckpt = free_port(), tmp_path / "estimator.json"
        env = {**os.environ, "TABLETUNE_SIDECAR_ADMIN_TOKEN": TOKEN}
        proc = await asyncio.create_subprocess_exec(
            *sidecar_cmd(write_profile(tmp_path / "p.json"), fake.url, port,
                         "--checkpoint", str(ckpt), "--access-log", "--decide-by", "model"),
            cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            async def is_ready() -> bool:  # ready: the baseline scrape is done
                try:
                    return (await get(f"http://127.0.0.1:{port}/readyz"))[0] == 200
                except aiohttp.ClientConnectionError:
                    return False
            await until(is_ready)
            # at its default niceness above ours: its rebuilds wait for vLLM on shared cores
            assert os.getpriority(os.PRIO_PROCESS, proc.pid) == min(
                19, os.getpriority(os.PRIO_PROCESS, 0) + SidecarSettings.model_fields["nice"].default)
            fake.run(150)

            async def pushed() -> bool:
                return fake.table == TUNED
            await until(pushed)
            assert (await get(f"http://127.0.0.1:{port}/v1/state"))[0] == 200
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.stderr is not None
        lines = [json.loads(line) for line in (await proc.stderr.read()).decode().splitlines()]
        assert TOKEN not in json.dumps(lines)
        events = [line["event"] for line in lines]
        assert "rebuild" in events and "signal SIGTERM received; stopping" in events
        niceness = next(line["niceness"] for line in lines if line["event"] == "starting")
        assert niceness == min(19, os.getpriority(os.PRIO_PROCESS, 0)
                               + SidecarSettings.model_fields["nice"].default)
        assert events[-1] == "stopped" and "access" not in events
        rebuild = next(line for line in lines if line["event"] == "rebuild")
        assert rebuild["decision"]["outcome"] == "pushed" and rebuild["level"] == "INFO"
        # --access-log: requests on stdout, in their own stream; probes are never logged
        assert proc.stdout is not None
        access = [json.loads(line) for line in (await proc.stdout.read()).decode().splitlines()]
        assert [(a["logger"], a["path"], a["status"]) for a in access] == [
            ("sidecar.access", "/v1/state", 200)]
        assert checkpoint.load(ckpt) is not None


async def test_a_mismatching_profile_exits_2_saying_what_differs(tmp_path: Path) -> None:
    async with running(FakeEngine(max_num_seqs=32)) as fake:
        proc = await asyncio.create_subprocess_exec(
            *sidecar_cmd(write_profile(tmp_path / "p.json"), fake.url, free_port()),
            cwd=ROOT, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "tabletune sidecar: the profile does not match the engine (max_num_seqs: profile has " \
           "16, engine has 32)" in err.decode()
    assert err.decode().count("max_num_seqs: profile has 16") == 1  # not logged as well


async def test_a_model_name_the_engine_does_not_serve_exits_2_naming_both(tmp_path: Path) -> None:
    async with running(FakeEngine()) as fake:
        profile = tmp_path / "p.json"
        make_profile(model="tiny-llama-s0", served_model_name="tiny").save(profile)
        cmd = sidecar_cmd(profile, fake.url, free_port())
        cmd[cmd.index("--model-name") + 1] = "tiny-llama-s0"
        proc = await asyncio.create_subprocess_exec(*cmd, cwd=ROOT, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and fake.metrics_gets == 0
    assert err.decode().splitlines()[-1] == (
        "tabletune sidecar: --model-name 'tiny-llama-s0' but the engine serves 'tiny' (its "
        "/metrics label model_name); pass --model-name tiny")


def test_run_returns_2_for_a_missing_profile(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    s = settings(tmp_path / "missing.json", "http://127.0.0.1:9")
    assert run(s) == 2
    assert f"tabletune sidecar: profile {tmp_path / 'missing.json'}:" in capsys.readouterr().err


async def test_a_burst_of_state_and_metrics_requests_renders_the_snapshot_once(tmp_path: Path) -> None:
    """/v1/state and /metrics share the control loop's event loop: 100 clients at once get the
    same rendered bodies (one snapshot each way per CACHE_S), not a snapshot per request."""
    async with running(FakeEngine()) as fake:
        s = settings(write_profile(tmp_path / "p.json"), fake.url, checkpoint=None,
                     interval_s=3600.0)  # no tick renders or changes anything meanwhile
        async with sidecar(s) as (base, _, _):
            await get(base + "/v1/state")
            calls = 0
            original = Controller.snapshot

            def counted(self: Controller) -> Any:
                nonlocal calls
                calls += 1
                return original(self)

            Controller.snapshot = counted  # type: ignore[method-assign]
            try:
                await asyncio.sleep(CACHE_S)  # the first request's bodies are stale now
                replies = await asyncio.gather(*[get(base + path) for path in
                                                 ("/v1/state", "/metrics") * 50])
            finally:
                Controller.snapshot = original  # type: ignore[method-assign]
    assert all(status == 200 for status, _ in replies)
    assert len({json.dumps(body) for (_, body) in replies[::2]}) == 1
    assert calls <= 4, calls  # one per body, twice if the burst outlived CACHE_S
