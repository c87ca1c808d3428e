"""Exploration's cost from the sidecar's own duels (benchmarks/duel_cost.py): the explored share
from the record, the shortfall from the pairs, and a refusal where the record cannot tell."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.arm_run import BlockRun, EngineCounts
from benchmarks.client_record import FieldRecord
from benchmarks.duel_cost import duel_cost, main, mean_interval, verdict
from benchmarks.json_out import dumped
from benchmarks.sidecar_log import LoggedPair
from tests.benchmarks.arm_runs import block_run, field_record, phase, seen
from tuner.core.errors import InvalidInput

TABLES = {"tuned": [[1, 32, 3]]}
POLICIES = ["tuned", "sidecar-from-tuned"]


def counted(steps_per_k: dict[int, int] | None, explore: int | None = None, pushes: int = 0,
            block: int = 0) -> BlockRun:
    one = phase(1000.0, 10.0)
    engine = EngineCounts.model_validate({**one.engine.model_dump(), "steps": sum(
        (steps_per_k or {}).values()) or 100, "steps_per_k": steps_per_k, "explore_steps": explore})
    return block_run(block, "burst-c16", "sidecar-from-tuned",
                     [one.model_copy(update={"engine": engine})], seen(pushes=pushes))


def pair(log_ratio: float, k: int = 2, ref: int = 3, seq: int = 1) -> LoggedPair:
    return LoggedPair(seq=seq, bucket=16, k=k, ref=ref, log_ratio=log_ratio, steps=16)


def test_the_cost_is_the_explored_share_times_the_pairs_mean_shortfall() -> None:
    record = field_record([counted({3: 980, 2: 20}, block=b) for b in range(2)],
                          ["burst-c16"], POLICIES, TABLES)
    pairs = [pair(math.log(0.9), seq=i) for i in range(3)] + [pair(math.log(0.8), seq=9)]
    got = duel_cost(record, [pairs], "sidecar-from-tuned")
    assert got.explored_steps == 40 and got.steps == 2000 and got.explored_from == "steps_per_k"
    assert got.mean_loss == pytest.approx(0.125)
    assert got.cost == pytest.approx(0.02 * 0.125, abs=1e-6)
    assert got.cost_ci[0] < got.cost < got.cost_ci[1]
    assert got.bound == "upper" and got.by_pair == {"k2 vs k3": 4} and got.variance == "eq. EARLY"
    # the plain interval assumes independence: narrower than the sidecar's bound
    lo, hi = got.cost_ci_independent
    assert got.cost_ci[0] < lo < got.cost < hi < got.cost_ci[1] and -1 <= got.lag1 <= 1
    assert got.paired_share == 1.0  # the pairs cover more steps than counted: capped


def test_the_plugins_explore_counter_wins_and_a_larger_k_makes_the_figure_approximate() -> None:
    record = field_record([counted({3: 900, 2: 100}, explore=10)], ["burst-c16"], POLICIES,
                          TABLES)
    pairs = [pair(0.1, k=2), pair(-0.1, k=4, ref=3), pair(0.0), pair(0.05)]
    got = duel_cost(record, [pairs], "sidecar-from-tuned")
    assert got.explored_steps == 10 and got.explored_from == "explore_steps"
    assert got.bound == "approximate"
    assert duel_cost(record, [[pair(0.1), pair(0.0), pair(0.05), pair(-0.1)]],
                     "sidecar-from-tuned").bound == "upper"
    pushed = field_record([counted({3: 900, 2: 100}, explore=10, pushes=1)], ["burst-c16"],
                          POLICIES, TABLES)
    assert duel_cost(pushed, [[pair(0.1), pair(0.0), pair(0.05), pair(-0.1)]],
                     "sidecar-from-tuned").bound == "approximate"  # the table's k moved


@pytest.mark.parametrize(("runs", "tables", "says"), [
    ([counted(None)], TABLES, "neither explore_steps nor steps per k"),
    ([counted({3: 90, 1: 10})], {"tuned": [[1, 8, 3], [9, 32, 1]]}, "not one k at every"),
    ([counted({3: 90, 2: 10}, pushes=1)], TABLES, "pushed a table"),
])
def test_a_record_that_cannot_tell_the_explored_steps_is_refused(
        runs: list[BlockRun], tables: dict[str, list[list[int]]], says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        duel_cost(field_record(runs, ["burst-c16"], POLICIES, tables), [[pair(0.0), pair(0.1)]],
                  "sidecar-from-tuned")


def test_from_24_pairs_the_interval_uses_the_pairs_own_long_run_variance() -> None:
    """Below, the sidecar's eq. EARLY (AR(1) rho = 0.5 assumed) is wider on the same spread."""
    rng = np.random.default_rng(1)
    u = list(rng.normal(0.05, 0.1, 48))
    m, lo, hi, how = mean_interval(u)
    assert how == "eq. LRV" and lo < m < hi and m == pytest.approx(float(np.mean(u)))
    _, lo12, hi12, how12 = mean_interval(u[:12])
    assert how12 == "eq. EARLY" and hi12 - lo12 > hi - lo
    with pytest.raises(InvalidInput, match="1 pair"):
        mean_interval([0.1])
    assert [verdict(c) for c in ([0.001, 0.004], [0.006, 0.01], [0.0, 0.02])] == [
        "met", "missed", "undecided"]


def test_two_logs_pairs_are_one_interval_but_never_one_series() -> None:
    """A resumed record's two parts: one interval over every pair, but the lag-1 reads each
    log apart (A alternates pair by pair; B is constant: joined, B's first pair would sit
    beside A's last)."""
    record = field_record([counted({3: 980, 2: 20}, block=b) for b in range(2)],
                          ["burst-c16"], POLICIES, TABLES)
    a = [pair(v, seq=100 * (i + 1)) for i, v in enumerate([0.1, -0.1] * 10)]
    b = [pair(0.3, seq=100 * (i + 1)) for i in range(20)]
    got = duel_cost(record, [a, b], "sidecar-from-tuned")
    assert got.pairs == 40 and got.lag1 == pytest.approx(-1.0, abs=0.01)
    joined = duel_cost(record, [a + b], "sidecar-from-tuned").lag1
    assert joined is not None and joined > 0
    assert duel_cost(record, [a + b], "sidecar-from-tuned").cost_ci == got.cost_ci


def test_the_command_writes_its_file_and_refuses_bad_input_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record: FieldRecord = field_record([counted({3: 950, 2: 50})], ["burst-c16"], POLICIES, TABLES)
    (tmp_path / "field.json").write_text(json.dumps(dumped(record)))
    log = tmp_path / "sidecar.log"
    log.write_text("\n".join(json.dumps({"event": "pair", "pair": {
        "seq": i, "bucket": 16, "k": 2, "ref": 3, "log_ratio": -0.05 * (i % 3), "steps": 16}})
        for i in range(6)))
    out = tmp_path / "duel-cost.json"
    assert main(["--field", str(tmp_path / "field.json"), "--log", str(log), "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["arm"] == "sidecar-from-tuned" and got["explored_share"] == pytest.approx(0.05)
    capsys.readouterr()
    assert main(["--field", str(tmp_path / "nope.json"), "--log", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --field=") and "Traceback" not in err and err.count("\n") == 1
