"""The profile: one versioned JSON document with everything needed to rebuild a table later
without the engine: what was measured (raw samples too), on what, and how long it took."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tuner.errors import InvalidInput, ProfileMismatch
from tuner.files import write_atomic
from tuner.goodput import Cliff, TableChoice, build_table, cliff_warnings, cliffs, refine_points
from tuner.table import Table

SCHEMA_VERSION = 1
# a workload sample stands for batch size B only if the engine ran at least this share of B
# requests a step over its window. Not 1: a closed loop loses about a step per request to the
# turnaround (reply, next request, admission), so requests living ~10 steps keep ~0.88 B in the
# CPU engine; the H200's first workload run was far below (B=256: 23-91 requests a step)
BATCH_FILL = 0.8


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _EngineFirst(_Model):
    client_ms: float
    engine_ms: float | None

    @property
    def step_ms(self) -> float:
        """Engine-side where available: no HTTP noise."""
        return self.engine_ms if self.engine_ms is not None else self.client_ms


class StepSample(_EngineFirst):
    """One repeat of one cell: the paper's client difference and the engine's own step times."""

    B: int
    k: int
    rep: int
    client_ms: float          # (t_long - t_short) / (decode_tokens - 1)
    engine_ms: float | None   # engine-side: Δ step seconds / Δ steps between the two runs
    engine_steps: int | None  # engine steps in the long run at this batch size
    full_draft_share: float | None  # share of request-steps whose draft had all k tokens
    # under a workload (mixed cells): requests and tokens a step carried on average (a little
    # under B requests while finished ones are replaced; decode, draft and prefill tokens)
    mean_batch: float | None = None
    tokens_per_step: float | None = None
    started: float | None = None  # unix time the sample began: drift shows against it


def spread(values: list[float]) -> float:
    """(max - min) / median: how far a cell's repeats disagree."""
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid > 0 else 0.0


def needs_another(values_ms: list[float], tol: float, max_repeats: int) -> bool:
    """Another repeat until two of them agree within tol: on a host-bound GPU step (H200, 3B
    model: two repeats 13% apart at the median, 42% at the 90th percentile) a median of two is
    one outlier away from the wrong k. (Not "until all agree": the range of n repeats only
    grows with n, so that would always run to max_repeats.)"""
    if not 2 <= len(values_ms) < max_repeats:
        return False
    v = sorted(values_ms)
    closest = min((b - a) / ((a + b) / 2) for a, b in zip(v, v[1:]) if a + b > 0) if v[-1] > 0 else 0.0
    return closest > tol


def filled(sample: StepSample) -> bool:
    """Whether a sample measured its batch size: pure-decode samples record no batch and do;
    a workload sample does when its engine ran at least BATCH_FILL·B requests a step."""
    return sample.mean_batch is None or sample.mean_batch >= BATCH_FILL * sample.B


def usable(samples: list[StepSample]) -> list[StepSample]:
    """The samples a cell's median is taken over: the filled ones, or all if none is."""
    return [s for s in samples if filled(s)] or samples


def cell_needs_another(samples: list[StepSample], repeats: int, tol: float, max_repeats: int) -> bool:
    """needs_another over the filled samples, which must number `repeats` too: on the CPU engine
    a client now and then lags a whole lifetime (B=2 ran 1.0 requests a step in one sample,
    1.97 in the next), and such a sample is a T for a smaller batch, not noise around T(B)."""
    if len(samples) >= max_repeats:
        return False
    good = [s.step_ms for s in samples if filled(s)]
    return len(good) < repeats or needs_another(good, tol, max_repeats)


class Cell(_EngineFirst):
    B: int
    k: int
    wall_s: float  # time spent measuring this cell


class AcceptanceMeasurement(_Model):
    a: list[float]            # a_i, i = 1..K
    accepted: list[int]       # per position, from counter deltas
    drafted: list[int]
    source: Literal["plugin", "stock"]
    note: str = ""
    num_prompts: int
    temperature: float
    wall_s: float


def model_name(value: str) -> str:
    """A model as the profile stores it: a Hugging Face id as given ("Qwen/Qwen3-8B"), a local
    folder by its own name: a profile travels between machines, their paths do not."""
    if value.startswith(("/", "./", "../", "~")) or Path(value).is_dir():
        return Path(value).name
    return value


class EngineInfo(_Model):
    hardware: str
    vllm_version: str
    model: str  # the model's name (see model_name), never a path of the machine that tuned
    # the name vLLM served it under (its /metrics label model_name); None in older profiles
    served_model_name: str | None = None
    # what the model is, from its config.json: architecture, layers, sizes, experts
    model_shape: dict[str, int | str] = Field(default_factory=dict)
    method: str
    drafter: str | None = None  # the drafter's name, like model
    num_speculative_tokens: int = Field(ge=1)
    max_num_seqs: int = Field(ge=1)
    temperature: float = 0.0

    @field_validator("model", "drafter", mode="before")
    @classmethod
    def _name(cls, v: object) -> object:
        return model_name(v) if isinstance(v, str) else v


class Workload(_Model):
    """The served requests' shape. Timed under it, a step carries the prefill such a load brings:
    at batch size B and draft length k each request lives output_tokens / τ(k) steps, so
    B·τ(k)/output_tokens requests finish and as many prompts are prefilled per step. Without it
    steps are pure decode (the paper's method), which can sit under a CUDA-graph token limit that
    real steps, prefill included, cross."""

    prompt_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=2)

    @classmethod
    def parse(cls, raw: str) -> Workload:
        try:
            prompt, output = (int(x) for x in raw.split(":"))
            return cls(prompt_tokens=prompt, output_tokens=output)
        except ValueError:
            raise InvalidInput(f"--workload={raw!r}: expected PROMPT_TOKENS:OUTPUT_TOKENS, the mean "
                               "prompt and output length of the served requests, e.g. 96:128 "
                               "(prompt >= 1, output >= 2)") from None

    def steps_per_request(self, tau_k: float) -> int:
        """Engine steps a request lives at expected tokens per step τ(k) (max_tokens under
        reject-all, where each step yields one token)."""
        return max(1, round(self.output_tokens / tau_k))


def _shape(w: Workload | None) -> str:
    return f"{w.prompt_tokens}:{w.output_tokens}" if w else "none"


class Preflight(_Model):
    """No-speculation step times vs the table's k=0 (the paper's 'check the engine first')."""

    B: list[int]
    nospec_ms: list[float]
    k0_ms: list[float]
    warnings: list[str]


class Profile(_Model):
    schema_version: int = SCHEMA_VERSION
    created_at: float
    engine: EngineInfo
    grid: list[int]
    decode_tokens: int
    repeats: int
    cells: list[Cell] = Field(default_factory=list)
    samples: list[StepSample] = Field(default_factory=list)
    acceptance: AcceptanceMeasurement | None = None
    table: list[list[int]] | None = None
    tie: float = 0.005
    preflight: Preflight | None = None
    timings_s: dict[str, float] = Field(default_factory=dict)  # server starts, per k, total
    refined: list[int] = Field(default_factory=list)  # grid points --refine added at cliffs
    refine_rounds: int = 0  # --refine rounds completed (a rerun does only the rest)
    workload: Workload | None = None  # None: pure-decode steps (the paper's method)
    max_repeats: int | None = None  # repeats went up to this where they disagreed by > noise_tol
    noise_tol: float | None = None

    # -- derived -------------------------------------------------------------------------
    @property
    def K(self) -> int:
        return self.engine.num_speculative_tokens

    def finished_k(self) -> set[int]:
        return {k for k in range(self.K + 1)
                if all(any(c.B == b and c.k == k for c in self.cells) for b in self.grid)}

    def step_time_matrix(self, source: Literal["best", "client", "engine"] = "best",
                         monotone: bool = True) -> np.ndarray:
        """T[g, k] in ms for grid point g; raises if a cell is missing.

        monotone: make T non-decreasing in k (running max over k). Drafting and verifying more
        tokens never makes a step cheaper on the V1 runner; a measured T(B,3) < T(B,0) is noise,
        and with near-zero acceptance (equal τ) noise alone would otherwise pick k=3.
        """
        T = np.full((len(self.grid), self.K + 1), np.nan)
        index = {b: g for g, b in enumerate(self.grid)}
        for c in self.cells:
            value = {"best": c.step_ms, "client": c.client_ms, "engine": c.engine_ms}[source]
            if c.B in index and value is not None:
                T[index[c.B], c.k] = value
        if np.isnan(T).any():
            missing = sorted(set(range(self.K + 1)) - self.finished_k())
            raise InvalidInput(f"profile: step times missing for k={missing}; rerun "
                               "`tabletune tune` with the same --out to finish the sweep")
        return np.maximum.accumulate(T, axis=1) if monotone else T

    def build(self, a: list[float] | None = None, allowed_k: set[int] | None = None) -> TableChoice:
        acc = a if a is not None else (self.acceptance.a if self.acceptance else None)
        if acc is None:
            raise InvalidInput("profile has no acceptance yet; pass --acceptance a1,a2,...")
        if len(acc) != self.K:
            raise InvalidInput(f"acceptance has {len(acc)} values but the profile's K is "
                               f"{self.K}; give a_1..a_{self.K}")
        return build_table(self.grid, self.step_time_matrix(), acc, self.engine.max_num_seqs,
                           tie=self.tie, allowed_k=allowed_k)

    def _cliffs(self) -> list[Cliff]:
        return cliffs(self.grid, self.step_time_matrix(monotone=False))

    def cliff_warnings(self) -> list[str]:
        """Table edges that interpolation placed inside a step-time jump (see goodput.cliffs)."""
        return [] if self.table is None else cliff_warnings(Table.from_list(self.table), self._cliffs())

    def refine_points(self) -> list[int]:
        """New grid points that would bisect the cliffs holding an edge of the current table."""
        if self.table is None:
            return []
        return [B for B in refine_points(Table.from_list(self.table), self._cliffs())
                if B not in self.grid]

    def samples_by_cell(self) -> dict[tuple[int, int], list[StepSample]]:
        """(B, k) -> that cell's raw samples, in the order they were recorded."""
        by: dict[tuple[int, int], list[StepSample]] = {}
        for smp in self.samples:
            by.setdefault((smp.B, smp.k), []).append(smp)
        return by

    def repeat_spreads(self) -> dict[tuple[int, int], tuple[float, int]]:
        """(B, k) -> (spread between the cell's first `repeats` usable repeats, how many it
        took), for cells with two or more: extra repeats would widen the range, not describe the
        noise, and a sample that missed its batch measured another B (see usable)."""
        return {key: (spread([smp.step_ms for smp in usable(v)[:max(self.repeats, 2)]]), len(v))
                for key, v in self.samples_by_cell().items() if len(usable(v)) >= 2}

    def underfilled(self) -> list[StepSample]:
        """The samples of cells where none held the batch (fewer than BATCH_FILL·B requests a
        step in every repeat): those cells' T is for a smaller batch than their B. A cell with
        one filled sample takes its median over the filled ones (usable) and is not listed."""
        return [smp for v in self.samples_by_cell().values() if not any(filled(x) for x in v)
                for smp in v]

    def batch_warnings(self) -> list[str]:
        by: dict[int, list[StepSample]] = {}
        for smp in self.underfilled():
            by.setdefault(smp.B, []).append(smp)
        return [f"B={B}: {len(v)} sample(s) ran only {min(s.mean_batch or 0 for s in v):.0f}-"
                f"{max(s.mean_batch or 0 for s in v):.0f} requests a step (k="
                f"{','.join(str(k) for k in sorted({s.k for s in v}))}): the clients could not "
                f"keep {B} requests in the engine (still being admitted when the window opened, or "
                f"admitted slower than they finished), so T(B={B}) is for a smaller batch: treat "
                f"the table there as unmeasured" for B, v in sorted(by.items())]

    def noise_line(self) -> str | None:
        spreads = self.repeat_spreads()
        if not spreads:
            return None
        values = sorted(sp for sp, _ in spreads.values())
        extra = sum(1 for _, n in spreads.values() if n > self.repeats)
        line = (f"repeats disagree by {np.median(values) * 100:.1f}% at the median cell, "
                f"{np.percentile(values, 90) * 100:.1f}% at the 90th percentile")
        if self.max_repeats and self.max_repeats > self.repeats:
            line += (f"; {extra} of {len(spreads)} cells took more than {self.repeats} repeats "
                     f"(up to {self.max_repeats}, where two disagreed by more than "
                     f"{(self.noise_tol or 0) * 100:.0f}%)")
        return line

    def client_engine_gap(self) -> float | None:
        """Median |client - engine| / engine over cells that have both."""
        gaps = [abs(c.client_ms - c.engine_ms) / c.engine_ms for c in self.cells
                if c.engine_ms is not None and c.engine_ms > 0]
        return statistics.median(gaps) if gaps else None

    def check_matches(self, engine: EngineInfo, grid: list[int],
                      workload: Workload | None = None) -> None:
        """A resumed run must measure the same thing; say what differs."""
        diffs = [f"{name}: profile has {getattr(self.engine, name)!r}, now {getattr(engine, name)!r}"
                 for name in ("model", "method", "drafter", "num_speculative_tokens",
                              "max_num_seqs", "temperature")
                 if getattr(self.engine, name) != getattr(engine, name)]
        if self.workload != workload:
            diffs.append(f"workload: profile has {_shape(self.workload)}, now {_shape(workload)}")
        # points a --refine run added are the profile's own: the requested grid must hold every
        # other point and may name refined ones too
        base = set(self.grid) - set(self.refined)
        if not base <= set(grid) <= set(self.grid):
            diffs.append(f"grid: profile has {sorted(base)} (+ refined {self.refined}), now {grid}")
        if diffs:
            raise ProfileMismatch("the existing profile was measured differently (" +
                                  "; ".join(diffs) + "); use another --out or --fresh")

    def speculative_config(self, table: Table) -> dict[str, object]:
        cfg: dict[str, object] = {"method": self.engine.method,
                                  "num_speculative_tokens": self.K,
                                  "num_speculative_tokens_per_batch_size": table.to_list()}
        if self.engine.drafter:
            cfg["model"] = self.engine.drafter
        return cfg

    # -- I/O -----------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        """Atomic: a crash mid-write leaves the previous profile intact."""
        write_atomic(path, self.model_dump_json(indent=1))


def load(path: Path) -> Profile:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InvalidInput(f"profile {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvalidInput(f"profile {path} is not JSON: {exc}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise InvalidInput(f"profile {path}: schema_version {version!r}, this TableTune reads "
                           f"{SCHEMA_VERSION}; re-run `tabletune tune`")
    return Profile.model_validate(data)
