"""The do-no-harm record's descriptive figures (benchmarks/noharm_figures.py) and the
rank-based interval they use (benchmarks/inference.hodges_lehmann): pure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.arm_run import BlockRun, EngineCounts
from benchmarks.client_record import FieldRecord, NoharmRecord
from benchmarks.json_out import dumped
from benchmarks.inference import hodges_lehmann, signed_rank_null
from benchmarks.noharm_figures import figures, short_drafts
from benchmarks.noharm_of_field import main as noharm_of_field
from benchmarks.policies import SIDECAR_POLICIES
from benchmarks.noharm_summary import from_field
from tests.benchmarks.arm_runs import block_run, field_record, noharm_record, phase, seen


def test_the_signed_rank_null_is_the_tabled_distribution() -> None:
    p = signed_rank_null(16)
    assert p.sum() == pytest.approx(1.0) and len(p) == 16 * 17 // 2 + 1
    cdf = np.cumsum(p)
    # the tables' two-sided 5% critical value at n=16 is 29: P(W+ <= 29) < 0.025 < P(W+ <= 30)
    assert cdf[29] < 0.025 < cdf[30]
    assert p[0] == pytest.approx(2.0 ** -16)


def test_the_hodges_lehmann_interval_resists_a_wild_block_where_the_t_widens() -> None:
    assert hodges_lehmann(np.arange(1.0, 11.0), 0.05) == (5.5, 3.0, 8.0)   # by hand: ranks 9
    assert hodges_lehmann(np.arange(1.0, 6.0), 0.05)[1:] == (None, None)   # n=5: no 95% interval
    rng = np.random.default_rng(0)
    d = rng.normal(0.01, 0.01, 16)
    wild = d.copy()
    wild[0] = -0.5                                   # one block ran beside another vLLM
    _, lo, hi = hodges_lehmann(wild, 0.05)
    assert lo is not None and hi is not None and lo > -0.01 and hi - lo < 0.03
    sd = wild.std(ddof=1) / 4
    assert 2 * 2.131 * sd > 3 * (hi - lo)            # the t's half-widths, far wider


def engine_phase(tokens: float, steps: int, drafted: list[int], ttft: float = 100.0):  # type: ignore[no-untyped-def]
    p = phase(tokens, 10.0, mean_ttft_ms=ttft)
    return p.model_copy(update={"engine": EngineCounts(
        generated_tokens=tokens, steps=steps, step_ms=10.0, table_version=[1, 1],
        accepted_per_pos=[0] * len(drafted), drafted_per_pos=drafted)})


def record() -> NoharmRecord:
    """Eight blocks: the sidecar 10% slower to first token, 5% more steps for the same tokens,
    and 3% of its drafting request-steps short of K=3."""
    runs: list[BlockRun] = []
    for b in range(8):
        runs.append(block_run(b, "burst-c4", "table", [engine_phase(1000, 200, [600, 600, 600])]))
        runs.append(block_run(b, "burst-c4", "sidecar",
                              [engine_phase(1000 * (1 + 0.01 * (b % 2)), 210, [600, 600, 582],
                                            ttft=110.0 + b % 2)], seen()))
    return noharm_record(runs, ["burst-c4"])


def as_field(names: dict[str, str]) -> FieldRecord:
    """record()'s runs as a field run's: each arm under its policy's name."""
    runs = [r.model_copy(update={"arm": names[r.arm]}) for r in record().runs]
    return field_record(runs, ["burst-c4"], list(names.values()))


def test_the_figures_read_latency_steps_and_short_drafts_per_shape() -> None:
    (f,) = figures(record()).shapes
    assert f.blocks == 8 and f.short_drafts == {"table": 0.0, "sidecar": 0.03}
    assert f.mean_ttft.t.ratio == pytest.approx(math.sqrt(1.1 * 1.11), abs=1e-3)
    assert f.mean_ttft.hodges_lehmann.ratio == pytest.approx(math.sqrt(1.1 * 1.11), abs=1e-3)
    lo, hi = f.mean_ttft.hodges_lehmann.ci
    assert lo is not None and hi is not None and 1.09 < lo < hi < 1.12
    assert f.steps_per_token.t.ratio == pytest.approx(1.05 / math.sqrt(1.01), abs=1e-3)
    assert short_drafts([]) is None


def test_the_field_shell_writes_the_figures_beside_the_summary(tmp_path: Path) -> None:
    rec = as_field({"table": "tuned", "sidecar": "sidecar-from-tuned"})
    (tmp_path / "field.json").write_text(json.dumps(dumped(rec)))
    out, figs = tmp_path / "noharm-summary.json", tmp_path / "noharm-figures.json"
    assert noharm_of_field(["--field", str(tmp_path / "field.json"), "--out", str(out),
                            "--figures", str(figs)]) == 0
    got = json.loads(figs.read_text())
    assert got["shapes"][0]["short_drafts"] == {"table": 0.0, "sidecar": 0.03}
    assert got == figures(from_field(rec), ("sidecar-from-tuned", "tuned")).model_dump(mode="json")


READINGS = {"noharm": ("sidecar-from-tuned", None), "watch": ("watch-from-tuned", None),
            "explore": ("sidecar-from-tuned", "watch-from-tuned"),
            # a sidecar started on a wrong table: against the tuned one, and over its start
            "earned": ("sidecar-from-fixed-k0", "tuned"),
            "over-start": ("sidecar-from-fixed-k0", None)}
FIGURES = sorted((Path(__file__).parents[2] / "benchmarks/results").rglob("*-figures.json"))


@pytest.mark.parametrize("path", FIGURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_figures_file_is_its_field_runs_read(path: Path) -> None:
    committed = json.loads(path.read_text())
    sidecar, against = committed["reading"]
    record = FieldRecord.model_validate_json((path.parent / "field.json").read_text())
    assert figures(from_field(record, sidecar, against), (sidecar, against)).model_dump(
        mode="json") == committed
    name_sidecar, name_against = READINGS[path.name.removesuffix("-figures.json")]
    assert name_sidecar == sidecar
    assert (name_against or SIDECAR_POLICIES[sidecar]) == against


def test_the_pool_reads_other_policies_of_field_runs(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """noharm_pool --sidecar/--against: the three-arm runs' other readings pooled too."""
    from benchmarks.noharm_pool import main as pool_main
    rec = as_field({"table": "tuned", "sidecar": "watch-from-tuned"})
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "field.json").write_text(json.dumps(dumped(rec)))
    out = tmp_path / "pooled.json"
    assert pool_main(["--out", str(out), "--shapes", "burst-c4", "--sidecar", "watch-from-tuned",
                      str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    (shape,) = json.loads(out.read_text())["shapes"]
    assert shape["blocks"] == 16 and shape["ratio"] == pytest.approx(1.005, abs=1e-3)
    assert pool_main(["--out", str(out), "--shapes", "burst-c4", "--sidecar",
                      "sidecar-from-tuned", str(tmp_path / "a")]) == 2
    assert "did not run both sidecar-from-tuned and tuned" in capsys.readouterr().err
