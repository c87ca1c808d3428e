"""The paired bench end to end on the real CPU engine, reduced: short windows, few blocks."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from benchmarks.policies import engine_args
from benchmarks.report import write
from benchmarks.run import BenchConfig, bench
from benchmarks.scenario import on_profile
from benchmarks.stats import Settings, analyze
from benchmarks.synthetic import paper_profile
from benchmarks.workload import requests
from tuner.engine_defaults import default_model, vocab_size
from tuner.prompts import repetitive
from tuner.replay import Replay

pytestmark = pytest.mark.engine


def config(tmp_path: Path, **kw: object) -> BenchConfig:
    paths = default_model()
    profile = paper_profile()  # K=3, max_num_seqs=16; tables are what is compared here
    profile.table = profile.build().table.to_list()
    profile.save(tmp_path / "profile.json")
    long = repetitive(16, vocab_size(paths.target), length=96)
    scenario = on_profile(tmp_path / "profile.json", profile, paths.target, tmp_path / "out",
                          engine_args(()), Replay(rates=(0.6, 0.35, 0.2)))
    base: dict[str, object] = dict(
        scenario=scenario, requests=requests("steady", long, 32, 24, 1024), window_s=0.5,
        warmup_s=0.5, prime_s=0.5, log_dir=tmp_path / "logs")
    return BenchConfig(**{**base, **kw})


async def test_the_aa_interval_covers_one_on_the_real_engine(tmp_path: Path) -> None:
    # 10 blocks a load; at 99.9% a calibrated interval misses 1 about once in a thousand runs
    cfg = config(tmp_path, loads=[1, 4], policies=["fixed-k0", "fixed-k3", "aa:fixed-k3"],
                 blocks=10, stats=Settings(confidence=0.999))
    windows, info = await bench(cfg)
    assert info.stop_reason == "the 10 planned blocks ran"
    assert len(windows) == 2 * 10 * 3 and all(w.tokens_per_s > 0 for w in windows)
    # every block holds each policy once, in a recorded order that is not always the same
    for b in {w.block for w in windows}:
        assert sorted((w.position, w.policy) for w in windows if w.block == b)[0][0] == 0
        assert sorted(w.policy for w in windows if w.block == b) == sorted(cfg.policies)
    assert len({tuple(w.policy for w in windows if w.block == b) for b in range(20)}) > 2
    # settled by the table's version: each window ran on the table its policy pushed
    assert all(w.settle_steps >= cfg.settle_steps and w.table_changes == 0 for w in windows)
    assert {w.table for w in windows if w.policy == "aa:fixed-k3"} == {"[[1, 16, 3]]"}
    a = analyze(windows, cfg.stats)
    for n in (1, 4):
        aa = a.aa[n]
        assert aa.ratio.low <= 1.0 <= aa.ratio.high, aa
        assert ("fixed-k0", n) in a.comparisons
        # what each window's steps carried, from the engine's counters (not its speed): k=0
        # generates one token per request-step, k=3 more under the replayed acceptance
        per = {p: statistics.median(w.tokens_per_s * w.window_s / w.steps / w.requests_per_step
                                    for w in windows if w.policy == p and w.load == n
                                    and w.steps and w.requests_per_step)
               for p in ("fixed-k0", "fixed-k3")}
        assert per["fixed-k0"] < 1.1 and per["fixed-k3"] > 1.3, per
    write(windows, a, cfg.scenario.out, "test", {"rounds": info.rounds})
    s = json.loads((cfg.scenario.out / "summary.json").read_text())
    assert s["aa_ci_halfwidth"] > 0 and set(s["loads"]) == {"1", "4"}
    for cell in s["loads"]["4"].values():
        assert {"ratio", "ratio_ci_low", "ratio_ci_high", "verdict"} <= set(cell)
    assert {"loss", "loss_ci_low", "loss_ci_high"} <= set(s["worst_case"]["fixed-k0"])
    assert (cfg.scenario.out / "cells.csv").read_text().count("\n") == 61


async def test_non_table_policies_run_paired_with_a_fixed_k(tmp_path: Path) -> None:
    """No speculation on its own vLLM and a real sidecar, frozen outside its windows; each in
    its own blocks, paired with fixed-k3 in an order alternating with the round."""
    cfg = config(tmp_path, loads=[2], policies=["fixed-k3", "aa:fixed-k3", "nospec",
                                                "sidecar-from-quarter"],
                 blocks=2, prime_s=0.0, converge_s=3.0)
    windows, info = await bench(cfg)
    paired = [(w.round, w.group, w.position, w.policy) for w in windows if w.group != "tables"]
    assert sorted(paired) == [
        (0, "nospec", 0, "fixed-k3"), (0, "nospec", 1, "nospec"),
        (0, "sidecar-from-quarter", 0, "fixed-k3"), (0, "sidecar-from-quarter", 1, "sidecar-from-quarter"),
        (1, "nospec", 0, "nospec"), (1, "nospec", 1, "fixed-k3"),
        (1, "sidecar-from-quarter", 0, "sidecar-from-quarter"), (1, "sidecar-from-quarter", 1, "fixed-k3")]
    assert all(w.step_ms is None for w in windows if w.policy == "nospec")  # no plugin there
    ref = [w for w in windows if w.group == "sidecar-from-quarter" and w.policy == "fixed-k3"]
    assert {w.table for w in ref} == {"[[1, 16, 3]]"}  # the sidecar was frozen: no push
    assert len(list((tmp_path / "logs").glob("sidecar-*.log"))) == 1  # one process, paused
    assert "sidecar-from-quarter" in info.converge_s
    a = analyze(windows, Settings())
    assert {("nospec", 2), ("sidecar-from-quarter", 2)} <= set(a.comparisons)
    assert a.comparisons[("nospec", 2)].versus.startswith("fixed-k3")
