"""A real Prometheus (Debian's 2.42, installed by `make setup`) scrapes the tiny-model vLLM with
the plugin and a sidecar beside it, with deploy/base/monitoring/rules.yml loaded: the series
the docs promise are there with their labels, the dashboard's and rules' queries name only
series that exist, and rate() over vLLM's token counter agrees with the bench's engine-clock
window."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from benchmarks.window import generated
from sidecar.app import main
from tests.conftest import STARTUP_TABLE, Engine
from tests.deploy.test_monitoring import RULES, named_series
from tests.sidecar.fake_engine import make_profile, settings
from tuner.core.engine_client import EngineClient
from tuner.launcher import free_port
from tuner.load import Request, StationaryLoad
from tuner.prompts import repetitive

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="prometheus missing: `make setup` installs Debian's")]


async def query(prom: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    async with aiohttp.ClientSession() as s, s.get(prom + "/api/v1/query", params=params) as r:
        body = await r.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def until(prom: str, expr: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while not (found := await query(prom, expr)):
        assert time.monotonic() < deadline, f"{expr}: nothing within {timeout_s} s"
        await asyncio.sleep(1.0)
    return found


async def ready(prom: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, "prometheus exited; see prometheus.log in the test's tmp dir"
        try:
            async with aiohttp.ClientSession() as s, s.get(prom + "/-/ready") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        assert time.monotonic() < deadline, "prometheus not ready within 60 s"
        await asyncio.sleep(0.5)


def start_prometheus(tmp: Path, targets: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"  # the test cannot wait 30 s for a recording rule
    (tmp / "rules.yml").write_text(yaml.safe_dump(rules))
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(tmp / "rules.yml")],
              "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}
                                 for job, target in targets.items()]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with (tmp / "prometheus.log").open("wb") as log:  # the child keeps its own handle
        proc = subprocess.Popen(["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    return proc, f"http://127.0.0.1:{port}"


async def test_a_real_prometheus_sees_what_the_docs_promise(engine: Engine, tmp_path: Path) -> None:
    profile = tmp_path / "profile.json"
    make_profile(model="tiny").save(profile)
    s = settings(profile, engine.url, engine.admin_url, admin_token=engine.token, interval_s=0.5,
                 timeout_s=2.0, rebuild_every_steps=100, checkpoint=None, explore_every=30)
    stop, bound = asyncio.Event(), asyncio.get_running_loop().create_future()
    sidecar = asyncio.create_task(main(s, stop, bound.set_result, handle_signals=False))
    prom_proc = None
    try:
        port = await asyncio.wait_for(bound, 10)
        prom_proc, prom = start_prometheus(tmp_path, {
            "vllm": engine.url.removeprefix("http://"), "sidecar": f"127.0.0.1:{port}"})
        requests = [Request(p, 48) for p in repetitive(32, engine.vocab_size, seed=5)]
        async with (StationaryLoad(engine.url, requests, 4, seed=2) as traffic,
                    EngineClient(engine_url=engine.url) as client):
            await ready(prom, prom_proc)
            await until(prom, "count(up == 1) == 2")
            await asyncio.sleep(4.0)
            assert (await engine.admin("PUT", "/v1/table", {"table": [[1, 16, 2]]}))[0] == 200
            # the bench's window: vLLM's own token counter at both ends, stamped mid-request
            t0, g0 = await generated(client)
            await asyncio.sleep(12.0)
            t1, g1 = await generated(client)
            traffic.check()
            wall_t1 = time.time()
            await asyncio.sleep(3.0)  # let Prometheus scrape past the window's end
        bench_tps = (g1 - g0) / (t1 - t0)

        # the plugin's per-position series, with vLLM's labels and the position label
        acc = await query(prom, "tabletune_accepted_tokens_per_pos_total")
        assert sorted(r["metric"]["position"] for r in acc) == ["0", "1", "2"]
        assert {r["metric"]["model_name"] for r in acc} == {"tiny"}
        assert {r["metric"]["engine"] for r in acc} == {"0"}
        drafted = await query(prom, "vllm:spec_decode_num_draft_tokens_per_pos_total")
        assert len(drafted) == 3
        version = await query(prom, "tabletune_table_version")
        assert float(version[0]["value"][1]) >= 2  # the swap above, at least
        # the sidecar's decisions and state
        rebuilds = await until(prom, "tabletune_sidecar_rebuilds_total")
        assert {r["metric"]["outcome"] for r in rebuilds} <= {"pushed", "unchanged", "held",
                                                              "dry_run", "rolled_back"}
        table_k = await query(prom, 'tabletune_sidecar_table_k{table="engine"}')
        assert {"batch_size_start", "batch_size_end"} <= set(table_k[0]["metric"])
        # recording rules evaluate over the real series
        a = await until(prom, "tabletune:acceptance:rate5m")
        assert all(0 <= float(r["value"][1]) <= 1 for r in a if r["value"][1] != "NaN")
        await until(prom, "tabletune:step_seconds:mean5m")

        # rate() over vLLM's counter gives the bench's window throughput
        prom_rate = await query(prom, f"sum(rate(vllm:generation_tokens_total[{t1 - t0:.0f}s]))",
                                at=wall_t1)
        rate = float(prom_rate[0]["value"][1])
        assert abs(rate / bench_tps - 1) < 0.2, (rate, bench_tps)

        # no dead panels: every series the dashboard and the rules name exists in this scrape
        async with aiohttp.ClientSession() as session, session.get(
                prom + "/api/v1/label/__name__/values") as r:
            names = set((await r.json())["data"])
        missing = named_series() - names
        assert not missing, f"named by the dashboard or rules, absent from a real scrape: {missing}"
    finally:
        stop.set()
        assert await asyncio.wait_for(sidecar, 5) == 0
        if prom_proc is not None:
            prom_proc.terminate()
            prom_proc.wait(10)
        assert (await engine.admin("PUT", "/v1/table", {"table": STARTUP_TABLE}))[0] == 200
        assert (await engine.admin("PUT", "/v1/policy", {"explore_every": 0, "hysteresis": 0}))[0] == 200
