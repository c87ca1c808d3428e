"""Benchmark arithmetic and the TurboSpec-style baseline (pure)."""

from __future__ import annotations

import pytest

from benchmarks.analysis import Row, markdown, summarize
from benchmarks.baselines import linear_fit, turbospec_table
from benchmarks.synthetic import paper_profile


def rows(policy: str, load: int, *tps: float) -> list[Row]:
    return [Row(policy, load, i, t, 10, 5.0, "[]") for i, t in enumerate(tps)]


def test_loss_against_the_best_fixed_k_and_worst_case() -> None:
    data = (rows("fixed-k0", 1, 100, 100) + rows("fixed-k1", 1, 200, 180) +
            rows("fixed-k0", 8, 500, 500) + rows("fixed-k1", 8, 400, 400) +
            rows("tuned", 1, 190, 190) + rows("tuned", 8, 490, 490))
    s = summarize(data)
    assert s.median[("fixed-k1", 1)] == 190
    assert s.loss[("tuned", 1)] == pytest.approx(0.0)
    assert s.loss[("tuned", 8)] == pytest.approx(0.02)
    assert s.worst["fixed-k0"] == pytest.approx(1 - 100 / 190)
    assert s.worst["fixed-k1"] == pytest.approx(0.2)
    assert s.best_fixed_k == "fixed-k1"
    assert s.spread[("fixed-k1", 1)] == pytest.approx(20 / 190)
    text = markdown(s)
    assert "fixed-k1 (best single fixed k)" in text and "N=8" in text


def test_turbospec_fits_the_linear_model_and_builds_a_table() -> None:
    p = paper_profile()
    alpha, beta, gamma = linear_fit(p)
    assert alpha > 0 and beta > 0
    table = turbospec_table(p)
    assert table.to_list()[0][0] == 1 and table.to_list()[-1][1] == 16


def test_summary_shows_what_steps_carried_and_merge_reads_older_cells(tmp_path) -> None:
    from benchmarks.analysis import steps_markdown
    from benchmarks.merge import read
    from benchmarks.run import write_rows

    data = [Row("fixed-k1", 256, 0, 12449, 10, 4.0, "[]", 34.6, 250.0, 830.0),
            Row("fixed-k1", 256, 1, 12000, 10, 4.0, "[]", 35.0, 251.0, 840.0),
            Row("nospec", 256, 0, 21532, 10, 4.0, "[]")]
    s = summarize(data)
    assert s.steps[("fixed-k1", 256)] == (pytest.approx(34.8), pytest.approx(835.0))
    text = steps_markdown(s)
    assert "| fixed-k1 | 34.8 ms, 835 tok |" in text and "nospec" not in text
    assert steps_markdown(summarize(rows("fixed-k0", 1, 100))) == ""
    write_rows(data, tmp_path / "new.csv")
    assert read(tmp_path / "new.csv", 0) == data
    (tmp_path / "old.csv").write_text("policy,load,repeat,tokens_per_s,completed,window_s,table\n"
                                      "tuned,1,0,100.0,3,4.0,[]\n")
    assert read(tmp_path / "old.csv", 2) == [Row("tuned", 1, 2, 100.0, 3, 4.0, "[]")]


def test_step_check_sets_profile_step_times_against_the_bench(tmp_path) -> None:
    from benchmarks.run import write_rows
    from benchmarks.step_check import compare

    p = paper_profile()  # grid 1, 8, 16; K=3
    p.save(tmp_path / "profile.json")
    T = p.step_time_matrix(monotone=False)
    t8 = float(T[p.grid.index(8), 1])
    write_rows([Row("fixed-k1", 8, 0, 100.0, 3, 4.0, "[]", t8 * 1.10, 8.0, 20.0),
                Row("fixed-k1", 8, 1, 100.0, 3, 4.0, "[]", t8 * 1.30, 8.0, 24.0),
                Row("tuned", 8, 0, 100.0, 3, 4.0, "[]", 1.0, 8.0, 20.0),      # not a fixed k
                Row("fixed-k2", 5, 0, 100.0, 3, 4.0, "[]", 1.0, 5.0, 15.0)],  # N off the grid
               tmp_path / "cells.csv")
    rows, errors = compare(tmp_path / "cells.csv", [tmp_path / "profile.json"])
    assert [(r["load"], r["k"]) for r in rows] == [(5, 2), (8, 1)]
    assert rows[1]["bench_step_ms"] == pytest.approx(t8 * 1.2, abs=0.01)
    assert rows[1]["bench_tokens_per_step"] == 22.0 and "T_" + tmp_path.name in rows[1]
    assert errors[tmp_path.name] == pytest.approx(1 - 1 / 1.2, abs=0.01)


def test_switch_cost_is_the_alternating_step_over_the_mean_of_the_fixed_ones() -> None:
    from benchmarks.switch_cost import excess

    assert excess([10.0, 11.0, 10.0], [20.0, 20.0, 21.0], [15.0, 15.0, 16.0]) == pytest.approx(0.0)
    assert excess([10.0], [20.0], [16.5]) == pytest.approx(0.10)


def test_bench_policies_are_checked_before_any_engine_starts(tmp_path) -> None:
    from benchmarks.run import BenchConfig, policy_tables

    p = paper_profile()
    p.table = p.build().table.to_list()
    tables = policy_tables(p, ["tuned@tie=0.5"])
    assert tables["tuned@tie=0.5"].to_list() == p.model_copy(update={"tie": 0.5}).build().table.to_list()
    base = dict(profile=p, profile_path=tmp_path / "p.json", model=tmp_path, loads=[1], prompts=[[1]],
                out=tmp_path)
    BenchConfig(policies=["nospec", "fixed-k3", "tuned", "tuned@tie=0.05", "sidecar-from-quarter"], **base)
    with pytest.raises(ValueError, match=r"\['fixed-k9', 'tuned@tie=x'\]: not known"):
        BenchConfig(policies=["fixed-k9", "tuned", "tuned@tie=x"], **base)


def test_bench_turns_the_prefix_cache_off_unless_told() -> None:
    from benchmarks.run import engine_args

    assert engine_args(()) == ("--no-enable-prefix-caching",)
    assert engine_args(("--dtype=bfloat16",)) == ("--no-enable-prefix-caching", "--dtype=bfloat16")
    assert engine_args(("--enable-prefix-caching",)) == ("--enable-prefix-caching",)
    assert engine_args(("--no-enable-prefix-caching=true",)) == ("--no-enable-prefix-caching=true",)
    # another flag about the cache is not a choice about using it
    assert engine_args(("--prefix-caching-hash-algo=sha256",))[0] == "--no-enable-prefix-caching"
