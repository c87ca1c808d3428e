"""vLLM's /metrics text, or the plugin's own /v1/stats reply -> :class:`Snapshot` of the
counters TableTune reads (:func:`parse`, :func:`from_stats`).

Parsing is prometheus_client's own (``text_string_to_metric_families``); this module only
picks samples by name, sums them over label sets (one series per engine) and checks them.
Samples are matched by their sample name (``..._total``), so it works whether or not the
exposition has ``# TYPE`` lines; ``_created`` samples are never read.

Stock vLLM series (required: a body without them is not a spec-decoding vLLM):
    vllm:spec_decode_num_drafts_total, vllm:spec_decode_num_draft_tokens_total,
    vllm:spec_decode_num_accepted_tokens_total,
    vllm:spec_decode_num_accepted_tokens_per_pos_total{position}
    vllm:num_requests_running (gauge, optional)
TableTune plugin series (optional; absent means the plugin is not loaded):
    vllm:spec_decode_num_draft_tokens_per_pos_total{position}
    tabletune_accepted_tokens_per_pos_total{position}   (preferred over vLLM's accepted series:
        counted in the same place as the drafted series above, while vLLM's lags slightly)
    tabletune_explore_steps_total, tabletune_transition_steps_total
    tabletune_engine_steps_total{k}, tabletune_request_steps_total{k},
    tabletune_step_seconds_total{batch_size,k}, tabletune_steps_timed_total{batch_size,k}
        (steady steps only: verified k == drafted k)
    tabletune_finished_proposed_total, tabletune_finished_accepted_total
        (request-steps with a proposal and those that kept their first draft, by whole request
        lives: the requests that finished; the change test's first choice)
    tabletune_spec_hist_total{drafted,accepted}   (request-steps per drafts proposed and kept:
        proposed_per_pos, the drafts the drafter actually made, which the change test reads)
    tabletune_resume_draft_tokens_per_pos_total{position},
    tabletune_resume_accepted_tokens_per_pos_total{position}
        (the per-position pair for request-steps verified right after a K=0 stretch)
    tabletune_table_version, tabletune_stats_age_seconds, tabletune_engine_started_at_seconds
        (gauges: the age of the plugin values served, 0 when fresh; the engine's start time)

The per-position deltas are the accepted_i and drafted_i of the estimator's
â_i = (w·a_i^prior + accepted_i) / (w + drafted_i) (eq. â, sidecar/estimator.py).

Every outcome of :func:`parse` is a Snapshot or a ScrapeError, whatever the text: values must be
finite counts in [0, MAX_VALUE], integer labels plain digits, and the wanted lines are bounded
(MAX_LINE_CHARS, MAX_WANTED_CHARS) so a hostile body cannot stall the caller's event loop.
Whether two snapshots may be subtracted, and their difference, is sidecar/scrape_delta.py's.

With the plugin's admin endpoint at hand the sidecar reads its counters there
(:func:`from_stats`): the same values the plugin's /metrics series carry, fresh (no collector in
the API server between) and read together with the step ring, so vLLM's API server does no work
for the sidecar at all; vLLM's stock-only series are derived from the exact ones.

Pure: takes text or a reply, returns values.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from tuner.core.admin_api import StatsReply
from tuner.core.errors import ScrapeError

__all__ = ["Snapshot", "from_stats", "has_counters", "parse"]

ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
PLUGIN_ACCEPTED_PER_POS = "tabletune_accepted_tokens_per_pos_total"
DRAFTED_PER_POS = "vllm:spec_decode_num_draft_tokens_per_pos_total"
NUM_DRAFTS = "vllm:spec_decode_num_drafts_total"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
ENGINE_STEPS = "tabletune_engine_steps_total"
REQUEST_STEPS = "tabletune_request_steps_total"
STEP_SECONDS = "tabletune_step_seconds_total"
STEPS_TIMED = "tabletune_steps_timed_total"
TABLE_VERSION = "tabletune_table_version"
EXPLORE_STEPS = "tabletune_explore_steps_total"
TRANSITION_STEPS = "tabletune_transition_steps_total"
STATS_AGE = "tabletune_stats_age_seconds"
ENGINE_STARTED_AT = "tabletune_engine_started_at_seconds"
RESUME_DRAFTED = "tabletune_resume_draft_tokens_per_pos_total"
RESUME_ACCEPTED = "tabletune_resume_accepted_tokens_per_pos_total"
SPEC_HIST = "tabletune_spec_hist_total"
FINISHED_PROPOSED = "tabletune_finished_proposed_total"
FINISHED_ACCEPTED = "tabletune_finished_accepted_total"
WANTED = frozenset({ACCEPTED_PER_POS, PLUGIN_ACCEPTED_PER_POS, DRAFTED_PER_POS, NUM_DRAFTS,
                    NUM_DRAFT_TOKENS, NUM_ACCEPTED_TOKENS, NUM_REQUESTS_RUNNING, ENGINE_STEPS,
                    REQUEST_STEPS, STEP_SECONDS, STEPS_TIMED, TABLE_VERSION, EXPLORE_STEPS,
                    TRANSITION_STEPS, STATS_AGE, ENGINE_STARTED_AT, RESUME_DRAFTED,
                    RESUME_ACCEPTED, SPEC_HIST, FINISHED_PROPOSED, FINISHED_ACCEPTED})

# A line of a wanted sample. vLLM's body is ~50 KB, mostly histograms; prometheus_client's parser
# took 7.0 ms for all of it, 0.43 ms for these lines alone (benchmarks/overhead.py, scrape_parse).
_WANTED_LINE = re.compile(r"^[ \t]*(?:" + "|".join(map(re.escape, sorted(WANTED))) + r")[{ \t].*$", re.M)
# Bounds on what is handed to prometheus_client's parser (pure Python, ~0.5 µs a byte; 10 MB of
# wanted lines took 5-6 s). A real wanted line is < 300 chars; a GPU engine with max_num_seqs=1024
# has ~2,600 of them (step-time cells), ~280 KB.
MAX_LINE_CHARS = 4096
MAX_WANTED_CHARS = 1 << 20
HEAD_CHARS = 1 << 16  # a body without wanted lines: only its head is parsed, to name garbage
# Counts beyond 2**53 are no longer exact in a float: no real counter gets there.
MAX_VALUE = float(2**53)
_INT_LABEL = re.compile(r"[0-9]{1,9}")

# (labels, value) for every wanted sample, grouped by name
Samples = dict[str, list[tuple[dict[str, str], float]]]


@dataclass(slots=True, frozen=True)
class Snapshot:
    """The counters of one scrape, summed over engines; positions are 0-based.

    ``accepted_per_pos`` is the plugin's exact series when present, else vLLM's own
    (``accepted_source`` says which); ``stock_accepted_per_pos`` is always vLLM's.
    Gauges over several engines: ``table_version`` and ``engine_started_at`` take the max
    (the newest), ``stats_age_s`` the max (the stalest).
    """

    accepted_per_pos: tuple[float, ...]
    drafted_per_pos: tuple[float, ...] | None
    num_drafts: float
    num_draft_tokens: float
    num_accepted_tokens: float
    num_requests_running: float | None = None
    engine_steps: dict[int, float] = field(default_factory=dict)
    request_steps: dict[int, float] = field(default_factory=dict)
    step_time: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    table_version: int | None = None
    explore_steps: float | None = None
    accepted_source: Literal["plugin", "stock"] = "stock"
    stock_accepted_per_pos: tuple[float, ...] = ()
    transition_steps: float | None = None
    stats_age_s: float | None = None
    engine_started_at: float | None = None
    # the plugin's per-position pair right after a K=0 stretch (None: a plugin without them)
    resume_drafted_per_pos: tuple[float, ...] | None = None
    resume_accepted_per_pos: tuple[float, ...] | None = None
    # per position i: request-steps whose drafter proposed more than i tokens (the plugin's
    # histogram; drafted_per_pos counts what K offered, proposal or not); None without it
    proposed_per_pos: tuple[float, ...] | None = None
    # (request-steps with a proposal, of which the first draft was kept) of finished requests
    finished: tuple[float, float] | None = None

    @property
    def has_plugin(self) -> bool:
        """True when the TableTune plugin's per-position drafted counter is exposed."""
        return self.drafted_per_pos is not None


# -- parsing -------------------------------------------------------------------------------

def _wanted_text(text: str) -> str:
    """The wanted lines, bounded; a body with none of them gives its head (to name garbage)."""
    lines, total = [], 0
    for m in _WANTED_LINE.finditer(text):
        size = m.end() - m.start()
        if size > MAX_LINE_CHARS:
            raise ScrapeError(f"{m.group(0)[:80]}...: a line of {size} chars (> {MAX_LINE_CHARS}); "
                              "is engine_url a vLLM /metrics?")
        total += size + 1
        if total > MAX_WANTED_CHARS:
            raise ScrapeError(f"more than {MAX_WANTED_CHARS} chars of TableTune's series; is "
                              "engine_url a vLLM /metrics?")
        lines.append(m.group(0))
    if lines:
        return "\n".join(lines) + "\n"
    head = text[:HEAD_CHARS]
    return head if len(text) <= HEAD_CHARS else head[: head.rfind("\n") + 1]


def _value(name: str, labels: Mapping[str, str], raw: float | int) -> float:
    """A sample's value as a float count: finite, >= 0 and <= MAX_VALUE, else ScrapeError."""
    # prometheus_client gives an int for integer text (any number of digits): compare first
    if not (isinstance(raw, int | float) and 0 <= raw <= MAX_VALUE):  # NaN fails this too
        shown = str(raw) if not isinstance(raw, int) or raw < 10**20 else f"{str(raw)[:20]}..."
        raise ScrapeError(f"{name}{dict(labels)}: value {shown} is not a finite count in "
                          f"[0, 2**53]")
    return float(raw)


def _collect(text: str, model_name: str | None) -> tuple[Samples, set[str]]:
    """Wanted samples, and the other model_name values seen; ScrapeError on unreadable text."""
    samples: Samples = defaultdict(list)
    others: set[str] = set()
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    try:
        for family in text_string_to_metric_families(_wanted_text(text)):
            for sample in family.samples:
                if sample.name not in WANTED:
                    continue
                # series without a model_name label (e.g. the plugin's) always pass
                label = sample.labels.get("model_name", model_name)
                if model_name is not None and label != model_name:
                    others.add(str(label))
                    continue
                key = (sample.name, frozenset(sample.labels.items()))
                if key in seen:
                    raise ScrapeError(f"{sample.name}{sample.labels}: duplicate series")
                seen.add(key)
                value = _value(sample.name, sample.labels, sample.value)
                samples[sample.name].append((sample.labels, value))
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
        raise ScrapeError(f"not Prometheus text: {str(exc)[:200]}") from exc
    return samples, others


def _int_label(name: str, labels: Mapping[str, str], label: str) -> int:
    """An integer label value, e.g. position="2"; ScrapeError if missing or not plain digits."""
    raw = labels.get(label, "")
    if not _INT_LABEL.fullmatch(raw):
        raise ScrapeError(f"{name}{dict(labels)}: label {label}={raw[:40]!r} is not an integer "
                          "(0-9, at most 9 digits)")
    return int(raw)


def _by_label(name: str, series: Iterable[tuple[dict[str, str], float]],
              labels: tuple[str, ...]) -> dict[tuple[int, ...], float]:
    """Sum a series over everything but ``labels`` (i.e. over engines)."""
    totals: dict[tuple[int, ...], float] = defaultdict(float)
    for label_values, value in series:
        totals[tuple(_int_label(name, label_values, label) for label in labels)] += value
    return dict(totals)


def _per_position(name: str, samples: Samples) -> tuple[float, ...] | None:
    """Positions 0..n-1 summed over engines; None if absent, ScrapeError on gaps."""
    if name not in samples:
        return None
    totals = _by_label(name, samples[name], ("position",))
    positions = sorted(position for (position,) in totals)
    if positions != list(range(len(positions))):
        shown = positions if len(positions) <= 10 else [*positions[:10], "..."]
        raise ScrapeError(f"{name}: positions {shown} are not 0..{len(positions) - 1}; "
                          "a position is missing")
    return tuple(totals[(position,)] for position in positions)


def _total(name: str, samples: Samples) -> float | None:
    """A counter summed over engines; None if absent."""
    if name not in samples:
        return None
    return sum(value for _, value in samples[name])


def _newest(name: str, samples: Samples) -> float | None:
    """A gauge over engines: the largest value; None if absent."""
    return max((value for _, value in samples[name]), default=None) if name in samples else None


def _required(name: str, samples: Samples, model_name: str | None, others: set[str]) -> float:
    """A stock vLLM counter summed over engines; ScrapeError if absent."""
    total = _total(name, samples)
    if total is None:
        raise ScrapeError(_missing(name, model_name, others))
    return total


def _missing(name: str, model_name: str | None, others: set[str]) -> str:
    """The message for a required series that is not in the body."""
    if model_name is None:
        return f"{name}: missing; is this vLLM with speculative decoding on?"
    served = ", ".join(repr(o) for o in sorted(others)[:5])
    hint = (f"; the engine serves model_name={served}: pass that as --model-name" if others
            else "; is this vLLM with speculative decoding on and that model served?")
    return f"{name}: missing for model_name={model_name!r}{hint}"


def _step_time(samples: Samples) -> dict[tuple[int, int], tuple[float, float]]:
    """(B, k) -> (seconds, timed steps) from the plugin's two step-time counters."""
    seconds = _by_label(STEP_SECONDS, samples.get(STEP_SECONDS, []), ("batch_size", "k"))
    counts = _by_label(STEPS_TIMED, samples.get(STEPS_TIMED, []), ("batch_size", "k"))
    return {(key[0], key[1]): (seconds.get(key, 0.0), counts.get(key, 0.0))
            for key in sorted(seconds.keys() | counts.keys())}


def _per_k(name: str, samples: Samples) -> dict[int, float]:
    return {k: v for (k,), v in _by_label(name, samples.get(name, []), ("k",)).items()}


def _proposed(samples: Samples, positions: int) -> tuple[float, ...] | None:
    """Per position i: request-steps that drafted more than i tokens, from the plugin's
    (drafted, accepted) histogram; None before its first row or without it."""
    if SPEC_HIST not in samples:
        return None
    hist = _by_label(SPEC_HIST, samples.get(SPEC_HIST, []), ("drafted", "accepted"))
    return _proposed_of(((d, n) for (d, _), n in hist.items()), positions)


def _proposed_of(drafted: Iterable[tuple[int, float]], positions: int) -> tuple[float, ...]:
    """Per position i, the request-steps of (drafted, request-steps) rows that drafted > i."""
    out = [0.0] * positions
    for d, n in drafted:
        for i in range(min(d, positions)):
            out[i] += n
    return tuple(out)


def _finished(samples: Samples) -> tuple[float, float] | None:
    proposed, accepted = _total(FINISHED_PROPOSED, samples), _total(FINISHED_ACCEPTED, samples)
    if proposed is None or accepted is None:
        return None
    return proposed, accepted


def _version(samples: Samples) -> int | None:
    version = _newest(TABLE_VERSION, samples)
    if version is not None and not version.is_integer():
        raise ScrapeError(f"{TABLE_VERSION}: value {version} is not an integer")
    return None if version is None else int(version)


def parse(text: str, model_name: str | None = None) -> Snapshot:
    """Read one /metrics body; sum over engines, optionally only for ``model_name``."""
    samples, others = _collect(text, model_name)
    stock = _per_position(ACCEPTED_PER_POS, samples)
    if stock is None:
        raise ScrapeError(_missing(ACCEPTED_PER_POS, model_name, others))
    for name in (DRAFTED_PER_POS, PLUGIN_ACCEPTED_PER_POS, RESUME_DRAFTED, RESUME_ACCEPTED):
        series = _per_position(name, samples)
        if series is not None and len(series) != len(stock):
            raise ScrapeError(f"{name}: {len(series)} positions but "
                              f"{ACCEPTED_PER_POS} has {len(stock)}; they must match")
    exact = _per_position(PLUGIN_ACCEPTED_PER_POS, samples)
    return Snapshot(
        accepted_per_pos=stock if exact is None else exact,
        drafted_per_pos=_per_position(DRAFTED_PER_POS, samples),
        num_drafts=_required(NUM_DRAFTS, samples, model_name, others),
        num_draft_tokens=_required(NUM_DRAFT_TOKENS, samples, model_name, others),
        num_accepted_tokens=_required(NUM_ACCEPTED_TOKENS, samples, model_name, others),
        num_requests_running=_total(NUM_REQUESTS_RUNNING, samples),
        engine_steps=_per_k(ENGINE_STEPS, samples),
        request_steps=_per_k(REQUEST_STEPS, samples),
        step_time=_step_time(samples),
        table_version=_version(samples),
        explore_steps=_total(EXPLORE_STEPS, samples),
        accepted_source="stock" if exact is None else "plugin",
        stock_accepted_per_pos=stock,
        transition_steps=_total(TRANSITION_STEPS, samples),
        stats_age_s=_newest(STATS_AGE, samples),
        engine_started_at=_newest(ENGINE_STARTED_AT, samples),
        resume_drafted_per_pos=_per_position(RESUME_DRAFTED, samples),
        resume_accepted_per_pos=_per_position(RESUME_ACCEPTED, samples),
        proposed_per_pos=_proposed(samples, len(stock)),
        finished=_finished(samples),
    )


def has_counters(stats: StatsReply) -> bool:
    """Whether a /v1/stats reply carries the plugin's counters (a plugin older than the sidecar
    may answer with the ring only: its counters are then read on /metrics)."""
    K = stats.num_speculative_tokens
    return K > 0 and len(stats.drafted_per_pos) == K and len(stats.accepted_per_pos) == K


def from_stats(stats: StatsReply) -> Snapshot:
    """The plugin's counters from one /v1/stats reply (one engine): what :func:`parse` reads of
    its /metrics series, with vLLM's stock totals taken from the exact per-position counts."""
    K = stats.num_speculative_tokens
    for name, series, required in (("drafted_per_pos", stats.drafted_per_pos, True),
                                   ("accepted_per_pos", stats.accepted_per_pos, True),
                                   ("resume_drafted_per_pos", stats.resume_drafted_per_pos, False),
                                   ("resume_accepted_per_pos", stats.resume_accepted_per_pos, False)):
        if len(series) != K and (required or series):
            raise ScrapeError(f"/v1/stats {name}: {len(series)} positions for "
                              f"num_speculative_tokens={K}; they must match")
    accepted = tuple(float(v) for v in stats.accepted_per_pos)
    drafted = tuple(float(v) for v in stats.drafted_per_pos)
    proposed = (_proposed_of(((d, n) for d, _, n in stats.histogram), K)
                if stats.histogram else None)
    finished = (None if stats.finished_proposed is None or stats.finished_accepted is None
                else (float(stats.finished_proposed), float(stats.finished_accepted)))
    return Snapshot(
        accepted_per_pos=accepted, drafted_per_pos=drafted,
        # request-steps offered a draft: what vLLM's num_drafts counts, here exactly
        num_drafts=float(sum(n for k, n in stats.request_steps_per_k.items() if k > 0)),
        num_draft_tokens=sum(drafted), num_accepted_tokens=sum(accepted),
        engine_steps={k: float(n) for k, n in stats.engine_steps_per_k.items()},
        request_steps={k: float(n) for k, n in stats.request_steps_per_k.items()},
        step_time={(b, k): (sec, float(n)) for b, k, sec, n in stats.step_times},
        table_version=stats.table_version, explore_steps=float(stats.explore_steps),
        accepted_source="plugin", stock_accepted_per_pos=accepted,
        transition_steps=float(stats.transition_steps), stats_age_s=0.0,
        engine_started_at=stats.started_at,
        resume_drafted_per_pos=(tuple(float(v) for v in stats.resume_drafted_per_pos)
                                if stats.resume_drafted_per_pos else None),
        resume_accepted_per_pos=(tuple(float(v) for v in stats.resume_accepted_per_pos)
                                 if stats.resume_accepted_per_pos else None),
        proposed_per_pos=proposed, finished=finished)
