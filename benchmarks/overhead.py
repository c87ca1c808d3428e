"""What TableTune costs: plugin hooks per step, throughput with vs without the plugin, the
sidecar's rebuild time, CPU and memory, and the swap latency (stored -> first engine step).

    python -m benchmarks.overhead --out benchmarks/results/cpu-tiny-overhead
    python -m benchmarks.overhead --model /path/to/model --max-num-seqs 256 --loads 1,64,256 \
        --order off,on --sidecar-s 0 --engine-arg=--dtype=bfloat16    # a GPU A/B
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import numpy as np

from benchmarks.overhead_model import (EngineSetup, OverheadReport, PluginRatio, PluginRun,
                                       ScrapeCost, ScrapeParse, SidecarUsage)
from benchmarks.json_out import dumped
from benchmarks.engines import TOKEN
from benchmarks.proc import cpu_seconds, rss_mb
from benchmarks.scenario import Rig, Startup, serving
from benchmarks.synthetic import paper_profile
from tuner.core.engine_client import EngineClient
from tuner.engine_defaults import default_model
from tuner.core.goodput import choose_table
from tuner.launcher import free_port
from tuner.load import closed_loop
from tuner.core.table import Table
from vllm_patch.hooks import count_step, generated_lengths
from vllm_patch.policy import PolicyLookup
from vllm_patch.engine_state import Counters, EngineState, Policy, TableState

def hook_us_per_step(B: int, K: int = 3, n: int = 2000) -> float:
    """Median µs of the plugin's per-step Python work at batch size B: the table lookup, the
    per-request token lengths and the counting (everything the hooks add between two steps)."""
    dense = tuple([K] * (B + 1))
    engine = EngineState(table=TableState(Table.from_list([[1, B, K]]), dense, 1, time.time()),
                         policy=Policy(50, 2), num_speculative_tokens=K, max_num_seqs=B,
                         model_name="m", startup_k=frozenset({K}), restrict_k=False,
                         counters=Counters(num_positions=K), applied_version=1)
    lookup = PolicyLookup(engine, lambda e: None)
    ids = [f"r{i}" for i in range(B)]
    so = SimpleNamespace(num_scheduled_tokens={r: K + 1 for r in ids}, num_spec_tokens_to_schedule=K,
                         scheduled_spec_decode_tokens={r: [1] * K for r in ids})
    mro = SimpleNamespace(req_id_to_index={r: i for i, r in enumerate(ids)},
                          sampled_token_ids=[[1, 2]] * B)
    offered = {r: K for r in ids}

    def step() -> None:
        lookup[B]
        count_step(engine.counters, so, generated_lengths(so, mro), offered, 0.01)

    runs = timeit.repeat(step, number=n, repeat=5)
    return statistics.median(runs) / n * 1e6


def rebuild_us(max_num_seqs: int = 1024, K: int = 8) -> float:
    rng = np.random.default_rng(0)
    T = np.sort(rng.uniform(5, 50, size=(max_num_seqs, K + 1)), axis=0) + np.arange(K + 1) * 0.5
    a = np.sort(rng.uniform(0.2, 0.9, size=K))[::-1]
    runs = timeit.repeat(lambda: choose_table(T, a), number=200, repeat=5)
    return statistics.median(runs) / 200 * 1e6


def sidecar_choose_ms(max_num_seqs: int = 1024, K: int = 8) -> float:
    """Median ms of what the sidecar computes at a rebuild (and, for its guardrail, at a tick):
    T̂ from the profile and live cells, â projected, the confident table and its changes
    against the table in force (sidecar/rebuild.py), on a max_num_seqs × (K+1) matrix."""
    from sidecar.estimator import EstimatorState
    from sidecar.rebuild import Inputs, choose
    from sidecar.step_times import LiveStepTimes

    rng = np.random.default_rng(0)
    T = np.sort(rng.uniform(5, 50, size=(max_num_seqs, K + 1)), axis=0) + np.arange(K + 1) * 0.5
    a = np.sort(rng.uniform(0.2, 0.9, size=K))[::-1]
    live = LiveStepTimes()
    live.observe({(b, k): (0.02 * 500, 500.0) for b in (1, 8, 16, 64, 256) for k in range(K + 1)})
    state = EstimatorState(prior=a, w=2000.0, accepted=a * 1000, drafted=np.full(K, 1000.0))
    old = Table.from_list([[1, max_num_seqs, K]])
    inputs = Inputs(tie=0.005, confidence=0.9, allowed_k=None, cliffs=[], prior_steps=100.0)

    def once() -> None:
        choose(live.blend(T, np.full(T.shape, 0.03), 100.0, 0.2), T, state, old, K, inputs)

    runs = timeit.repeat(once, number=3, repeat=5)
    return statistics.median(runs) / 3 * 1e3


METRICS_BODY = Path(__file__).parent.parent / "tests" / "data" / "vllm-0.32-cpu-metrics.txt"


def scrape_parse_ms() -> ScrapeParse:
    """The sidecar's parse of a real vLLM /metrics body: all of it with prometheus_client's parser
    (what it did before) vs the wanted lines only (tuner.core.scrape.parse)."""
    import re

    from tuner.core import scrape

    text = METRICS_BODY.read_text()
    wanted = timeit.repeat(lambda: scrape.parse(text), number=50, repeat=3)
    keep, scrape._WANTED_LINE = scrape._WANTED_LINE, re.compile(r"(?!x)x")  # no line: parse all
    try:
        full = timeit.repeat(lambda: scrape.parse(text), number=10, repeat=3)
    finally:
        scrape._WANTED_LINE = keep
    return ScrapeParse(body_bytes=len(text), full_parse_ms=round(min(full) / 10 * 1e3, 2),
                       sidecar_parse_ms=round(min(wanted) / 50 * 1e3, 3))


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process group (vLLM's API server, EngineCore and workers)."""
    total = 0.0
    for p in subprocess.run(["pgrep", "-g", str(os.getpgid(pid))], capture_output=True,
                            text=True, check=False).stdout.split():
        total += cpu_seconds(int(p))  # 0 for one that ended meanwhile
    return total


async def metrics_scrape_cost(url: str, pid: int, n: int = 40) -> ScrapeCost:
    """vLLM's own CPU per GET /metrics (idle engine, idle rate subtracted)."""
    c0, t0 = tree_cpu_s(pid), time.monotonic()
    await asyncio.sleep(5.0)
    idle = (tree_cpu_s(pid) - c0) / (time.monotonic() - t0)
    async with aiohttp.ClientSession() as s:
        c0, t0 = tree_cpu_s(pid), time.monotonic()
        for _ in range(n):
            async with s.get(url + "/metrics") as r:
                await r.read()
        c1, t1 = tree_cpu_s(pid), time.monotonic()
    return ScrapeCost(vllm_cpu_ms_per_scrape=round(((c1 - c0) - idle * (t1 - t0)) / n * 1e3, 2),
                      idle_cpu_share=round(idle, 3))


def ab_rig(args: argparse.Namespace) -> Rig:
    """The vLLM the A/B runs: the embedded tiny model by default, or any model (e.g. on a GPU),
    ngram at K=3; no profile (the sidecar part brings the synthetic one)."""
    return Rig(model=Path(args.model) if args.model else default_model().target, method="ngram",
               K=3, max_num_seqs=args.max_num_seqs, drafter=None,
               engine_args=tuple(args.engine_arg or ()), replay=None, out=Path(args.out))


async def throughput(with_plugin: bool, loads: list[int], window_s: float, sidecar_s: float,
                     rig: Rig) -> PluginRun:
    prompts = rig.prompts(seed=5)
    start = Startup(table=Table.from_list([[1, rig.max_num_seqs, 3]]), has_plugin=with_plugin)
    tokens_per_s: dict[int, list[float]] = {}
    async with serving(rig, start) as up:
        server = up.server
        for n in loads:
            runs = []
            for _ in range(3):
                runs.append((await closed_loop(server.url, prompts, n, 48, 2.0, window_s)).tokens_per_s)
            tokens_per_s[n] = runs
        if not (with_plugin and sidecar_s > 0):
            return PluginRun(plugin=with_plugin, tokens_per_s=tokens_per_s)
        assert server.proc is not None
        scrape = await metrics_scrape_cost(server.url, server.proc.pid)
        usage = await sidecar_usage(server.url, up.admin.admin_url, prompts, rig.out, sidecar_s)
    return PluginRun(plugin=with_plugin, tokens_per_s=tokens_per_s, metrics_scrape=scrape,
                     sidecar=usage)


async def sidecar_usage(url: str, admin_url: str, prompts: list[Any], out: Path,
                        seconds: float) -> SidecarUsage:
    """Run the real sidecar (1 s interval) under load; its CPU share, RSS, swap latency."""
    profile = paper_profile()
    profile.table = [[1, 16, 1]]
    profile.save(out / "profile.json")
    async with EngineClient(admin_url=admin_url, token=TOKEN) as engine:
        await engine.put_table(Table.from_list([[1, 16, 0]]))  # a table the sidecar will change
    with open(out / "sidecar.log", "wb") as log:  # the child holds its own copy of the handle
        proc = subprocess.Popen([sys.executable, "-m", "sidecar", "--profile",
                                 str(out / "profile.json"), "--engine-url", url, "--admin-url",
                                 admin_url, "--interval-s", "1", "--listen-port", str(free_port()),
                                 "--allowed-k", "all"],
                                stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "TABLETUNE_SIDECAR_ADMIN_TOKEN": TOKEN})
    try:
        await asyncio.sleep(3.0)  # imports and first scrape are not steady state
        cpu0 = cpu_seconds(proc.pid)
        t0 = time.monotonic()
        await closed_loop(url, prompts, 8, 48, 0.0, seconds)
        cpu1, rss = cpu_seconds(proc.pid), rss_mb(proc.pid)
        async with EngineClient(admin_url=admin_url) as engine:
            table = await engine.get_table()
        return SidecarUsage(cpu_share_of_one_core=(cpu1 - cpu0) / (time.monotonic() - t0),
                            rss_mb=rss, swap_latency_s=table.swap_latency_s,
                            table_version=table.version)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def main_async(args: argparse.Namespace) -> OverheadReport:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    loads = [int(x) for x in args.loads.split(",")]
    report = OverheadReport(
        hook_us_per_step={B: round(hook_us_per_step(B), 1) for B in (1, 16, 64, 256)},
        rebuild_us_1024x9=round(rebuild_us(), 1),
        sidecar_choose_ms_1024x9=round(sidecar_choose_ms(), 1), scrape_parse=scrape_parse_ms())
    if args.hooks_only:  # e.g. on a GPU box, where the per-step figure is set against T(B, k)
        return report
    served = ab_rig(args)
    if args.sidecar_only:  # one engine with the plugin, the sidecar's CPU, RSS and swap latency
        run = await throughput(True, [], args.window_s, args.sidecar_s, served)
        assert run.sidecar is not None  # main refuses --sidecar-only with --sidecar-s 0
        report.sidecar, report.metrics_scrape = [run.sidecar], run.metrics_scrape
        return report
    runs = []
    order = [{"on": True, "off": False}[x] for x in args.order.split(",")]
    report.engine = EngineSetup(model=args.model or "embedded tiny", max_num_seqs=args.max_num_seqs,
                                extra_args=list(served.engine_args), order=args.order)
    for with_plugin in order:  # alternated: drift over the run cancels
        runs.append(await throughput(with_plugin, loads, args.window_s, args.sidecar_s, served))
        print(runs[-1].model_dump_json(include={"plugin", "tokens_per_s"}), flush=True)
    ratio = {}
    for n in loads:
        on = [t for r in runs if r.plugin for t in r.tokens_per_s[n]]
        off = [t for r in runs if not r.plugin for t in r.tokens_per_s[n]]
        ratio[n] = PluginRatio(with_=round(statistics.median(on), 1),
                               without=round(statistics.median(off), 1),
                               ratio=round(statistics.median(on) / statistics.median(off), 4),
                               spread_with=round((max(on) - min(on)) / statistics.median(on), 3),
                               spread_without=round((max(off) - min(off)) / statistics.median(off), 3))
    report.throughput_with_vs_without_plugin = ratio
    report.sidecar = [r.sidecar for r in runs if r.sidecar is not None]
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="runs/overhead")
    ap.add_argument("--loads", default="1,8")
    ap.add_argument("--window-s", type=float, default=6.0)
    ap.add_argument("--sidecar-s", type=float, default=30.0)
    ap.add_argument("--sidecar-only", action="store_true",
                    help="skip the with/without-plugin throughput runs (one vLLM start, not four)")
    ap.add_argument("--model", help="target model (default: the embedded tiny Llama)")
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--engine-arg", action="append", metavar="ARG",
                    help="extra vLLM argument, repeatable: --engine-arg=--dtype=bfloat16")
    ap.add_argument("--order", default="off,on,off,on",
                    help="vLLM starts without/with the plugin, in this order (alternate to cancel drift)")
    ap.add_argument("--hooks-only", action="store_true",
                    help="only the per-step hook cost and the rebuild time: no vLLM is started")
    args = ap.parse_args()
    if not args.hooks_only and not args.sidecar_only and set(args.order.split(",")) != {"on", "off"}:
        ap.error(f"--order={args.order!r}: list on and off, e.g. off,on or off,on,off,on")
    if args.sidecar_only and args.sidecar_s <= 0:
        ap.error(f"--sidecar-s={args.sidecar_s:g}: --sidecar-only measures the sidecar; give it "
                 "seconds, e.g. --sidecar-s 30")
    if args.sidecar_s > 0 and args.max_num_seqs != 16 and not args.hooks_only:
        ap.error(f"--max-num-seqs={args.max_num_seqs}: the sidecar part runs the synthetic "
                 "profile of max_num_seqs=16; pass --sidecar-s 0 for another engine size")
    report = asyncio.run(main_async(args))
    text = json.dumps(dumped(report), indent=1)
    (Path(args.out) / "overhead.json").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
