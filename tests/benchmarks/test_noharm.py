"""The do-no-harm bench (benchmarks/noharm.py): its traffic shapes as vLLM client flags
(benchmarks/traffic.py), its figures from raw runs (benchmarks/noharm_summary.py), and its
answers to bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks.arm_run import BlockRun
from benchmarks.client_record import FieldRecord, NoharmRecord
from benchmarks.json_out import dumped
from benchmarks.field_client import client_argv, parse
from benchmarks.noharm import config, main, parser
from benchmarks.noharm_of_field import main as noharm_of_field
from benchmarks.noharm_summary import (TARGET, NoharmSummary, arm_throughput, from_field,
                                       ratio_interval, summarize, verdict)
from benchmarks.stateful import _policy_fields
from tests.benchmarks.arm_runs import block_run, noharm_record, phase, seen
from tests.benchmarks.arm_runs import field_record as a_field_record
from tests.helpers import refused
from benchmarks.traffic import (KINDS, ClientRun, Sizes, check_sizes, ramp_runs, read_prompts,
                               shapes)
from tuner.core.admin_api import PolicyReply
from tuner.core.errors import InvalidInput

SIZES = Sizes(concurrency=(8, 192), rates=(2.0, 0.5), ramp=(1, 8), run_s=20.0, waves=4)


# -- shapes ------------------------------------------------------------------------------------
def test_each_named_shape_becomes_its_runs_of_the_client() -> None:
    got = {s.name: s.runs for s in shapes(KINDS, SIZES)}
    assert list(got) == ["burst-c8", "burst-c192", "poisson-r2", "poisson-r0p5", "ramp-1-8", "mixed"]
    burst = got["burst-c192"][0]
    assert (burst.num_prompts, burst.max_concurrency, burst.request_rate) == (768, 192, None)
    poisson = got["poisson-r0p5"][0]
    assert (poisson.num_prompts, poisson.request_rate, poisson.burstiness) == (10, 0.5, 0.5)
    mixed = got["mixed"][0]
    assert (mixed.input_len, mixed.input_range, mixed.request_rate) == (384, 0.9, 2.0)


def test_the_ramp_goes_up_in_one_run_and_down_in_fresh_runs_at_falling_rates() -> None:
    up, *down = ramp_runs(SIZES)
    assert up.ramp == (1, 8) and up.request_rate is None
    # the client's linear ramp: N requests take ~(N - 1)·ln(hi/lo)/(hi - lo) s, half of run_s
    assert (up.num_prompts - 1) * math.log(8) / 7 == pytest.approx(10.0, rel=0.05)
    assert [r.request_rate for r in down] == [8.0, 4.5, 1.0]
    assert [r.num_prompts for r in down] == [27, 15, 3]        # a sixth of run_s each


def test_a_runs_flags_say_its_dataset_lengths_and_arrivals() -> None:
    run = ClientRun(40, 96, 64, 0.5, 0.9, request_rate=2.0, burstiness=0.5)
    flags = run.flags()
    assert flags[flags.index("--random-range-ratio") + 1] == '{"input": 0.5, "output": 0.9}'
    assert "--ignore-eos" in flags and "--max-concurrency" not in flags
    assert flags[flags.index("--burstiness") + 1] == "0.5"
    assert "--burstiness" not in ClientRun(8, 96, 64, 0.5, 0.5, max_concurrency=8).flags()


def test_vllms_own_parser_takes_every_shapes_flags() -> None:
    """The contract with vLLM's client: its parser (0.32 here; 0.26's add_cli_args differs
    only in --probe-request-rate) reads each run as the shape means it."""
    for shape in shapes(KINDS, SIZES):
        for run in shape.runs:
            args = parse(client_argv(run, "127.0.0.1", 8000, Path("/models/m"), "tiny", 7))
            assert (args.num_prompts, args.seed, args.ignore_eos) == (run.num_prompts, 7, True)
            assert args.max_concurrency == run.max_concurrency
            assert args.request_rate == (run.request_rate or math.inf)
            assert args.ramp_up_strategy == ("linear" if run.ramp else None)
            assert (args.served_model_name, args.temperature) == ("tiny", 0.0)


def test_your_own_prompts_run_every_shape_through_the_clients_custom_dataset() -> None:
    own = read_prompts("p.jsonl", '{"prompt": "hi", "output_tokens": 12}\n\n{"prompt": "yo", '
                                  '"output_tokens": 7}\n', chat_template=False)
    assert (own.lines, own.own_lengths) == (2, True)
    sizes = Sizes(concurrency=(4,), rates=(2.0,), prompts=own)
    for shape in shapes(("burst", "poisson", "ramp"), sizes):
        for run in shape.runs:
            args = parse(client_argv(run, "127.0.0.1", 8000, Path("/models/m"), "tiny", 7))
            assert (args.dataset_name, args.dataset_path) == ("custom", "p.jsonl")
            assert args.custom_output_len == -1 and args.skip_chat_template  # the file's lengths
            assert args.num_prompts == run.num_prompts and args.ignore_eos
    some = read_prompts("p.jsonl", '{"prompt": "hi", "output_tokens": 12}\n{"prompt": "yo"}',
                        chat_template=True)
    args = parse(client_argv(shapes(("burst",), Sizes(prompts=some))[0].runs[0], "h", 1,
                             Path("/m"), "tiny", 1))
    assert args.custom_output_len == 64 and not args.skip_chat_template  # --output-len for all
    with pytest.raises(InvalidInput, match="mixed draws long random prompts"):
        shapes(("mixed",), Sizes(prompts=some))


@pytest.mark.parametrize(("path", "text", "says"), [
    ("p.json", '{"prompt": "hi"}', "reads only .jsonl files"),
    ("p.jsonl", '{"prompt": "hi"}\n{prompt: 1}', "line 2 is not JSON"),
    ("p.jsonl", '{"text": "hi"}', 'line 1 has no "prompt" text'),
    ("p.jsonl", '["hi"]', 'line 1 has no "prompt" text'),
    ("p.jsonl", '{"prompt": "hi", "output_tokens": 0}', "output_tokens=0 must be a whole number"),
    ("p.jsonl", '{"prompt": "hi", "output_tokens": "9"}', "output_tokens='9' must be a whole"),
    ("p.jsonl", "\n\n", "no prompts in it"),
])
def test_a_prompts_file_the_client_would_refuse_names_the_line(path: str, text: str,
                                                               says: str) -> None:
    with pytest.raises(InvalidInput, match=f"--prompts={path}: .*{says}"):
        read_prompts(path, text, chat_template=False)


@pytest.mark.parametrize(("sizes", "says"), [
    (Sizes(ramp=(8, 1)), "--ramp=8,1"),
    (Sizes(range_ratio=1.0), "--range-ratio=1.0"),
    (Sizes(burstiness=0.0), "--burstiness=0.0"),
    (Sizes(input_len=600, output_len=100), "above the engine's max_model_len 1024"),
    (Sizes(mixed_input_len=600), "--mixed-input-len/--mixed-range"),
])
def test_sizes_no_client_run_could_serve_name_their_flag(sizes: Sizes, says: str) -> None:
    with pytest.raises(InvalidInput, match=says.replace("(", r"\(").replace("+", r"\+")):
        check_sizes(sizes, max_model_len=1024)


def test_an_unknown_shape_names_the_known_ones() -> None:
    with pytest.raises(InvalidInput, match="'waves' is not a shape; use some of burst,poisson"):
        shapes(["burst", "waves"], SIZES)


# -- figures -----------------------------------------------------------------------------------
def arm(block: int, shape: str, name: str, tps: float, pushes: int = 0, changes: int = 0,
        minutes: float = 0.5) -> BlockRun:
    return block_run(block, shape, name, [phase(round(tps * 10), 10.0)],
                     seen(pushes, changes, minutes) if name == "sidecar" else None)


def record(ratios: dict[str, list[float]], pushes: int = 0) -> NoharmRecord:
    runs = []
    for shape, rs in ratios.items():
        for b, r in enumerate(rs):
            runs += [arm(b, shape, "table", 1000.0), arm(b, shape, "sidecar", 1000.0 * r,
                                                         pushes=pushes if b == 0 else 0)]
    return noharm_record(runs, list(ratios), [arm(-1, "burst-c8", "sidecar", 1.0, pushes=3)])


def test_the_ratio_is_a_geometric_mean_with_a_t_interval_on_the_logs() -> None:
    rs = [1.01, 0.99, 1.02, 1.00, 0.98, 1.03]
    pairs = [(arm(b, "s", "table", 1000.0), arm(b, "s", "sidecar", 1000.0 * r)) for b, r in enumerate(rs)]
    got = ratio_interval(pairs, arm_throughput)
    assert got.ratio == pytest.approx(math.exp(sum(map(math.log, rs)) / 6), abs=1e-4)
    lo, hi = got.ci
    assert lo is not None and hi is not None and lo < got.ratio < hi and got.n == 6
    # t(0.975, 5) = 2.571: the half-width in logs is 2.571 sd/sqrt(6)
    logs = [math.log(r) for r in rs]
    m = sum(logs) / 6
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 5)
    assert math.log(hi) - m == pytest.approx(2.5706 * sd / math.sqrt(6), rel=1e-3)
    assert ratio_interval(pairs[:1], arm_throughput).ci == [None, None]


def test_verdicts_read_the_interval_against_the_target() -> None:
    assert verdict([TARGET, 1.02]) == "meets"
    assert verdict([0.97, 0.994]) == "misses"
    assert verdict([0.99, 1.01]) == "undecided"
    assert verdict([None, None]) == "too_few_blocks"


def test_summary_holds_the_issues_fields_per_shape_and_counts_only_measured_pushes() -> None:
    got = summarize(record({"burst-c8": [1.0, 1.01, 1.0, 1.01], "poisson-r2": [0.9, 0.91, 0.9, 0.92]},
                           pushes=1))
    shapes_ = {s["shape"]: s for s in got["shapes"]}
    for s in got["shapes"]:
        assert {"shape", "blocks", "ratio", "ci", "pushes", "minutes", "false_changes"} <= set(s)
        assert s["blocks"] == 4 and s["pushes"] == 1 and s["minutes"] == 2.0
    assert shapes_["burst-c8"]["verdict"] == "meets" and shapes_["poisson-r2"]["verdict"] == "misses"
    assert got["verdict"] == "misses"
    assert got["measured"]["pushes"] == 2 and got["warmup"]["pushes"] == 3  # warmup kept apart
    assert shapes_["burst-c8"]["engine_ratio"]["ratio"] == shapes_["burst-c8"]["ratio"]


def test_the_overall_misses_only_when_a_shape_is_below_at_the_split_level() -> None:
    """A shape's own verdict stands at 95%; "misses" for the run needs a shape below the target
    with the 5% split over the shapes (any one shape may miss: Bonferroni)."""
    near = [0.985 + 0.0054 * d for d in (-1, 1, -0.5, 0.5)]   # below 0.995 at 95%, not at 97.5%
    got = summarize(record({"burst-c8": [1.0, 1.01, 1.0, 1.01], "poisson-r2": near}))
    shapes_ = {s["shape"]: s for s in got["shapes"]}
    assert shapes_["poisson-r2"]["verdict"] == "misses" and got["verdict"] == "undecided"
    far = [0.95, 0.951, 0.949, 0.95]
    assert summarize(record({"burst-c8": [1.0, 1.01, 1.0, 1.01], "poisson-r2": far}))[
        "verdict"] == "misses"


def test_a_block_missing_an_arm_is_left_out_and_too_many_pushes_miss() -> None:
    rec = record({"burst-c8": [1.0, 1.01, 1.0]}, pushes=2)  # 2 pushes in 1.5 minutes
    rec.runs.append(arm(3, "burst-c8", "table", 1000.0))  # cut short
    got = summarize(rec)
    assert got["shapes"][0]["blocks"] == 3
    assert got["shapes"][0]["pushes_per_10min"] == pytest.approx(13.333, abs=1e-3)
    assert got["verdict"] == "misses"


def test_a_shape_of_several_runs_counts_tokens_over_their_durations() -> None:
    ramp = block_run(0, "ramp", "table", [phase(1000, 10.0), phase(300, 5.0)])
    assert arm_throughput(ramp) == pytest.approx(1300 / 15)


# -- the sidecar's arm and the bench's input -----------------------------------------------------
def test_a_frozen_sidecars_duels_are_part_of_the_policy_put_back() -> None:
    policy = PolicyReply(explore_every=300, hysteresis=2, explore_run=3, duels=[(1, 8, [2])])
    assert _policy_fields(policy)["duels"] == ((1, 8, (2,)),)
    assert _policy_fields(PolicyReply(explore_every=0, hysteresis=0))["duels"] == ()


@pytest.mark.parametrize(("extra", "says"), [
    (["--shapes", "burst,tide"], "--shapes: 'tide' is not a shape"),
    (["--ramp", "8,1"], "--ramp=8,1"),
    (["--ramp", "1,4,8"], "--ramp='1,4,8': give LOW,HIGH"),
    (["--concurrency", "0"], "--concurrency='0': every value must be >= 1"),
    (["--blocks", "0"], "--blocks=0: must be >= 1"),
    (["--start-table", "[[1,8,3]"], "--start-table='[[1,8,3]': not JSON"),
    (["--start-table", "[[1,16,4]]"], "--start-table='[[1,16,4]]':"),   # K is 3 here
    (["--emulate", "0.5,0.9"], "--emulate='0.5,0.9'"),
])
def test_bad_input_is_one_line_naming_the_flag_and_exit_2(
        profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
        says: str) -> None:
    assert says in refused(main, profile, tmp_path, extra, capsys)


def test_resume_refuses_a_folder_of_other_shapes(profile: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "noharm.json").write_text(json.dumps(dumped(noharm_record([], ["burst-c4"]))))
    rc = main(["--profile", str(profile), "--model", str(tmp_path), "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and "--resume:" in err and "['burst-c4']" in err, err
    (out / "noharm.json").write_text("{}")     # not a record at all: one line, no traceback
    rc = main(["--profile", str(profile), "--model", str(tmp_path), "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and "is not this bench's record" in err and "Traceback" not in err, err


def test_the_engine_runs_without_its_prefix_cache_unless_asked(profile: Path, tmp_path: Path) -> None:
    """Both arms send the same prompts: a prefix cache would serve the second arm's prefills."""
    base = ["--profile", str(profile), "--model", str(tmp_path), "--out", str(tmp_path / "o")]
    plain = config(parser().parse_args(base), base)
    assert plain.scenario.engine_args[0] == "--no-enable-prefix-caching"
    asked = base + ["--engine-arg=--enable-prefix-caching"]
    assert config(parser().parse_args(asked), asked).scenario.engine_args == ("--enable-prefix-caching",)


def test_the_sidecars_cpu_share_is_its_cpu_seconds_per_awake_second_over_timed_arms() -> None:
    from benchmarks.noharm_summary import sidecar_counts
    from tests.benchmarks.arm_runs import block_run, phase, seen

    def arm(minutes: float, cpu_s: float | None) -> Any:
        return block_run(0, "burst-c4", "sidecar", [phase(100, 1.0)], seen(minutes=minutes, cpu_s=cpu_s))

    # 1.2 s of CPU over 2 awake minutes; an older record's arm (no CPU figure) is left out
    counts = sidecar_counts([arm(1.0, 0.9), arm(1.0, 0.3), arm(5.0, None)])
    assert counts.cpu_share == 0.01 and counts.minutes == 7.0
    assert sidecar_counts([arm(1.0, None)]).cpu_share is None


NOHARM_RESULTS = sorted((Path(__file__).parents[2] / "benchmarks/results").rglob("noharm.json"))


@pytest.mark.parametrize("path", NOHARM_RESULTS, ids=lambda p: str(p.parent.name))
def test_every_committed_noharm_summary_is_its_runs_summarized(path: Path) -> None:
    assert summarize(NoharmRecord.model_validate_json(path.read_text())) == json.loads(
        (path.parent / "summary.json").read_text())


FIELD_NOHARMS = sorted((Path(__file__).parents[2] / "benchmarks/results").rglob("noharm-summary.json"))


@pytest.mark.parametrize("path", FIELD_NOHARMS, ids=lambda p: str(p.parent.name))
def test_every_committed_field_noharm_summary_is_its_field_runs_summarized(path: Path) -> None:
    record = FieldRecord.model_validate_json((path.parent / "field.json").read_text())
    assert summarize(from_field(record)) == json.loads(path.read_text())
    # a three-arm run's other readings: observing against the table, exploring against observing
    readings = {"watch-summary.json": ("watch-from-tuned", None),
                "explore-summary.json": ("sidecar-from-tuned", "watch-from-tuned")}
    for name, (sidecar, against) in readings.items():
        if (path.parent / name).exists():
            assert summarize(from_field(record, sidecar, against)) == json.loads(
                (path.parent / name).read_text())


READ_FIGURES = sorted((Path(__file__).parents[2] / "benchmarks/results").rglob("*-figures.json"))


@pytest.mark.parametrize("path", READ_FIGURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_reading_of_a_field_run_is_its_runs_summarized(path: Path) -> None:
    """Each reading (its figures file names the sidecar and the policy it is read against)
    has its summary beside it, the field runs summarized that way."""
    sidecar, against = json.loads(path.read_text())["reading"]
    record = FieldRecord.model_validate_json((path.parent / "field.json").read_text())
    summary = path.parent / path.name.replace("-figures.json", "-summary.json")
    assert summarize(from_field(record, sidecar, against)) == json.loads(summary.read_text())


def field_record() -> FieldRecord:
    """A field record of three policies: the sidecar, its start table and a fixed k."""
    rec = record({"burst-c16": [1.0, 1.01, 0.99]})
    names = {"table": "tuned", "sidecar": "sidecar-from-tuned"}
    runs = [r.model_copy(update={"arm": names[r.arm]}) for r in rec.runs]
    runs.append(arm(0, "burst-c16", "fixed-k1", 5000.0))
    return a_field_record(runs, ["burst-c16"], ["fixed-k1", "tuned", "sidecar-from-tuned"])


def test_a_field_record_reads_as_the_sidecar_against_the_table_it_started_from() -> None:
    field = field_record()
    got = from_field(field)
    assert sorted({r.arm for r in got.runs}) == ["sidecar", "table"]
    assert len(got.runs) == 6    # the fixed k's run is no arm of this bench
    assert summarize(got)["shapes"][0]["ratio"] == summarize(record({"burst-c16": [1.0, 1.01, 0.99]}))[
        "shapes"][0]["ratio"]
    with pytest.raises(KeyError):
        from_field(field, "fixed-k1")


def test_against_another_policy_it_is_the_reference_arm() -> None:
    """Exploring beyond observing: the sidecar against a --dry-run sidecar of the same run."""
    field = field_record()
    field.runs += [r.model_copy(update={"arm": "watch-from-tuned"}) for r in field.runs
                   if r.arm == "tuned"]
    got = from_field(field, "sidecar-from-tuned", "watch-from-tuned")
    assert sorted(r.arm for r in got.runs) == ["sidecar"] * 3 + ["table"] * 3
    assert summarize(got)["shapes"][0]["ratio"] == summarize(from_field(field))["shapes"][0]["ratio"]


def test_the_field_shell_writes_the_summary_and_names_a_wrong_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "field.json").write_text(json.dumps(dumped(field_record())))
    out = tmp_path / "noharm-summary.json"
    assert noharm_of_field(["--field", str(tmp_path / "field.json"), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == summarize(from_field(field_record()))
    assert noharm_of_field(["--field", str(tmp_path / "field.json"), "--sidecar",
                            "sidecar-from-quarter", "--out", str(out)]) == 2
    assert "--sidecar:" in capsys.readouterr().err
    assert noharm_of_field(["--field", str(tmp_path / "field.json"), "--against",
                            "watch-from-tuned", "--out", str(out)]) == 2
    assert "--against:" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert noharm_of_field(["--field", str(tmp_path / "bad.json"), "--out", str(out)]) == 2
    assert "not a field bench record" in capsys.readouterr().err
    assert noharm_of_field(["--field", str(tmp_path / "none.json"), "--out", str(out)]) == 2


def test_the_pooled_burst_figure_comes_from_the_committed_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """README's pooled do-no-harm figure is benchmarks.noharm_pool over the runs it names."""
    from benchmarks.noharm_pool import Pooled, main, pool, record_in
    root = Path(__file__).parents[2]
    for path in sorted((root / "benchmarks/results/cpu-tiny-noharm").glob("pooled*.json")):
        committed = Pooled.model_validate_json(path.read_text())   # extra keys refused
        reading = tuple(committed.reading) if committed.reading else None
        records = {name: record_in(root / name, reading) for name in committed.runs}
        again = pool(records, [s.shape for s in committed.shapes], reading)
        assert again == committed
        # as text: a float turned int (or back), or a key renamed, is a change in the file
        assert json.dumps(again.model_dump(mode="json"), sort_keys=True) == json.dumps(
            json.loads(path.read_text()), sort_keys=True)
    assert main(["--out", str(root / "unused.json"), "--shapes", "burst-c4", "/nonexistent"]) == 2
    assert "no noharm.json or field.json in /nonexistent" in capsys.readouterr().err


@pytest.mark.parametrize("path", FIELD_NOHARMS + NOHARM_RESULTS, ids=lambda p: str(p.parent.name))
def test_every_committed_noharm_summary_reads_as_its_model_and_back(path: Path) -> None:
    # a renamed or stray key on either side fails here, not as a silent default in a reader
    file = path if path.name == "noharm-summary.json" else path.parent / "summary.json"
    read = json.loads(file.read_text())
    again = NoharmSummary.model_validate(read).model_dump(mode="json")
    # as text: 1 == 1.0 in Python, but an int turned float (or back) is a change in the file
    assert json.dumps(again, sort_keys=True) == json.dumps(read, sort_keys=True)
