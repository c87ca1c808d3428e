"""Profile model, offline table rebuild and the tuner's input errors (no engine)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.synthetic import INFO, paper_profile
from tuner import findings
from tuner.commands import tune_config
from tuner.core.errors import InvalidInput, ProfileMismatch
from tuner.core.profile import load


def test_build_follows_the_paper_example() -> None:
    choice = paper_profile().build()
    assert choice.table.k_at(1) == 3 and choice.table.k_at(16) == 1


def test_acceptance_override_and_errors() -> None:
    p = paper_profile()
    assert p.build([0.05, 0.01, 0.0]).table.to_list() == [[1, 16, 0]]
    with pytest.raises(InvalidInput, match="a_1..a_3"):
        p.build([0.5])


def test_missing_cells_name_the_k() -> None:
    p = paper_profile()
    p.cells = [c for c in p.cells if c.k != 2]
    assert p.finished_k() == {0, 1, 3}
    with pytest.raises(InvalidInput, match=r"k=\[2\]"):
        p.step_time_matrix()


def test_save_load_round_trip_and_mismatch(tmp_path: Path) -> None:
    p = paper_profile()
    p.save(tmp_path / "p.json")
    q = load(tmp_path / "p.json")
    assert q == p
    q.check_matches(INFO, [1, 8, 16])
    with pytest.raises(ProfileMismatch, match="num_speculative_tokens"):
        q.check_matches(INFO.model_copy(update={"num_speculative_tokens": 2}), [1, 8, 16])
    # points a --refine run added belong to the profile: the same --grid still resumes it
    r = q.model_copy(update={"grid": [1, 4, 8, 16], "refined": [4]})
    r.check_matches(INFO, [1, 8, 16])
    r.check_matches(INFO, [1, 4, 8, 16])  # naming a refined point is fine too
    with pytest.raises(ProfileMismatch, match="grid"):
        r.check_matches(INFO, [1, 16])
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(InvalidInput, match="not JSON"):
        load(tmp_path / "bad.json")
    (tmp_path / "old.json").write_text(json.dumps({"schema_version": 0}))
    with pytest.raises(InvalidInput, match="schema_version"):
        load(tmp_path / "old.json")


def args(**kw: object) -> argparse.Namespace:
    base = dict(model=None, method="ngram", drafter=None, num_speculative_tokens=2, max_num_seqs=16,
                grid="1,4", repeats=1, decode_tokens=17, temperature=0.0, prompts=None,
                num_prompts=8, out="runs/x.json", fresh=False, tie=0.005, preflight=False,
                engine_arg=None, emulate=None, emulate_with="plugin", one_server=False, refine=None,
                workload=None, max_repeats=None, ci_target=0.02, confidence=0.9, min_width=4, min_k=0)
    return argparse.Namespace(**{**base, **kw})


def test_tuner_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="K must be >= 1"):
        tune_config(args(num_speculative_tokens=0))
    with pytest.raises(InvalidInput, match="max_num_seqs=16"):
        tune_config(args(grid="1,8,32"))
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(InvalidInput, match="empty"):
        tune_config(args(prompts=str(tmp_path / "empty.txt")))
    with pytest.raises(InvalidInput, match="no-such"):
        tune_config(args(prompts=str(tmp_path / "no-such.jsonl")))
    assert tune_config(args()).grid == [1, 4]
    with pytest.raises(InvalidInput, match="--workload='96x128'"):
        tune_config(args(workload="96x128"))
    assert tune_config(args(workload="96:128")).workload.output_tokens == 128
    with pytest.raises(InvalidInput, match="--preflight"):
        tune_config(args(workload="96:128", preflight=True))


def test_step_times_are_made_monotone_in_k() -> None:
    p = paper_profile()
    for c in p.cells:
        if c.B == 1 and c.k == 3:
            c.engine_ms = 3.0  # noise: cheaper than k=0
    assert p.step_time_matrix(monotone=False)[0, 3] == 3.0
    assert p.step_time_matrix()[0, 3] == p.step_time_matrix()[0, 2]
    # With zero acceptance every k keeps 1 token; noise must not pick k=3.
    assert p.build([0.0, 0.0, 0.0]).table.to_list() == [[1, 16, 0]]


def test_workload_parse_and_lifetimes() -> None:
    from tuner.core.errors import InvalidInput
    from tuner.core.workload import Workload

    w = Workload.parse("96:128")
    assert (w.prompt_tokens, w.output_tokens) == (96, 128)
    # a request lives output / τ(k) steps: 128 at k=0, 73 at τ=1.75 (k=1 at a1=0.75)
    assert w.steps_per_request(1.0) == 128 and w.steps_per_request(1.75) == 73
    # so the prefill a step carries, B·prompt/lifetime, grows with τ(k): 192 tokens at k=0 and
    # B=256, 523 at τ=2.7 (the cost a pure-decode cell never sees)
    assert 256 * 96 / w.steps_per_request(1.0) == pytest.approx(192.0)
    assert w.steps_per_request(2.7) == 47
    for bad in ("96", "a:b", "96:1", "0:128", "96:128:5"):
        with pytest.raises(InvalidInput, match="PROMPT_TOKENS:OUTPUT_TOKENS"):
            Workload.parse(bad)


def test_a_profile_timed_under_another_workload_is_not_resumed() -> None:
    from tuner.core.errors import ProfileMismatch
    from tuner.core.workload import Workload

    p = paper_profile()
    with pytest.raises(ProfileMismatch, match="workload: profile has none, now 96:128"):
        p.check_matches(INFO, p.grid, Workload.parse("96:128"))
    p.workload = Workload.parse("96:128")
    p.check_matches(INFO, p.grid, Workload.parse("96:128"))


def test_another_repeat_while_the_cells_interval_is_wide() -> None:
    from tuner.core.profile import StepSample
    from tuner.core.samples import needs_more

    def smp(steps: list[float]) -> StepSample:
        return StepSample(B=4, k=1, rep=0, client_ms=10.0, engine_ms=float(np.median(steps)),
                          engine_steps=len(steps), full_draft_share=None, steps_ms=steps)

    steady = [smp([10.0, 10.1, 9.9, 10.0] * 8) for _ in range(3)]
    assert not needs_more(steady, repeats=3, ci_target=0.02, max_repeats=5)
    assert needs_more(steady[:2], repeats=3, ci_target=0.02, max_repeats=5)  # too few yet
    # one repeat ran in a slow stretch: the interval (a t interval over repeats) is wide
    noisy = steady[:2] + [smp([14.0, 14.2, 13.9, 14.1] * 8)]
    assert needs_more(noisy, repeats=3, ci_target=0.02, max_repeats=5)
    assert not needs_more(noisy + noisy[:2], repeats=3, ci_target=0.02, max_repeats=5)  # limit


def test_noise_line_on_the_h200_3b_profile() -> None:
    # a real profile (two repeats per cell, before adaptive repeats): the report says how far
    # repeats disagree, which is what decides whether a k choice is a finding
    p = load(Path(__file__).parents[3] / "benchmarks" / "results" / "h200-vllm0.26-3b-ngram-v1"
             / "profile.json")
    spreads = findings.repeat_spreads(p)
    assert len(spreads) == len(p.cells) and {n for _, n in spreads.values()} == {2}
    line = findings.noise_line(p)
    assert line is not None and line.startswith("repeats disagree by 13.2% at the median cell")
    assert "took more than" not in line  # that run had no adaptive repeats
    p.max_repeats, p.ci_target = 4, 0.02
    assert "0 of 52 cells took more than 2 repeats (up to 4, while its 98.3% interval was " \
        "wider than ±2%)" in (findings.noise_line(p) or "")  # 95% spent over 3 looks


def test_underfilled_workload_cells_are_named_on_the_h200_profile() -> None:
    # the H200 workload run (before the tuner waited for the batch): at B=256 the engine ran
    # 23-91 requests a step; the report must say T there is not T(256)
    p = load(Path(__file__).parents[3] / "benchmarks" / "results"
             / "h200-vllm0.26-3b-ngram-v1-wl96x128" / "profile.json")
    under = findings.underfilled(p)
    assert {s.B for s in under} >= {64, 128, 192, 256}
    assert all(s.B > 4 for s in under)  # B=1 and 4 held their batch
    warnings = findings.batch_warnings(p)
    assert any(w.startswith("B=256: ") and "requests a step" in w and "smaller batch" in w
               for w in warnings)
    from tuner.report import markdown
    assert "B=256: " in markdown(p, "profile-report.png")
    # pure-decode samples record no batch: nothing to warn about
    old = load(Path(__file__).parents[3] / "benchmarks" / "results" / "h200-vllm0.26-3b-ngram-v1"
               / "profile.json")
    assert findings.underfilled(old) == [] and findings.batch_warnings(old) == []


def test_a_grid_that_stops_below_max_num_seqs_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    """The committed 3B EAGLE-3 profile timed B <= 128 of 256: its table ran k=3 to 256 on T(128)
    held, past the 512-token graph limit where the engine's k=3 steps cost 5-8x (the H100's
    field run). The tune summary, the report and `tabletune table` say so."""
    from tuner.commands import cmd_table
    from tuner.report import markdown
    results = Path(__file__).parents[3] / "benchmarks" / "results"
    short = load(results / "h100-vllm0.26-3b-eagle3-v2-field-transit" / "profile.json")
    (w,) = findings.grid_warnings(short)
    assert "grid ends at B=128" in w and "max_num_seqs=256" in w and "256 in --grid" in w
    assert "grid ends at B=128" in markdown(short, "profile-report.png")
    path = results / "h100-vllm0.26-3b-eagle3-v2-field-transit" / "profile.json"
    assert cmd_table(args(profile=str(path), format="vllm", save=None, acceptance=None)) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["warnings"] == [w] and "warning: the grid ends at B=128" in out.err
    full = load(results / "h200-vllm0.26-3b-ngram-v1" / "profile.json")
    assert full.grid[-1] == full.engine.max_num_seqs and findings.grid_warnings(full) == []


def test_bench_serves_the_shape_the_profile_was_timed_for(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.cli import request_shape
    from tuner.core.workload import Workload

    def bench_args(**kw: object) -> argparse.Namespace:
        return argparse.Namespace(**{"prompts": "repetitive", "prompt_tokens": None,
                                     "max_tokens": None, **kw})

    assert request_shape(bench_args(), None) == (96, 64)               # the old defaults
    assert request_shape(bench_args(prompts="random"), None) == (32, 64)
    w = Workload.parse("200:300")
    assert request_shape(bench_args(), w) == (200, 300)                # the profile's shape
    assert capsys.readouterr().err == ""
    assert request_shape(bench_args(max_tokens=64), w) == (200, 64)    # the flag wins, and it says so
    assert "timed for 200-token prompts and 300-token outputs" in capsys.readouterr().err


def test_repeats_alternate_their_k_order_so_drift_falls_on_every_k() -> None:
    from tuner.sweep import repeat_order

    assert repeat_order([0, 1, 2, 3], 0) == [0, 1, 2, 3]
    assert repeat_order([0, 1, 2, 3], 1) == [3, 2, 1, 0]
    assert repeat_order([1, 3], 2) == [1, 3]
    # over a pair of repeats every k sits at the same mean position: a linear drift adds the
    # same to each k's mean
    ks = [0, 1, 2, 3]
    order = repeat_order(ks, 0) + repeat_order(ks, 1)
    positions = {k: sum(i for i, x in enumerate(order) if x == k) for k in ks}
    assert len(set(positions.values())) == 1


def test_report_plots_repeats_over_time_when_samples_say_when_they_started(tmp_path: Path) -> None:
    from PIL import Image

    from tuner.core.profile import StepSample
    from tuner.report import over_time, plot

    p = paper_profile()
    p.table = p.build().table.to_list()
    assert over_time(p)[0].size == 0  # no start times: three panels, as before
    with Image.open(plot(p, tmp_path / "old.png")) as im:
        narrow = im.size[0]
    # k=2's second repeat ran in a slow stretch: twice its first, 4/3 of the cell's median
    p.samples = [StepSample(B=4, k=k, rep=r, client_ms=10.0, engine_ms=ms, engine_steps=16,
                            full_draft_share=None, started=1000.0 + 60 * i)
                 for i, (k, r, ms) in enumerate([(0, 0, 10.0), (2, 0, 10.0), (2, 1, 20.0),
                                                 (0, 1, 10.0)])]
    minutes, ratio, ks = over_time(p)
    assert minutes.tolist() == [0.0, 1.0, 2.0, 3.0] and ks.tolist() == [0, 2, 2, 0]
    assert ratio.tolist() == [1.0, 10.0 / 15.0, 20.0 / 15.0, 1.0]
    with Image.open(plot(p, tmp_path / "new.png")) as im:
        assert im.size[0] > narrow  # the fourth panel


def test_a_sample_that_missed_its_batch_is_retaken_and_left_out_of_the_median() -> None:
    from tuner.core.profile import StepSample
    from tuner.core.samples import needs_more, usable

    def smp(ms: float, batch: float | None) -> StepSample:
        return StepSample(B=4, k=1, rep=0, client_ms=ms, engine_ms=ms, engine_steps=64,
                          full_draft_share=None, mean_batch=batch)

    full, short = smp(10.0, 3.9), smp(6.0, 2.5)  # 2.5 of 4: a T for a smaller batch
    assert needs_more([full, short], repeats=2, ci_target=0.1, max_repeats=4)  # one usable
    # two usable repeats 0.2% apart: within ±10% even at t(1)'s 38 (98.3%, three looks)
    assert not needs_more([full, short, smp(10.02, 3.8)], 2, 0.1, 4)
    assert needs_more([full, short, smp(10.2, 3.8)], 2, 0.1, 4)  # 2% apart is ±38% there
    assert not needs_more([short, short, short, short], 2, 0.1, 4)  # the limit
    assert usable([full, short]) == [full]
    assert usable([short, short]) == [short, short]  # nothing better: flagged, not dropped
    # pure-decode samples record no batch: the old rule, unchanged
    assert not needs_more([smp(10.0, None), smp(10.02, None)], 2, 0.1, 4)
    assert needs_more([smp(10.0, None), smp(10.5, None)], 2, 0.1, 4)


def test_cell_sigma_comes_from_the_profiles_own_repeats() -> None:
    from tuner.core.profile import Cell, Profile, StepSample

    def smp(B: int, k: int, rep: int, ms: float) -> StepSample:
        return StepSample(B=B, k=k, rep=rep, client_ms=ms, engine_ms=ms, engine_steps=64,
                          full_draft_share=None)

    # three cells repeated twice (log differences 0.02, 0.04 and 0.30), one measured once
    pairs = {(1, 0): 0.02, (1, 1): 0.04, (8, 0): 0.30}
    samples = [smp(B, k, r, 10.0 * np.exp(d * r)) for (B, k), d in pairs.items() for r in (0, 1)]
    samples.append(smp(8, 1, 0, 12.0))
    cells = [Cell(B=B, k=k, client_ms=10.0, engine_ms=10.0, wall_s=1.0)
             for B in (1, 8) for k in (0, 1)]
    p = Profile(created_at=0.0, engine=INFO.model_copy(update={"num_speculative_tokens": 1}),
                grid=[1, 8], decode_tokens=65, repeats=2, cells=cells, samples=samples)
    # each pair's variance is d²/2 with one degree of freedom: pooled over three
    pooled = np.sqrt(sum(d * d / 2 for d in pairs.values()) / 3)
    sigma = p.step_time_sigma()
    assert sigma[1, 1] == pytest.approx(pooled)                   # measured once: one repeat's sd
    assert sigma[0, 0] == pytest.approx(pooled / np.sqrt(2))      # close repeats: the pool's
    assert sigma[0, 1] == pytest.approx(pooled / np.sqrt(2))
    assert sigma[1, 0] == pytest.approx(0.30 / np.sqrt(2) / np.sqrt(2))  # wild repeats: its own
    # where a cell kept its repeats, they are its interval: a stored one (an older profile's
    # bootstrap) no longer widens it; a cell that kept no samples reads its stored one
    half = np.exp(1.96 * 0.4)
    p.cells[0] = p.cells[0].model_copy(update={"ci_low_ms": 10.0 / half, "ci_high_ms": 10.0 * half})
    assert p.step_time_sigma()[0, 0] == pytest.approx(pooled / np.sqrt(2))
    p.cells[3] = p.cells[3].model_copy(update={"ci_low_ms": 10.0 / half, "ci_high_ms": 10.0 * half})
    p.samples = [s for s in p.samples if (s.B, s.k) != (8, 1)]
    assert p.step_time_sigma()[1, 1] == pytest.approx(0.4, rel=1e-3)


def test_a_profile_that_says_nothing_of_its_noise_gets_no_made_up_sigma() -> None:
    p = paper_profile()  # no samples, ±1% intervals: the intervals are the pool
    assert np.allclose(p.step_time_sigma(), np.log(1.01 / 0.99) / (2 * 1.959964), rtol=1e-3)
    bare = p.model_copy(update={"cells": [c.model_copy(update={"ci_low_ms": None, "ci_high_ms": None})
                                          for c in p.cells]})
    with pytest.raises(InvalidInput, match="--repeats 2"):
        bare.step_time_sigma()


def test_old_profiles_load_and_new_cells_say_what_their_interval_is(tmp_path: Path) -> None:
    from tuner.cells import record_cell
    from tuner.core.profile import SCHEMA_VERSION, StepSample

    old = load(Path(__file__).parents[3] / "benchmarks" / "results" / "cpu-tiny" / "profile.json")
    assert old.schema_version == 1 and all(c.ci_level is None for c in old.cells)
    assert SCHEMA_VERSION == 2
    (tmp_path / "future.json").write_text(json.dumps({"schema_version": 3}))
    with pytest.raises(InvalidInput, match="reads 1 and 2"):
        load(tmp_path / "future.json")

    def smp(ms: float) -> StepSample:
        return StepSample(B=1, k=0, rep=0, client_ms=ms + 1, engine_ms=ms, engine_steps=3,
                          full_draft_share=None, steps_ms=[ms - 0.1, ms, ms + 0.1])

    p = paper_profile()
    one = record_cell(p, [smp(10.0)], 1.0, level=0.95)
    assert one.ci_low_ms is None and one.ci_high_ms is None and one.ci_level == 0.95
    two = record_cell(p, [smp(10.0), smp(12.0)], 1.0, level=0.95)
    assert two.engine_ms == pytest.approx(np.sqrt(120.0))  # the repeats' geometric mean
    assert two.ci_low_ms is not None and two.ci_high_ms is not None
    assert two.ci_low_ms < 10.0 and 12.0 < two.ci_high_ms and two.steps == 6
    p.save(tmp_path / "p.json")
    assert load(tmp_path / "p.json").schema_version == 2
