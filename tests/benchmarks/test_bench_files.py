"""The bench's pure parts around the statistics: policies, request mixes, cells.csv, summary."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from benchmarks.baselines import linear_fit, turbospec_table
from benchmarks.cells import Window, read_windows, write_windows
from benchmarks.policies import engine_args, expand, policy_tables, quarter_table, with_aa
from benchmarks.scenario import on_profile
from benchmarks.stats import Settings, analyze
from benchmarks.synthetic import paper_profile
from benchmarks.workload import lengths, requests

from tests.benchmarks.test_stats import blocks


def test_turbospec_fits_the_linear_model_and_builds_a_table() -> None:
    p = paper_profile()
    alpha, beta, gamma = linear_fit(p)
    assert alpha > 0 and beta > 0
    table = turbospec_table(p)
    assert table.to_list()[0][0] == 1 and table.to_list()[-1][1] == 16


def test_policies_expand_and_the_quarter_table_is_shrunk_before_it_is_fitted() -> None:
    assert expand("fixed-k*,tuned,aa:fixed-kK,fixed-k3", 3) == [
        "fixed-k0", "fixed-k1", "fixed-k2", "fixed-k3", "tuned", "aa:fixed-k3"]
    assert with_aa(["tuned", "fixed-k1"], 3) == ["tuned", "fixed-k1", "fixed-k3", "aa:fixed-k3"]
    assert with_aa(["fixed-k1", "aa:fixed-k1"], 3) == ["fixed-k1", "aa:fixed-k1"]
    assert quarter_table(3, 32).to_list() == [[1, 16, 3], [17, 32, 1]]
    assert quarter_table(3, 256).to_list() == [[1, 16, 3], [17, 32, 1], [33, 256, 0]]
    assert quarter_table(2, 8).to_list() == [[1, 8, 2]]
    p = paper_profile()
    p.table = p.build().table.to_list()
    tables = policy_tables(p, ["tuned@tie=0.5", "aa:tuned"])
    assert tables["aa:tuned"] == tables["tuned"]
    assert tables["tuned@tie=0.5"].to_list() == p.model_copy(update={"tie": 0.5}).build().table.to_list()


def test_bench_config_refuses_what_cannot_run_before_any_engine_starts(tmp_path: Path) -> None:
    from benchmarks.run import BenchConfig

    p = paper_profile()  # K=3, max_num_seqs=16
    p.table = p.build().table.to_list()
    base = dict(scenario=on_profile(tmp_path / "p.json", p, tmp_path, tmp_path), loads=[1, 16],
                requests=[[1]])
    cfg = BenchConfig(policies=["fixed-k3", "aa:fixed-k3", "tuned", "nospec", "sidecar-from-quarter"], **base)
    assert cfg.reference == "fixed-k3" and cfg.paired_policies == ["nospec", "sidecar-from-quarter"]
    with pytest.raises(ValueError, match=r"\['fixed-k9', 'tuned@tie=x'\]: not known"):
        BenchConfig(policies=["fixed-k9", "tuned", "tuned@tie=x"], **base)
    with pytest.raises(ValueError, match=r"aa:fixed-k1.*needs its twin"):
        BenchConfig(policies=["fixed-k3", "aa:fixed-k1"], **base)
    with pytest.raises(ValueError, match="pair reference fixed-k3"):
        BenchConfig(policies=["fixed-k1", "nospec"], **base)
    with pytest.raises(ValueError, match=r"loads=\[1, 32\]: each must be in 1..16"):
        BenchConfig(policies=["fixed-k3"], **{**base, "loads": [1, 32]})
    earlier = [Window(block=0, round=0, load=1, group="tables", position=0, policy="tuned",
                      tokens_per_s=1.0, window_s=1.0, started_s=0.0)]
    with pytest.raises(ValueError, match=r"--resume: .* policies \['tuned'\]"):
        BenchConfig(policies=["fixed-k3"], resume=earlier, **base)


def test_bench_turns_the_prefix_cache_off_unless_told() -> None:
    assert engine_args(()) == ("--no-enable-prefix-caching",)
    assert engine_args(("--dtype=bfloat16",)) == ("--no-enable-prefix-caching", "--dtype=bfloat16")
    assert engine_args(("--enable-prefix-caching",)) == ("--enable-prefix-caching",)
    assert engine_args(("--no-enable-prefix-caching=true",)) == ("--no-enable-prefix-caching=true",)
    assert engine_args(("--prefix-caching-hash-algo=sha256",))[0] == "--no-enable-prefix-caching"


def test_request_mixes_draw_stationary_lengths() -> None:
    steady = lengths("steady", 96, 64, 1024, n=2000)
    assert {p for p, _ in steady} == {96}
    outs = [o for _, o in steady]
    assert min(outs) == 32 and max(outs) == 96 and statistics.mean(outs) == pytest.approx(64, rel=0.03)
    chat = lengths("chat", 96, 64, 1024, n=4000)
    prompts, outs = [p for p, _ in chat], [o for _, o in chat]
    assert statistics.median(prompts) == pytest.approx(96, rel=0.1)
    assert statistics.median(outs) == pytest.approx(64, rel=0.1)
    assert max(prompts) == 512 and max(p + o for p, o in chat) <= 1023  # clipped to the model
    assert statistics.quantiles(outs, n=20)[-1] > 3 * 64  # a long tail
    assert lengths("chat", 96, 64, 1024, n=10, seed=1) == lengths("chat", 96, 64, 1024, n=10, seed=1)
    with pytest.raises(ValueError, match="workload mix 'burst': use one of steady, chat"):
        lengths("burst", 96, 64, 1024)
    pool = requests("chat", [list(range(600))], 96, 64, 1024)
    assert all(r.prompt == list(range(len(r.prompt))) and r.max_tokens >= 1 for r in pool)


def test_cells_round_trip_and_an_old_file_is_named(tmp_path: Path) -> None:
    w = [Window(block=0, round=0, load=4, group="tables", position=1, policy="fixed-k3",
                tokens_per_s=812.5, window_s=4.0, started_s=12.0, client_completed=9,
                table_version=7, step_ms=7.5, requests_per_step=3.9, tokens_per_step=22.0,
                table="[[1, 32, 3]]"),
         Window(block=1, round=0, load=4, group="nospec", position=0, policy="nospec",
                tokens_per_s=900.0, window_s=4.0, started_s=20.0)]
    write_windows(w, tmp_path / "cells.csv")
    assert read_windows(tmp_path / "cells.csv") == w
    # a file from before the `dropped` column: every window read as kept
    old = "\n".join(",".join(c for c in line.split(",")[:-1])
                    for line in (tmp_path / "cells.csv").read_text().splitlines())
    (tmp_path / "before.csv").write_text(old + "\n")
    assert read_windows(tmp_path / "before.csv") == w
    (tmp_path / "old.csv").write_text("policy,load,repeat,tokens_per_s\ntuned,1,0,100.0\n")
    with pytest.raises(ValueError, match="old.csv: no 'block' column"):
        read_windows(tmp_path / "old.csv")


def test_summary_json_and_markdown_carry_every_interval(tmp_path: Path) -> None:
    from benchmarks.report import write

    truth = {"fixed-k1": {1: 80.0, 8: 200.0}, "fixed-k3": {1: 100.0, 8: 180.0},
             "documented": {1: 100.0, 8: 180.0}, "tuned": {1: 99.0, 8: 199.0},
             "aa:fixed-k3": {1: 100.0, 8: 180.0}}
    windows = blocks(truth, 8, noise=0.02)
    a = analyze(windows, Settings(), head_to_head=[("tuned", "documented")])
    windows.append(dataclasses.replace(windows[0], tokens_per_s=-5.0, dropped="implausible: test"))
    design = {"kind": "fixed", "planned_blocks": 8, "basis": "test"}
    write(windows, a, tmp_path, "test", {"stop_reason": "test", "rounds": 8, "wall_s": 1.0,
                                         "design": design})
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["schema"] == 2 and s["aa_ci_halfwidth"] == pytest.approx(a.aa_halfwidth, abs=1e-4)
    assert s["design"] == {**design, "achieved_blocks": {"1": 8, "8": 8}}
    assert s["family"]["method"] == "holm" and s["family"]["family_wise_level"] == 0.05
    assert s["family"]["size"] == a.family.size == 2 * 5
    assert s["dropped_reasons"] == {"implausible: test": 1}
    for n in ("1", "8"):
        for p in ("fixed-k1", "fixed-k3", "documented", "tuned"):
            cell = s["loads"][n][p]
            assert {"ratio", "ratio_ci_low", "ratio_ci_high", "ci_level", "p_holm", "verdict",
                    "n_blocks"} <= set(cell)
            assert cell["ratio_ci_low"] <= cell["ratio"] <= cell["ratio_ci_high"]
    assert s["loads"]["8"]["documented"]["verdict"] == "worse"
    assert s["references"] == {"1": "fixed-k3", "8": "fixed-k1"}
    w = s["worst_case"]["documented"]
    assert w["at_load"] == 8 and w["loss_ci_low"] <= w["loss"] <= w["loss_ci_high"]
    assert w["n_blocks"] == 8
    assert set(s["head_to_head"]["tuned / documented"]) == {"1", "8"}
    md = (tmp_path / "summary.md").read_text()
    assert md.index("Noise floor (A/A)") < md.index("Against the best fixed k")
    assert "Design: fixed" in md and "Holm" in md and "1 × implausible: test" in md
    assert "intervals.png" in md
    assert (tmp_path / "intervals.png").stat().st_size > 10_000


def test_step_check_reads_the_bench_cells(tmp_path: Path) -> None:
    from benchmarks.step_check import compare

    p = paper_profile()  # grid 1, 8, 16; K=3
    p.save(tmp_path / "profile.json")
    t8 = float(p.step_time_matrix(monotone=False)[p.grid.index(8), 1])

    def win(policy: str, load: int, ms: float, tok: float) -> Window:
        return Window(block=0, round=0, load=load, group="tables", position=0, policy=policy,
                      tokens_per_s=100.0, window_s=4.0, started_s=0.0, step_ms=ms, tokens_per_step=tok)

    write_windows([win("fixed-k1", 8, t8 * 1.1, 20.0), win("fixed-k1", 8, t8 * 1.3, 24.0),
                   win("tuned", 8, 1.0, 20.0), win("fixed-k2", 5, 1.0, 15.0)], tmp_path / "cells.csv")
    rows, errors = compare(tmp_path / "cells.csv", [tmp_path / "profile.json"])
    assert [(r["load"], r["k"]) for r in rows] == [(5, 2), (8, 1)]
    assert rows[1]["bench_step_ms"] == pytest.approx(t8 * 1.2, abs=0.01)
    assert errors[tmp_path.name] == pytest.approx(1 - 1 / 1.2, abs=0.01)


def test_switch_cost_is_the_alternating_step_over_the_mean_of_the_fixed_ones() -> None:
    from benchmarks.switch_cost import excess

    assert excess([10.0, 11.0, 10.0], [20.0, 20.0, 21.0], [15.0, 15.0, 16.0]) == pytest.approx(0.0)
    assert excess([10.0], [20.0], [16.5]) == pytest.approx(0.10)


def test_cli_defaults() -> None:
    from benchmarks.cli import default_loads, head_to_head

    assert default_loads(32) == [1, 4, 16, 32] and default_loads(256) == [1, 4, 16, 64, 256]
    assert default_loads(1) == [1]
    assert head_to_head("tuned:documented,tuned:quarter", ["tuned", "documented"]) == [
        ("tuned", "documented")]


def test_the_speculating_engine_starts_with_every_k_and_the_profiles_drafter(tmp_path: Path) -> None:
    from benchmarks.engines import max_model_len
    from tuner.engine_defaults import default_model
    from tuner.replay import Replay

    p = paper_profile()
    p.engine = p.engine.model_copy(update={"method": "draft_model", "drafter": "drafter-here"})
    s = on_profile(tmp_path, p, tmp_path, tmp_path, (), Replay(rates=(0.5, 0.3, 0.1), by="vllm"),
                   drafter=tmp_path / "d")
    cfg = s.server(1234)
    spec = json.loads(cfg.speculative.to_json())  # type: ignore[union-attr]
    assert spec["method"] == "draft_model" and spec["model"] == str(tmp_path / "d")
    assert spec["num_speculative_tokens_per_batch_size"][0] == [1, 1, 3]  # every k at startup
    assert spec["synthetic_acceptance_rates"] == [0.5, 0.3, 0.1]
    assert cfg.env["TABLETUNE_ADMIN_PORT"] == "1234"
    p.engine = p.engine.model_copy(update={"drafter": default_model().drafter.name})
    spec = json.loads(on_profile(tmp_path, p, tmp_path, tmp_path).server(1).speculative.to_json())  # type: ignore[union-attr]
    assert spec["model"] == str(default_model().drafter)  # resolved from the profile's name
    assert max_model_len(("--max-model-len=2048",)) == 2048
    assert max_model_len(("--max-model-len", "512", "--dtype=x")) == 512 and max_model_len(()) == 1024


def test_a_resumed_bench_goes_on_after_the_earlier_rounds(tmp_path: Path) -> None:
    from benchmarks.run import Bench, BenchConfig

    p = paper_profile()
    earlier = [Window(block=b, round=b // 2, load=1, group="tables", position=0, policy="fixed-k3",
                      tokens_per_s=1.0, window_s=1.0, started_s=0.0) for b in range(6)]
    cfg = BenchConfig(scenario=on_profile(tmp_path / "p.json", p, tmp_path, tmp_path), loads=[1],
                      policies=["fixed-k3"], requests=[[1]], resume=earlier)
    b = Bench(cfg, lambda w, i: None)
    assert b.info.rounds == 3 and b._next_block() == 6 and len(b.windows) == 6


def test_render_merges_benches_keeping_their_blocks_apart(tmp_path: Path) -> None:
    from benchmarks.render import main

    truth = {"fixed-k1": {4: 100.0}, "fixed-k3": {4: 90.0}, "aa:fixed-k3": {4: 90.0}}
    write_windows(blocks(truth, 4, noise=0.01), tmp_path / "a.csv")
    write_windows(blocks(truth, 3, noise=0.01, seed=5), tmp_path / "b.csv")
    out = tmp_path / "merged"
    assert main([str(out), str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]) == 0
    w = read_windows(out / "cells.csv")
    assert sorted({x.block for x in w}) == list(range(7)) and max(x.round for x in w) == 6
    s = json.loads((out / "summary.json").read_text())
    assert s["blocks"] == {"4": 7} and s["meta"]["merged_from"][0].endswith("a.csv")
    assert s["design"]["kind"] == "adaptive"   # no design in the meta: said, not assumed
    assert main([str(out)]) == 0  # re-rendered from its own cells.csv and meta
    assert json.loads((out / "summary.json").read_text())["blocks"] == {"4": 7}


def test_bad_flags_end_in_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.cli import main

    profile = str(Path(__file__).parents[2] / "benchmarks" / "results" / "cpu-tiny" / "profile.json")
    assert main(["--profile", profile, "--window-s", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "bench: --window-s=-1.0: Input should be greater than 0"
    assert main(["--profile", profile, "--policies", "fixed-k9"]) == 2
    assert "bench: policies ['fixed-k9']: not known" in capsys.readouterr().err
