from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from tuner.core.errors import ScrapeError
from tuner.core.admin_api import StatsReply
from tuner.core.scrape import WANTED, from_stats, parse

# vLLM 0.32's real exposition for the spec-decode series of a 3-token ngram drafter
REAL = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 7.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.7959411759112113e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 19.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 0.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} 0.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_created Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_created gauge
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="tiny",position="0"} 1.79e+09
"""

STOCK = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
         "vllm:spec_decode_num_accepted_tokens")


def exposition(engines: dict[tuple[str, str], dict[str, list[float]]],
               plugin: dict[str, dict[tuple[str, ...], float]] | None = None) -> str:
    """generate_latest() of vLLM-named counters; engines[(model, engine)] holds the counts."""
    registry = CollectorRegistry()
    stock = {name: Counter(name, "h", ["model_name", "engine"], registry=registry)
             for name in STOCK}
    accepted = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "h",
                       ["model_name", "engine", "position"], registry=registry)
    drafted = Counter("vllm:spec_decode_num_draft_tokens_per_pos", "h",
                      ["model_name", "engine", "position"], registry=registry)
    running = Gauge("vllm:num_requests_running", "h", ["model_name", "engine"],
                    registry=registry)
    for (model, engine), counts in engines.items():
        for name in STOCK:
            stock[name].labels(model, engine).inc(counts[name][0])
        running.labels(model, engine).set(counts["running"][0])
        for position, value in enumerate(counts["accepted"]):
            accepted.labels(model, engine, str(position)).inc(value)
        for position, value in enumerate(counts.get("drafted", [])):
            drafted.labels(model, engine, str(position)).inc(value)
    for name, series in (plugin or {}).items():
        labelnames = {"tabletune_engine_steps": ["k"], "tabletune_request_steps": ["k"],
                      "tabletune_step_seconds": ["batch_size", "k"],
                      "tabletune_steps_timed": ["batch_size", "k"]}[name]
        counter = Counter(name, "h", labelnames, registry=registry)
        for labels, value in series.items():
            counter.labels(*labels).inc(value)
    if plugin is not None:
        Gauge("tabletune_table_version", "h", registry=registry).set(4)
    return generate_latest(registry).decode()


def engine_counts(K: int, scale: float = 1.0, with_drafted: bool = True) -> dict[str, list[float]]:
    counts = {name: [scale * (i + 10)] for i, name in enumerate(STOCK)}
    counts["running"] = [3.0]
    counts["accepted"] = [scale * (K - i) for i in range(K)]
    if with_drafted:
        counts["drafted"] = [scale * 2 * (K - i) for i in range(K)]
    return counts


# --- parsing ----------------------------------------------------------------------------

def test_real_vllm_exposition() -> None:
    snap = parse(REAL)
    assert snap.accepted_per_pos == (0.0, 0.0, 0.0)
    assert (snap.num_drafts, snap.num_draft_tokens, snap.num_accepted_tokens) == (7, 19, 0)
    assert snap.drafted_per_pos is None and not snap.has_plugin
    assert snap.num_requests_running is None and snap.table_version is None
    assert snap.engine_steps == {} and snap.step_time == {}


def test_untyped_exposition_reads_the_same() -> None:
    untyped = "\n".join(line for line in REAL.splitlines() if not line.startswith("#"))
    assert parse(untyped + "\n") == parse(REAL)


def test_sums_engines_and_filters_models() -> None:
    text = exposition({("tiny", "0"): engine_counts(3), ("tiny", "1"): engine_counts(3, 2.0),
                       ("other", "0"): engine_counts(3, 10.0)})
    tiny = parse(text, model_name="tiny")
    assert tiny.accepted_per_pos == (9.0, 6.0, 3.0)
    assert tiny.drafted_per_pos == (18.0, 12.0, 6.0) and tiny.has_plugin
    assert tiny.num_drafts == 30.0 and tiny.num_requests_running == 6.0
    assert parse(text).num_drafts == 130.0
    with pytest.raises(ScrapeError, match="missing for model_name='nope'"):
        parse(text, model_name="nope")


def test_plugin_series() -> None:
    text = exposition({("tiny", "0"): engine_counts(2)}, plugin={
        "tabletune_engine_steps": {("0",): 5, ("2",): 7},
        "tabletune_request_steps": {("2",): 40},
        "tabletune_step_seconds": {("8", "2"): 0.25, ("16", "0"): 0.5},
        "tabletune_steps_timed": {("8", "2"): 10},
    })
    snap = parse(text)
    assert snap.engine_steps == {0: 5.0, 2: 7.0} and snap.request_steps == {2: 40.0}
    assert snap.step_time == {(8, 2): (0.25, 10.0), (16, 0): (0.5, 0.0)}
    assert snap.table_version == 4


@pytest.mark.parametrize(("text", "match"), [
    ("garbage here\n", "not Prometheus text"),
    ("<html><body>502 Bad Gateway</body></html>\n", "not Prometheus text"),
    ("", "vllm:spec_decode_num_accepted_tokens_per_pos_total: missing"),
    (REAL.replace("} 7.0", "} -7.0"), r"value -7.0 is not a finite count in \[0, 2\*\*53\]"),
    (REAL.replace("} 19.0", "} NaN"), "value nan is not a finite count"),
    (REAL.replace('position="1"', 'position="5"'), r"positions \[0, 2, 5\] are not 0..2"),
    (REAL.replace('position="1"', 'position="x"'), "label position='x' is not an integer"),
    (REAL.replace('position="1"', 'position="0"'), "duplicate series"),
    (REAL.replace("vllm:spec_decode_num_drafts_total", "x"),
     "spec_decode_num_drafts_total: missing"),
    (REAL + 'vllm:spec_decode_num_draft_tokens_per_pos_total{position="0"} 1\n',
     "1 positions but vllm:spec_decode_num_accepted_tokens_per_pos_total has 3"),
])
def test_bad_bodies_raise_scrape_error(text: str, match: str) -> None:
    with pytest.raises(ScrapeError, match=match):
        parse(text)


@given(st.text(max_size=200))
def test_any_text_either_parses_or_raises_scrape_error(text: str) -> None:
    try:
        parse(text)
    except ScrapeError:
        pass
    try:
        parse(REAL + text)
    except ScrapeError:
        pass


count = st.integers(0, 10**9).map(float)


@given(st.integers(1, 6).flatmap(lambda K: st.dictionaries(
    st.tuples(st.sampled_from(["tiny", "other"]), st.sampled_from(["0", "1", "2"])),
    st.fixed_dictionaries({
        **{name: st.lists(count, min_size=1, max_size=1) for name in STOCK},
        "running": st.lists(count, min_size=1, max_size=1),
        "accepted": st.lists(count, min_size=K, max_size=K),
        "drafted": st.lists(count, min_size=K, max_size=K)}),
    min_size=1)))
def test_generate_latest_round_trip(engines: dict[tuple[str, str], dict[str, list[float]]]) -> None:
    text = exposition(engines)
    for model in ("tiny", "other", None):
        chosen = [c for (m, _), c in engines.items() if model in (None, m)]
        if not chosen:
            continue
        snap = parse(text, model_name=model)
        K = len(chosen[0]["accepted"])
        assert snap.accepted_per_pos == tuple(sum(c["accepted"][i] for c in chosen)
                                              for i in range(K))
        assert snap.drafted_per_pos == tuple(sum(c["drafted"][i] for c in chosen)
                                             for i in range(K))
        assert snap.num_drafts == sum(c[STOCK[0]][0] for c in chosen)
        assert snap.num_draft_tokens == sum(c[STOCK[1]][0] for c in chosen)
        assert snap.num_accepted_tokens == sum(c[STOCK[2]][0] for c in chosen)
        assert snap.num_requests_running == sum(c["running"][0] for c in chosen)


# --- the plugin's exact accepted series ---------------------------------------------------

def with_plugin_accepted(text: str, values: list[float], explore: float | None = None) -> str:
    lines = [f'tabletune_accepted_tokens_per_pos_total{{engine="0",model_name="tiny",'
             f'position="{i}"}} {v}' for i, v in enumerate(values)]
    if explore is not None:
        lines.append(f'tabletune_explore_steps_total{{engine="0",model_name="tiny"}} {explore}')
    return text + "\n".join(lines) + "\n"


def test_plugin_accepted_series_is_preferred_over_vllms() -> None:
    base = exposition({("tiny", "0"): engine_counts(3)})  # stock accepted: 3, 2, 1
    assert parse(base).accepted_source == "stock"
    snap = parse(with_plugin_accepted(base, [4.0, 3.0, 2.0], explore=5.0))
    assert snap.accepted_per_pos == (4.0, 3.0, 2.0) and snap.accepted_source == "plugin"
    assert snap.explore_steps == 5.0 and snap.num_accepted_tokens == 12.0  # stock total kept
    assert parse(base).explore_steps is None


def test_plugin_accepted_series_must_have_every_position() -> None:
    base = exposition({("tiny", "0"): engine_counts(3)})
    with pytest.raises(ScrapeError, match="tabletune_accepted_tokens_per_pos_total: 2 positions"):
        parse(with_plugin_accepted(base, [4.0, 3.0]))


def test_a_real_vllm_body_reads_the_same_as_parsing_all_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the wanted lines are parsed (fast); the result equals parsing the whole ~50 KB body."""
    import re

    from tuner.core import scrape

    text = (Path(__file__).parents[2] / "data" / "vllm-0.32-cpu-metrics.txt").read_text()
    # give every wanted sample a distinct value, so the comparison is not between zeros
    counter = iter(range(1, 10_000))
    text = re.sub(r"^((?:vllm:spec_decode|tabletune_)\S*(?:\{[^}]*\})?) \S+$",
                  lambda m: f"{m.group(1)} {next(counter)}.0", text, flags=re.M)
    fast = parse(text)
    monkeypatch.setattr(scrape, "_WANTED_LINE", re.compile(r"(?!x)x"))  # matches nothing
    assert parse(text) == fast
    assert fast.accepted_source == "plugin" and fast.num_drafts > 0 and fast.table_version is not None


# --- the plugin's gauges --------------------------------------------------------------------

def test_stats_age_and_engine_start_are_read_as_gauges() -> None:
    text = REAL + "\n".join([
        'tabletune_stats_age_seconds{engine="0",model_name="tiny"} 0.0',
        'tabletune_stats_age_seconds{engine="1",model_name="tiny"} 4.5',
        'tabletune_engine_started_at_seconds{engine="0",model_name="tiny"} 1795952538.25',
        'tabletune_transition_steps_total{engine="0",model_name="tiny"} 12.0',
        'tabletune_table_version{engine="0",model_name="tiny"} 3',
        'tabletune_table_version{engine="1",model_name="tiny"} 7']) + "\n"
    snap = parse(text)
    assert snap.stats_age_s == 4.5 and snap.engine_started_at == 1795952538.25
    assert snap.transition_steps == 12.0 and snap.table_version == 7  # the newest, not a sum


# --- numbers that crashed the parser (issue #15.4) ------------------------------------------

@pytest.mark.parametrize(("text", "match"), [
    # two versions that used to sum to infinity (int(inf): OverflowError)
    (REAL + "tabletune_table_version{engine=\"0\"} 1.7e308\ntabletune_table_version{engine=\"1\"} 1.7e308\n",
     "tabletune_table_version.*is not a finite count"),
    (REAL.replace("} 7.0", "} " + "9" * 400), r"value 9{20}\.\.\. is not a finite count"),
    (REAL.replace("} 7.0", "} " + "9" * 5000), "a line of 5064 chars"),
    (REAL.replace("} 7.0", "} 1e309"), "value inf is not a finite count"),
    (REAL.replace("} 7.0", "} 9007199254740993"), "is not a finite count in"),
    (REAL + "tabletune_table_version 2.5\n", "value 2.5 is not an integer"),
    (REAL.replace('position="1"', 'position="1_0"'), "label position='1_0' is not an integer"),
    (REAL.replace('position="1"', 'position="\u0661"'), "is not an integer"),
    (REAL.replace('position="1"', 'position="-1"'), "is not an integer"),
    (REAL + "vllm:num_requests_running{a=\"" + "x" * 5000 + "\"} 1\n", "a line of 5.* chars"),
])
def test_hostile_numbers_are_scrape_errors(text: str, match: str) -> None:
    with pytest.raises(ScrapeError, match=match):
        parse(text)


def test_a_body_with_too_many_wanted_lines_is_refused_not_parsed() -> None:
    from tuner.core.scrape import MAX_WANTED_CHARS

    line = 'tabletune_steps_timed_total{batch_size="%d",k="1"} 1\n'
    body = REAL + "".join(line % i for i in range(MAX_WANTED_CHARS // 40))
    with pytest.raises(ScrapeError, match="more than 1048576 chars"):
        parse(body)


def test_a_wrong_model_name_says_which_the_engine_serves() -> None:
    with pytest.raises(ScrapeError, match="missing for model_name='tiny-llama-s0'; the engine "
                                          "serves model_name='tiny': pass that as --model-name"):
        parse(REAL, model_name="tiny-llama-s0")


# --- fuzz: mutations of the real body are a Snapshot or a ScrapeError, nothing else ----------

BODY = (Path(__file__).parents[2] / "data" / "vllm-0.32-cpu-metrics.txt").read_text()
LINES = BODY.splitlines(keepends=True)
WANTED_AT = [i for i, line in enumerate(LINES) if not line.startswith("#") and
             line.split("{")[0].split(" ")[0] in WANTED]
NUMBERS = ["NaN", "+Inf", "-Inf", "-1", "-0.0", "0", "1e308", "1e309", "9" * 400, "9" * 5000,
           "1_0", "0x1f", "", "1 2", "5e-324", str(2**53), str(2**53 + 1), "1.0e+09", "٣"]
LABELS = ['position="-1"', 'position=" 1"', 'position="१"', 'position="99999999999"', 'k=""',
          'batch_size="1_0"', 'model_name="tiny\\"x"', 'position="0",position="1"',
          'é="x"', "", ",", 'a="\\n"', 'model_name="other"', 'position="7"', 'k="x"',
          'engine="1"', 'a="' + "b" * 5000 + '"']


def _mutate(lines: list[str], op: tuple[Any, ...]) -> list[str]:
    kind, at, arg = op
    wanted = [i for i in WANTED_AT if i < len(lines)] or [0]
    i = wanted[at % len(wanted)]
    line = lines[i] if lines else ""
    name, _, rest = line.partition("{") if "{" in line else line.partition(" ")
    if kind == "value":
        lines[i] = line.rsplit(" ", 1)[0] + " " + arg + "\n"
    elif kind == "label":
        lines[i] = f"{name}{{{arg},{rest}" if "{" in line else f"{name}{{{arg}}} {rest}"
    elif kind == "dup":
        lines.insert(i, line)
    elif kind == "drop":
        del lines[i:i + 1]
    elif kind == "insert":
        lines.insert(at % (len(lines) + 1), arg)
    elif kind == "position":
        lines.insert(i, re.sub(r'position="\d+"', f'position="{arg}"', line))
    return lines


def _bytes(body: str, op: tuple[Any, ...]) -> str:
    kind, at, arg = op
    raw = bytearray(body.encode())
    if kind == "truncate":
        raw = raw[: at % (len(raw) + 1)]
    elif kind == "flip" and raw:
        raw[at % len(raw)] ^= arg
    return raw.decode(errors="replace")  # what EngineClient does with the bytes it reads


line_op = st.one_of(
    st.tuples(st.just("value"), st.integers(0, 10**6), st.sampled_from(NUMBERS)
              | st.floats().map(repr) | st.integers().map(str)),
    st.tuples(st.just("label"), st.integers(0, 10**6), st.sampled_from(LABELS)
              | st.text(max_size=20)),
    st.tuples(st.sampled_from(["dup", "drop"]), st.integers(0, 10**6), st.none()),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.text(max_size=60).map(lambda t: t + "\n")),
    st.tuples(st.just("position"), st.integers(0, 10**6),
              st.integers(0, 12).map(str) | st.sampled_from(["-1", "1e3", "", "00"])),
)
byte_op = st.tuples(st.sampled_from(["truncate", "flip"]), st.integers(0, 10**6),
                    st.integers(1, 255))


@settings(max_examples=400)
@given(st.lists(line_op, max_size=6), st.lists(byte_op, max_size=2),
       st.sampled_from([None, "tiny", "other"]))
def test_mutated_real_bodies_are_a_snapshot_or_a_scrape_error(
        line_ops: list[tuple[Any, ...]], byte_ops: list[tuple[Any, ...]],
        model_name: str | None) -> None:
    lines = list(LINES)
    for op in line_ops:
        lines = _mutate(lines, op)
    body = "".join(lines)
    for op in byte_ops:
        body = _bytes(body, op)
    try:
        snap = parse(body, model_name)
    except ScrapeError:
        return
    values = [*snap.accepted_per_pos, *(snap.drafted_per_pos or ()), snap.num_drafts,
              *snap.engine_steps.values(), *(v for cell in snap.step_time.values() for v in cell)]
    assert all(0 <= v < float("inf") for v in values)


@pytest.mark.parametrize(("field", "value"), [("drafted_per_pos", [1, 1]),
                                              ("accepted_per_pos", []),
                                              ("resume_accepted_per_pos", [0])])
def test_stats_whose_positions_do_not_match_k_are_unreadable(field: str, value: list[int]) -> None:
    good = StatsReply(num_speculative_tokens=3, drafted_per_pos=[4, 4, 4],
                      accepted_per_pos=[3, 2, 1])
    assert from_stats(good).accepted_per_pos == (3.0, 2.0, 1.0)
    with pytest.raises(ScrapeError, match=f"/v1/stats {field}: {len(value)} positions for "
                                          "num_speculative_tokens=3"):
        from_stats(good.model_copy(update={field: value}))
