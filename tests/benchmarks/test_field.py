"""The field bench (benchmarks/field.py): its figures from raw runs (benchmarks/field_summary.py),
its policy order, the client's flags, and its answers to bad input."""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.arm_run import ArmRun, BlockRun, Phase
from benchmarks.client_record import FieldRecord
from benchmarks.json_out import dumped
from benchmarks.field import config, main, order, parser
from benchmarks.field_client import ClientResult, client_argv, parse
from benchmarks.field_summary import (FIGURES, SAME, by_block, median_interval, summarize,
                                      versus_best_fixed, word)
from tests.benchmarks.arm_runs import block_run, field_record, phase
from tests.helpers import refused
from benchmarks.traffic import ClientRun

POLICIES = ["fixed-k0", "fixed-k1", "fixed-k2", "fixed-k3", "documented", "tuned"]


def run(block: int, shape: str, policy: str, tps: float, tpot: float,
        goodput: float | None = None) -> BlockRun:
    one = phase(round(tps * 10), 10.0, tpot, goodput=goodput, p50_tpot_ms=tpot)
    return block_run(block, shape, policy, [one])


def record(speed: dict[str, float], blocks: int = 6, noise: float = 0.01,
           shape: str = "burst-c16") -> FieldRecord:
    """Every policy's throughput at `speed[policy]` tokens/s (TPOT its inverse), each block's
    figures moved together by a block effect and apart by `noise`."""
    rng = np.random.default_rng(3)
    runs = []
    for b in range(blocks):
        common = rng.normal(0, 0.05)
        for p, s in speed.items():
            tps = s * math.exp(common + rng.normal(0, noise))
            runs.append(run(b, shape, p, tps, 1000.0 / tps))
    return field_record(runs, [shape], list(speed))


def test_a_table_faster_than_every_fixed_k_is_called_faster_with_its_closest_rival() -> None:
    speed = {"fixed-k0": 800.0, "fixed-k1": 900.0, "fixed-k2": 950.0, "fixed-k3": 930.0,
             "documented": 880.0, "tuned": 1000.0}
    got = summarize(record(speed))
    (shape,) = got["shapes"]
    assert shape["blocks"] == 6 and got["blocks"] == 6
    (tuned,) = [v for v in shape["versus_best_fixed"]
                if v["policy"] == "tuned" and v["metric"] == "output_throughput"]
    assert tuned["word"] == "faster" and tuned["closest"] == "fixed-k2"
    assert tuned["ratio"] == pytest.approx(1000 / 950, abs=0.02)
    assert 1.0 < tuned["ci"][0] < tuned["ratio"] < tuned["ci"][1]
    # the paired comparisons: output throughput above 1 is faster, p50 TPOT below 1 is
    by_key = {(c["policy"], c["versus"], c["metric"]): c for c in shape["comparisons"]}
    assert by_key[("tuned", "documented", "output_throughput")]["word"] == "faster"
    tpot = by_key[("tuned", "documented", "p50_tpot")]
    assert tpot["ratio"] < 1.0 and tpot["word"] == "faster"
    # TPOT (lower is better) against the best fixed k: tuned's is below every fixed k's
    (tpot,) = [v for v in shape["versus_best_fixed"]
               if v["policy"] == "tuned" and v["metric"] == "p50_tpot"]
    assert tpot["word"] == "faster" and tpot["closest"] == "fixed-k2"
    assert tpot["ci"][0] < tpot["ratio"] < tpot["ci"][1] < 1.0
    assert tpot["ratio"] == pytest.approx(950 / 1000, abs=0.02)
    # the documented table is slower than fixed k=2 by 7%: "slower" against the best fixed k
    (doc,) = [v for v in shape["versus_best_fixed"]
              if v["policy"] == "documented" and v["metric"] == "output_throughput"]
    assert doc["word"] == "slower" and doc["closest"] == "fixed-k2"
    # fixed k's are references, never compared as policies themselves
    assert {c["policy"] for c in shape["comparisons"]} == {"documented", "tuned"}
    figures = shape["policies"]["tuned"]
    assert figures["tokens_per_s"] == pytest.approx(1000.0, rel=0.1)
    assert figures["engine_tokens_per_s"] == pytest.approx(figures["tokens_per_s"], rel=0.01)
    assert figures["request_goodput"] is None  # no SLO given


def test_every_figure_users_read_has_a_median_an_interval_and_a_ratio_to_the_best_fixed_k(
) -> None:
    speed = {"fixed-k0": 800.0, "fixed-k1": 900.0, "fixed-k2": 950.0, "fixed-k3": 930.0,
             "documented": 880.0, "tuned": 1000.0}
    (shape,) = summarize(record(speed, blocks=9))["shapes"]
    tuned = shape["policies"]["tuned"]["figures"]
    assert set(tuned) == set(FIGURES)
    tput = tuned["output_throughput"]
    assert tput["ci"][0] < tput["median"] < tput["ci"][1]
    assert tput["versus_best_fixed"]["word"] == "faster"
    # TPOT is the inverse of throughput here: lower, so faster, against k=2 the closest
    tpot = tuned["tpot_p50_ms"]["versus_best_fixed"]
    assert tpot["closest"] == "fixed-k2" and tpot["word"] == "faster" and tpot["ratio"] < 1
    assert tuned["ttft_p99_ms"]["versus_best_fixed"]["word"] == SAME  # 1.0 ms in every run
    assert shape["policies"]["fixed-k2"]["figures"]["tpot_p50_ms"]["versus_best_fixed"] is None


def test_the_median_interval_takes_order_statistics_and_none_below_six_blocks() -> None:
    assert median_interval([3.0, 1.0, 2.0, 5.0, 4.0]) == [None, None]  # 1 - 2/32 < 95%
    assert median_interval([6.0, 1.0, 5.0, 2.0, 4.0, 3.0]) == [1.0, 6.0]
    assert median_interval([float(v) for v in range(1, 10)]) == [2.0, 8.0]  # 96.1% at n=9
    assert median_interval([float(v) for v in range(1, 9)] + [math.nan]) == [1.0, 8.0]


def test_faster_than_one_fixed_k_but_not_another_is_no_win() -> None:
    """The intersection-union rule: the best fixed k is not known, so a win must hold against
    each of them (a table 1% faster than k=2 but level with k=3 is no win)."""
    speed = {"fixed-k0": 500.0, "fixed-k1": 800.0, "fixed-k2": 990.0, "fixed-k3": 1000.0,
             "documented": 900.0, "tuned": 1000.0}
    got = summarize(record(speed, noise=0.02))
    for v in got["shapes"][0]["versus_best_fixed"]:
        if v["policy"] == "tuned":  # in throughput and in TPOT alike
            assert v["word"] == SAME and v["ci"][0] < 1.0 < v["ci"][1], v


def test_words_and_missing_intervals() -> None:
    assert word([1.01, 1.05], True) == "faster" and word([1.01, 1.05], False) == "slower"
    assert word([0.9, 0.99], True) == "slower" and word([0.97, 1.02], True) == SAME
    assert word([None, None], True) is None
    one = record({"fixed-k1": 900.0, "tuned": 1000.0}, blocks=1)
    for v in summarize(one)["shapes"][0]["versus_best_fixed"]:
        assert v["ci"] == [None, None] and v["word"] is None
    assert versus_best_fixed(by_block(one.runs, "burst-c16"), "tuned", []) is None


def test_request_goodput_pools_the_shapes_runs_by_duration() -> None:
    rec = record({"fixed-k1": 900.0, "tuned": 1000.0}, blocks=2)

    def served(p: Phase, goodput: float, duration: float) -> Phase:
        client = p.client.model_copy(update={"request_goodput": goodput, "duration": duration})
        return p.model_copy(update={"client": client})
    rec.runs = [r.model_copy(update={"phases": [served(r.phases[0], 2.0, 10.0),
                                                served(r.phases[0], 5.0, 30.0)]})
                for r in rec.runs]
    got = summarize(rec)["shapes"][0]["policies"]["tuned"]
    assert got["request_goodput"] == pytest.approx((2 * 10 + 5 * 30) / 40, abs=1e-3)


def test_each_block_shuffles_the_policies_its_own_way_and_the_warmup_keeps_them() -> None:
    policies = tuple(POLICIES)
    orders = {tuple(order(policies, b, seed=0)) for b in range(6)}
    assert len(orders) > 1 and all(sorted(o) == sorted(policies) for o in orders)
    assert order(policies, 2, seed=0) == order(policies, 2, seed=0)   # reproducible
    assert order(policies, -1, seed=0) == list(policies)


def test_the_clients_parser_takes_the_goodput_slos() -> None:
    argv = [*client_argv(ClientRun(8, 96, 64, 0.5, 0.5, max_concurrency=4), "127.0.0.1", 8000,
                         Path("/models/m"), "tiny", 1), "--goodput", "tpot:50", "ttft:2000"]
    assert parse(argv).goodput == ["tpot:50", "ttft:2000"]
    assert ClientResult.model_validate(
        {"duration": 1, "completed": 1, "total_input_tokens": 1, "total_output_tokens": 1,
         "request_throughput": 1, "output_throughput": 1, "request_goodput": 0.5,
         **{f"{s}_{m}_ms": 1.0 for s in ("mean", "p50", "p99") for m in ("ttft", "tpot", "itl")}}
    ).request_goodput == 0.5


def test_the_policies_expand_and_carry_their_tables(profile: Path, tmp_path: Path) -> None:
    argv = ["--profile", str(profile), "--model", str(tmp_path), "--policies",
            "fixed-k*,documented,tuned,sidecar-from-quarter", "--goodput", "tpot:50"]
    cfg = config(parser().parse_args(argv), argv)
    assert cfg.policies == (*POLICIES, "sidecar-from-quarter")
    assert set(cfg.tables) == set(POLICIES) and cfg.sidecars == ("sidecar-from-quarter",)
    assert cfg.tables["fixed-k2"].to_list()[0][2] == 2 and cfg.goodput == ("tpot:50",)
    assert cfg.scenario.engine_args[0] == "--no-enable-prefix-caching"
    assert cfg.scenario.drafter is None
    from benchmarks.field import meta
    assert cfg.sidecar_args == () and (meta(cfg).sidecar or [])[-1] != "--dry-run"
    observing = [*argv, "--sidecar-arg=--dry-run"]
    assert (meta(config(parser().parse_args(observing), observing)).sidecar or [])[-1] == "--dry-run"
    assert meta(cfg).watch is None
    with_drafter = [*argv, "--drafter", str(tmp_path / "eagle3")]
    assert config(parser().parse_args(with_drafter), with_drafter).scenario.drafter == tmp_path / "eagle3"


def test_the_bandit_is_a_policy_without_a_table(profile: Path, tmp_path: Path) -> None:
    argv = ["--profile", str(profile), "--model", str(tmp_path), "--policies",
            "fixed-k*,nightjar-style"]
    cfg = config(parser().parse_args(argv), argv)
    assert cfg.policies == (*(f"fixed-k{k}" for k in range(4)), "nightjar-style")
    assert "nightjar-style" not in cfg.tables and cfg.sidecars == ()


def test_a_run_may_pair_an_observing_sidecar_with_one_that_explores(profile: Path,
                                                                   tmp_path: Path) -> None:
    """Two processes from the same table: the watch one adds --dry-run after the user's flags,
    each has its own key in the record (and its own log)."""
    from benchmarks.field import meta, sidecar_keys

    argv = ["--profile", str(profile), "--model", str(tmp_path), "--policies",
            "tuned,sidecar-from-tuned,watch-from-tuned", "--sidecar-arg=--interval-s=2"]
    cfg = config(parser().parse_args(argv), argv)
    assert cfg.sidecars == ("sidecar-from-tuned", "watch-from-tuned")
    assert sidecar_keys(cfg) == {"sidecar": "sidecar-from-tuned", "watch": "watch-from-tuned"}
    m = meta(cfg)
    assert m.sidecar is not None and m.watch is not None
    assert m.sidecar[-1] == "--interval-s=2" and "--dry-run" not in m.sidecar
    assert m.watch[-2:] == ["--interval-s=2", "--dry-run"]
    assert m.watch[:-1] == m.sidecar


@pytest.mark.parametrize(("extra", "says"), [
    (["--policies", "fixed-k1"], "--policies='fixed-k1': give at least two"),
    (["--policies", "nospec,nightjar-style"], "no table to compare against"),
    (["--policies", "fixed-k1,sidecar-from-quarter,sidecar-from-tuned"],
     "sidecar-from-quarter,sidecar-from-tuned: one sidecar-from-TABLE a run"),
    (["--policies", "fixed-k1,watch-from-quarter,watch-from-tuned,sidecar-from-tuned"],
     "watch-from-quarter,watch-from-tuned: one watch-from-TABLE a run"),
    (["--policies", "fixed-k1,best"], "--policies: best not known for this profile"),
    (["--policies", "nightjar-style,sidecar-from-quarter"], "no table to compare against"),
    (["--sidecar-arg=--explore-every=0"], "--sidecar-arg=--explore-every=0: no sidecar policy runs"),
    (["--goodput", "tpot=50"], "--goodput='tpot=50': 'tpot=50' is not METRIC:MS"),
    (["--goodput", "speed:5"], "'speed:5' is not METRIC:MS"),
    (["--shapes", "tide"], "--shapes: 'tide' is not a shape"),
    (["--blocks", "0"], "--blocks=0: must be >= 1"),
    (["--prompts", "no-such-prompts.jsonl"], "--prompts=no-such-prompts.jsonl: cannot read it"),
    (["--chat-template"], "--chat-template: applies to --prompts FILE.jsonl only"),
    (["--prompts", "tests/data/prompts.jsonl", "--shapes", "mixed"], "drop mixed"),
])
def test_bad_input_is_one_line_naming_the_flag_and_exit_2(
        profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
        says: str) -> None:
    assert says in refused(main, profile, tmp_path, extra, capsys)


def test_resume_refuses_a_record_of_other_policies(profile: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--profile", str(profile), "--model", str(tmp_path), "--out", str(tmp_path / "o"),
            "--policies", "fixed-k1,tuned", "--resume"]
    cfg = config(parser().parse_args(argv), argv)
    out = tmp_path / "o"
    out.mkdir()
    from benchmarks.field import meta
    old = meta(cfg).model_copy(update={"policies": ["fixed-k2", "tuned"]})
    record = FieldRecord(schema_=1, meta=old, runs=[], warmup=[])
    (out / "field.json").write_text(json.dumps(dumped(record)))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--resume:" in err and "policies" in err and "fixed-k2" in err, err


def test_the_headline_is_one_holm_family_with_intervals_at_their_levels() -> None:
    speed = {"fixed-k0": 800.0, "fixed-k1": 900.0, "fixed-k2": 950.0, "fixed-k3": 930.0,
             "documented": 880.0, "tuned": 1000.0}
    got = summarize(record(speed))
    claims = {(c["versus"], c["metric"]): c for c in got["headline"]}
    assert set(claims) == {(v, m) for v in ("best fixed k", "documented")
                           for m in ("output_throughput", "p50_tpot")}
    assert got["family"] == 4
    best = claims[("best fixed k", "output_throughput")]
    assert best["word"] == "faster" and best["ci"][0] > 1.0 and best["level"] <= 0.05
    assert claims[("documented", "p50_tpot")]["word"] == "faster"       # TPOT below
    # the interval at Holm's level is wider than the plain 95% one of the same pair
    (plain,) = [c for c in got["shapes"][0]["comparisons"] if c["versus"] == "documented"
                and c["policy"] == "tuned" and c["metric"] == "output_throughput"]
    doc = claims[("documented", "output_throughput")]
    assert doc["ci"][0] <= plain["ci"][0] and doc["ci"][1] >= plain["ci"][1]


def test_a_policy_that_ran_the_documented_table_is_an_aa_not_a_claim() -> None:
    """The CPU run of 2026-12-05: tuned, documented and fixed k=3 were one table, and the
    uncorrected comparison called tuned 10% faster than documented."""
    rec = record({"fixed-k1": 900.0, "fixed-k3": 1000.0, "documented": 1000.0, "tuned": 1000.0})
    rec.meta.tables = {"fixed-k1": [[1, 32, 1]], "fixed-k3": [[1, 32, 3]],
                             "documented": [[1, 32, 3]], "tuned": [[1, 32, 3]]}
    got = summarize(rec)
    aa = [c for c in got["headline"] if c["versus"] == "documented"]
    assert aa and all(c["word"] == "same table" and c["p"] is None for c in aa)
    assert got["family"] == 2  # only the claims against the best fixed k
    detail = [c for c in got["shapes"][0]["comparisons"] if c["versus"] == "documented"]
    assert all(c["word"] == "same table" for c in detail)


def test_a_run_shorter_than_50_engine_steps_is_named() -> None:
    rec = record({"fixed-k1": 900.0, "tuned": 1000.0}, blocks=2)

    def stepped(r: BlockRun, steps: int) -> BlockRun:
        engine = r.phases[0].engine.model_copy(update={"steps": steps})
        return r.model_copy(update={"phases": [r.phases[0].model_copy(update={"engine": engine})]})
    rec.runs = [stepped(r, 30 if i == 1 else 120) for i, r in enumerate(rec.runs)]
    (short,) = summarize(rec)["short_runs"]
    assert short == {"block": 0, "shape": "burst-c16", "arm": "tuned", "steps": 30}


def test_two_wild_blocks_give_intervals_that_reach_zero_without_failing_the_summary() -> None:
    """Two blocks: a t quantile of 12.7, so an interval's end rounds to 0 (the CPU run of the
    ramp and mixed shapes stopped on it when a TPOT figure was turned into a rate)."""
    speed = {"fixed-k0": 800.0, "fixed-k1": 900.0, "documented": 880.0, "tuned": 1000.0}
    got = summarize(record(speed, blocks=2, noise=3.0))
    json.dumps(got, allow_nan=False)  # strict JSON: no inf or nan anywhere
    tpot = got["shapes"][0]["policies"]["tuned"]["figures"]["tpot_p50_ms"]["versus_best_fixed"]
    assert tpot is not None and tpot["word"] in (SAME, "faster", "slower", None)


def test_a_sidecar_is_compared_with_the_tuned_table_once_it_has_been_awake_a_minute() -> None:
    """Each sidecar run is awake 0.5 min: its run in block b follows 30·b s of learning, so
    blocks 2.. count after 60 s; there it runs at the tuned table's speed, before it at 80%."""
    from tests.benchmarks.arm_runs import seen

    runs = []
    for b in range(6):
        for p, tps in (("fixed-k1", 900.0), ("tuned", 1000.0),
                       ("sidecar-from-quarter", 800.0 if b < 2 else 1000.0 * (1 + 0.002 * (-1) ** b))):
            one = phase(round(tps * 10), 10.0, 1000.0 / tps, p50_tpot_ms=1000.0 / tps)
            sc = seen(minutes=0.5) if p.startswith("sidecar-") else None
            runs.append(block_run(b, "burst-c16", p, [one], sc))
    got = summarize(field_record(runs, ["burst-c16"], ["fixed-k1", "tuned", "sidecar-from-quarter"]))
    (shape,) = got["shapes"]
    by_metric = {c["metric"]: c for c in shape["after_learning"]}
    tps = by_metric["output_throughput"]
    assert tps["policy"] == "sidecar-from-quarter" and tps["versus"] == "tuned"
    assert tps["blocks"] == 4 and tps["ratio"] == pytest.approx(1.0, abs=0.005)
    assert tps["word"] == SAME and by_metric["p50_tpot"]["blocks"] == 4
    # over every block the early runs show: the tuned table is a reference there too
    every = {(c["policy"], c["versus"], c["metric"]): c for c in shape["comparisons"]}
    assert every[("sidecar-from-quarter", "tuned", "output_throughput")]["blocks"] == 6
    assert every[("sidecar-from-quarter", "tuned", "output_throughput")]["ratio"] < 0.95
    assert ("tuned", "tuned", "output_throughput") not in every


def test_the_share_of_the_gap_a_sidecar_closed_from_its_start_table() -> None:
    """quarter 500, tuned 1000, the sidecar from quarter at 500 in its first two blocks (30 s
    awake each) and ~900 after: over all 8 blocks a share of the log gap near (2·0 + 6·0.848)/8,
    after 60 s near log(1.8)/log(2) = 0.848 with an interval around it; no share where the
    start is the tuned table's equal."""
    from tests.benchmarks.arm_runs import seen

    rng = np.random.default_rng(5)
    runs = []
    for b in range(8):
        for p, tps in (("quarter", 500.0), ("tuned", 1000.0),
                       ("sidecar-from-quarter", 500.0 if b < 2 else 900.0)):
            tps *= math.exp(rng.normal(0, 0.02))
            one = phase(round(tps * 10), 10.0, 1000.0 / tps, p50_tpot_ms=1000.0 / tps)
            sc = seen(minutes=0.5) if p.startswith("sidecar-") else None
            runs.append(block_run(b, "burst-c16", p, [one], sc))
    policies = ["quarter", "tuned", "sidecar-from-quarter"]
    (shape,) = summarize(field_record(runs, ["burst-c16"], policies))["shapes"]
    every, after = shape["gap_closed"]
    assert (every["awake_s"], every["blocks"], after["awake_s"], after["blocks"]) == (0.0, 8, 60.0, 6)
    assert every["gap"] == pytest.approx(2.0, rel=0.03)
    assert every["share"] == pytest.approx(6 * math.log(1.8) / math.log(2) / 8, abs=0.03)
    assert after["share"] == pytest.approx(math.log(1.8) / math.log(2), abs=0.03)
    assert after["ci"][0] < after["share"] < after["ci"][1] and after["ci"][1] < 0.95
    same = [block_run(r.block, r.shape, r.arm, [phase(round(10000 * math.exp(rng.normal(0, 0.02))),
                                                      10.0, 1.0)], r.sidecar)
            if r.arm in ("quarter", "tuned") else r for r in runs]
    (shape,) = summarize(field_record(same, ["burst-c16"], policies))["shapes"]
    assert [g["share"] for g in shape["gap_closed"]] == [None, None]   # no gap to close
    # tuned slower than the start: no share, whatever the sidecar did
    worse = [block_run(r.block, r.shape, r.arm, [phase(round(10000 * (0.5 if r.arm == "tuned" else 1)
                                                              * math.exp(rng.normal(0, 0.02))),
                                                        10.0, 1.0)], r.sidecar) for r in runs]
    (shape,) = summarize(field_record(worse, ["burst-c16"], policies))["shapes"]
    assert {g["gap_word"] for g in shape["gap_closed"]} == {"slower"}
    assert [g["share"] for g in shape["gap_closed"]] == [None, None]
    # a run that delivered nothing is left out of the share, not a crash or a NaN
    empty = [block_run(r.block, r.shape, r.arm, [phase(0, 10.0, 1.0)], r.sidecar)
             if (r.block, r.arm) == (7, "quarter") else r for r in runs]
    (shape,) = summarize(field_record(empty, ["burst-c16"], policies))["shapes"]
    assert [g["blocks"] for g in shape["gap_closed"]] == [7, 5]
    assert all(math.isfinite(g["share"]) for g in shape["gap_closed"])


def test_each_sidecar_policy_counts_its_own_time_awake() -> None:
    """Two sidecars in one part: each one's learning time is its own runs', not the other's."""
    from benchmarks.field_summary import awake_before
    from tests.benchmarks.arm_runs import seen

    runs = [block_run(b, "burst-c16", p, [phase(1000, 10.0, 1.0)], seen(minutes=0.5))
            for b in range(3) for p in ("sidecar-from-tuned", "watch-from-tuned")]
    awake = awake_before(runs)
    assert [awake[(0, b, "burst-c16", "watch-from-tuned")] for b in range(3)] == [0.0, 30.0, 60.0]
    assert awake[(0, 2, "burst-c16", "sidecar-from-tuned")] == 60.0


def test_without_a_sidecar_or_a_tuned_table_there_is_no_comparison_after_learning() -> None:
    got = summarize(record({"fixed-k1": 900.0, "tuned": 1000.0}))
    assert got["shapes"][0]["after_learning"] == []


FIELD_RESULTS = sorted((Path(__file__).parents[2] / "benchmarks/results").rglob("field.json"))


@pytest.mark.parametrize("path", FIELD_RESULTS, ids=lambda p: str(p.parent.name))
def test_every_committed_field_summary_is_its_runs_summarized(path: Path) -> None:
    assert summarize(FieldRecord.model_validate_json(path.read_text())) == json.loads(
        (path.parent / "summary.json").read_text())


def test_no_speculation_is_a_policy_its_own_engine_serves_after_the_others(
        profile: Path, tmp_path: Path) -> None:
    """nospec passes the flags, holds no table, and the speculative engine's blocks leave room
    for its start and the blocks it will owe, each at one policy's share of a block."""
    from benchmarks.field import meta, next_block, plain_reserve, slowest_share, speculative

    argv = ["--profile", str(profile), "--model", str(tmp_path), "--policies",
            "fixed-k1,tuned,nospec", "--warmup-rounds", "1"]
    cfg = config(parser().parse_args(argv), argv)
    assert cfg.policies == ("fixed-k1", "tuned", "nospec") and "nospec" not in cfg.tables
    assert speculative(cfg) == ("fixed-k1", "tuned")
    rec = FieldRecord(schema_=1, meta=meta(cfg), runs=[], warmup=[])
    reserve = plain_reserve(cfg, rec, start_s=100.0)
    # start, one warmup round and 3 owed blocks, each half a 60-s block (two policies)
    assert reserve(3, 60.0) == pytest.approx(100 + (1 + 3) * 30)
    # two speculative blocks ran, no plain one: those two are owed too
    rec.runs = [run(b, "burst-c16", p, 100.0, 10.0) for b in (0, 1) for p in ("fixed-k1", "tuned")]
    assert next_block(rec, speculative(cfg)) == 2 and next_block(rec, ("nospec",)) == 0
    assert plain_reserve(cfg, rec, 100.0)(1, 60.0) == pytest.approx(100 + (1 + 2 + 1) * 30)
    argv = argv[:5] + ["fixed-k1,tuned"]
    assert plain_reserve(config(parser().parse_args(argv), argv), rec, 100.0)(3, 60.0) == 0.0
    # priced at the slowest policy's share of the newest block: 30 of 40 s
    rec.runs[-2:] = [r.model_copy(update={"wall_s": w}) for r, w in zip(rec.runs[-2:], (30.0, 10.0))]
    assert slowest_share(rec, speculative(cfg)) == pytest.approx(0.75)
    assert plain_reserve(cfg, rec, 100.0)(1, 40.0) == pytest.approx(100 + (1 + 2 + 1) * 30)


def test_owed_no_speculation_runs_take_the_part_of_the_blocks_they_pair_with() -> None:
    """A resumed call finishing no speculation's blocks 1..2 files them under the call that ran
    the other policies there, so the summary pairs them (it pairs by part and block)."""
    from benchmarks.field import with_their_parts

    runs = [run(b, "burst-c16", "tuned", 100.0, 10.0).model_copy(update={"part": 0})
            for b in range(3)]
    runs += [run(0, "burst-c16", "nospec", 80.0, 12.0)]
    runs += [run(b, "burst-c16", "nospec", 80.0, 12.0).model_copy(update={"part": 1})
             for b in (1, 2)]
    fixed = with_their_parts(runs)
    assert {(r.arm, r.block, r.part) for r in fixed if r.arm == "nospec"} == {
        ("nospec", 0, 0), ("nospec", 1, 0), ("nospec", 2, 0)}
    got = summarize(field_record(fixed, ["burst-c16"], ["tuned", "nospec"]))
    assert got["shapes"][0]["blocks"] == 3
    claim = next(c for c in got["headline"] if c["versus"] == "nospec")
    assert claim["policy"] == "tuned" and claim["blocks"] == 3


def test_a_block_that_would_eat_the_time_reserved_after_it_is_not_begun() -> None:
    """The budget check counts what later work needs for the blocks run so far."""
    from benchmarks.client_bench import Blocks, run_blocks
    from benchmarks.client_record import Part

    rec = field_record([], ["burst-c16"], ["fixed-k1"])
    info = Part(part=0, first_block=0, stop_reason="blocks")
    ran: list[int] = []

    async def one_round(block: int, seed: int) -> list[tuple[int, ArmRun]]:
        ran.append(block)
        await asyncio.sleep(0.001)  # a block's time above 0, so the budget check runs
        return []

    asyncio.run(run_blocks(one_round, Blocks(blocks=9, budget_s=1e6, warmup_rounds=0, seed=0),
                           rec, info, 0, time.monotonic(), lambda: {},
                           lambda _: None, reserve=lambda n, _s: 0.0 if n <= 2 else 1e9))
    assert ran == [0, 1]  # block 2 would leave less than the 1e9 s reserved: no timing involved
    assert info.stop_reason.startswith("budget: block 2") and info.blocks == 2
