"""The benchmark harness end to end on the real engine, reduced: two loads, three policies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.analysis import summarize
from benchmarks.report import write
from benchmarks.run import BenchConfig, bench
from benchmarks.synthetic import paper_profile
from tuner.engine_defaults import default_model, vocab_size
from tuner.prompts import repetitive
from tuner.replay import Replay

pytestmark = pytest.mark.engine


async def test_reduced_bench_runs_end_to_end(tmp_path: Path) -> None:
    paths = default_model()
    vocab = vocab_size(paths.target)
    profile = paper_profile()  # K=3, max_num_seqs=16; tables are what is compared here
    profile.table = profile.build().table.to_list()
    profile.save(tmp_path / "profile.json")
    cfg = BenchConfig(profile=profile, profile_path=tmp_path / "profile.json", model=paths.target,
                      loads=[1, 4], policies=["fixed-k0", "fixed-k3", "tuned"], repeats=1,
                      warmup_s=0.5, window_s=2.0, max_tokens=24, prompts=repetitive(8, vocab),
                      out=tmp_path / "out", log_dir=tmp_path / "logs")
    rows, _ = await bench(cfg)
    assert {(r.policy, r.load) for r in rows} == {(p, n) for p in cfg.policies for n in (1, 4)}
    assert all(r.tokens_per_s > 0 for r in rows)
    assert {r.table for r in rows if r.policy == "fixed-k3"} == {"[[1, 16, 3]]"}
    assert {r.table for r in rows if r.policy == "tuned"} == {json.dumps(profile.table)}
    # interleaved: at each load every table in turn, the order alternating with the load
    assert [(r.policy, r.load) for r in rows] == [
        ("fixed-k0", 1), ("fixed-k3", 1), ("tuned", 1), ("tuned", 4), ("fixed-k3", 4), ("fixed-k0", 4)]
    # the plugin's exact totals say what a step carried: k=3 steps hold each request's 4 tokens
    for r in rows:
        assert r.step_ms is not None and r.step_ms > 0 and r.requests_per_step is not None
        assert r.tokens_per_step is not None and r.tokens_per_step >= r.requests_per_step * 0.99
    k3 = [r for r in rows if r.policy == "fixed-k3" and r.load == 4]
    k0 = [r for r in rows if r.policy == "fixed-k0" and r.load == 4]
    assert k3[0].tokens_per_step > 2 * k0[0].tokens_per_step  # type: ignore[operator]
    s = summarize(rows)
    # Greedy on repetitive prompts accepts nearly everything: k=3 beats k=0 at N=1.
    assert s.median[("fixed-k3", 1)] > s.median[("fixed-k0", 1)]
    write(s, cfg.out, "test", {"rows": len(rows)})
    assert (cfg.out / "cells.csv").read_text().count("\n") == 7
    assert (cfg.out / "throughput.png").stat().st_size > 10_000
    assert "best fixed k" in (cfg.out / "summary.md").read_text()
    assert "tokens per step" in (cfg.out / "summary.md").read_text()


async def test_bench_runs_a_draft_model_profile(tmp_path: Path) -> None:
    """A profile tuned with draft_model is benchmarked with its drafter (the spec needs the path)."""
    paths = default_model()
    vocab = vocab_size(paths.target)
    profile = paper_profile()
    profile.engine = profile.engine.model_copy(update={"method": "draft_model",
                                                       "drafter": str(paths.drafter)})
    profile.table = profile.build().table.to_list()
    profile.save(tmp_path / "profile.json")
    cfg = BenchConfig(profile=profile, profile_path=tmp_path / "profile.json", model=paths.target,
                      loads=[2], policies=["fixed-k3"], repeats=1, warmup_s=0.5, window_s=2.0,
                      max_tokens=24, prompts=repetitive(8, vocab), emulate=Replay(rates=(0.5, 0.3, 0.1)),
                      out=tmp_path / "out", log_dir=tmp_path / "logs")
    rows, _ = await bench(cfg)
    assert [(r.policy, r.load) for r in rows] == [("fixed-k3", 2)] and rows[0].tokens_per_s > 0
    log = next((tmp_path / "logs").glob("vllm-*.log")).read_text()
    assert '"method":"draft_model"' in log and str(paths.drafter) in log


async def test_sidecar_policies_run_in_blocks_whose_order_alternates(tmp_path: Path) -> None:
    """A sidecar's state carries across loads, so its loads run in a row, started from the
    quarter table with a real `tabletune sidecar` beside the engine; the block comes after the
    plain tables in even repeats and before them in odd ones."""
    paths = default_model()
    vocab = vocab_size(paths.target)
    profile = paper_profile()
    profile.table = profile.build().table.to_list()
    profile.save(tmp_path / "profile.json")
    cfg = BenchConfig(profile=profile, profile_path=tmp_path / "profile.json", model=paths.target,
                      loads=[2], policies=["fixed-k0", "sidecar-from-quarter"], repeats=2,
                      warmup_s=0.5, window_s=1.5, max_tokens=24, prompts=repetitive(8, vocab),
                      converge_s=3.0, out=tmp_path / "out", log_dir=tmp_path / "logs")
    rows, converge = await bench(cfg)
    assert [(r.policy, r.repeat) for r in rows] == [
        ("fixed-k0", 0), ("sidecar-from-quarter", 0), ("sidecar-from-quarter", 1), ("fixed-k0", 1)]
    assert set(converge) == {"sidecar-from-quarter#0", "sidecar-from-quarter#1"}
    assert len(list((tmp_path / "logs").glob("sidecar-*.log"))) == 2  # one sidecar per block
