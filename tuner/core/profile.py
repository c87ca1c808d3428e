"""The profile: one versioned JSON document with everything needed to rebuild a table later
without the engine: what was measured (raw samples too), on what, and how long it took.

Schema and file I/O only; statistics over samples live in tuner/core/samples.py, the table rule in
tuner/core/confidence.py, and what a profile says in words in tuner/findings.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tuner.core.confidence import Confident, choose_confident
from tuner.core.errors import InvalidInput, ProfileMismatch
from tuner.core.files import write_atomic
from tuner.core.goodput import cliffs, interpolate_step_times, tau
from tuner.core.graphs import Boundary, boundaries, snap_edges
from tuner.core.honor import HonorCheck
from tuner.core.intervals import sigma_log
from tuner.core.monotone import monotone_step_times
from tuner.core.recommend import Recommendation, recommend
from tuner.core.samples import cell_sigma, pooled_log_sd
from tuner.core.table import Table
from tuner.core.workload import Workload

# 2: a cell's engine_ms is the geometric mean of its repeats' medians and ci_* its Student t
# interval at ci_level (tuner/core/intervals.py, eq. R); 1: the median over all its steps and a
# 95% cluster-bootstrap interval (or its repeats' range). Both load; each cell says which it holds
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)


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
    engine_ms: float | None   # engine-side: median of steps_ms, else Δ step seconds / Δ steps
    engine_steps: int | None  # engine steps in the long run at this batch size
    full_draft_share: float | None  # share of request-steps whose draft had all k tokens
    # under a workload (mixed cells): requests and tokens a step carried on average (a little
    # under B requests while finished ones are replaced; decode, draft and prefill tokens)
    mean_batch: float | None = None
    tokens_per_step: float | None = None
    started: float | None = None  # unix time the sample began: drift shows against it
    # the engine's own time of each step that ran this cell (exactly B requests, or the
    # workload's batch, at a steady k: it verified and drafted k), in ms
    steps_ms: list[float] | None = None
    # the drafts each request verified on the long run's steady decode steps at B (tokens / B
    # - 1, median over them; tuner/core/honor.py), and how many steps that is: whether the
    # engine ran the k the table asked
    drafts: float | None = None
    drafts_steps: int | None = None


class Cell(_EngineFirst):
    """A cell's step time, with its interval (ci_*; None in older profiles or with one repeat).

    ci_level set (schema 2): engine_ms is the geometric mean of the usable repeats' medians and
    ci_* its Student t interval at that level (the 95% spent over the repeat rule's looks,
    tuner/core/samples.cell_level). ci_level None (schema 1): engine_ms is the median over all
    steps and ci_* a 95% cluster-bootstrap interval, or the repeats' range."""

    B: int
    k: int
    wall_s: float  # time spent measuring this cell
    ci_low_ms: float | None = None
    ci_high_ms: float | None = None
    steps: int | None = None  # engine steps (or repeats) behind the median
    ci_level: float | None = None


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


def _shape(w: Workload | None) -> str:
    return f"{w.prompt_tokens}:{w.output_tokens}" if w else "none"


class GraphInfo(_Model):
    """What the engine said of its CUDA graphs and token budget (tuner/core/graphs.py)."""

    capture_sizes: list[int] = Field(default_factory=list)
    max_num_batched_tokens: int | None = None


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
    # the table splits only where a k's goodput gain beats the tie at this one-sided level
    confidence: float = 0.9
    min_width: int = 4  # narrowest range (batch sizes) not forced by a measured cliff
    min_k: int = 0  # never fewer drafts: keeps an EAGLE-style drafter's state alive
    preflight: Preflight | None = None
    timings_s: dict[str, float] = Field(default_factory=dict)  # server starts, per k, total
    # grid points the tuner added: --refine's bisections of cliffs, and both sides of each
    # CUDA-graph boundary the engine reported
    refined: list[int] = Field(default_factory=list)
    graph: GraphInfo | None = None
    refine_rounds: int = 0  # --refine rounds completed (a rerun does only the rest)
    workload: Workload | None = None  # None: pure-decode steps (the paper's method)
    max_repeats: int | None = None  # repeats went up to this while a cell's interval was wide
    ci_target: float | None = None  # ... wider than ± this share of its median
    noise_tol: float | None = None  # older profiles' repeat rule (unused)
    # does the engine honor the table? (tuner/core/honor.py; None: profiles before the check)
    honor: HonorCheck | None = None

    # -- derived -------------------------------------------------------------------------
    @property
    def K(self) -> int:
        return self.engine.num_speculative_tokens

    def finished_k(self) -> set[int]:
        return {k for k in range(self.K + 1)
                if all(any(c.B == b and c.k == k for c in self.cells) for b in self.grid)}

    def _grid_matrix(self, value: str) -> np.ndarray:
        T = np.full((len(self.grid), self.K + 1), np.nan)
        index = {b: g for g, b in enumerate(self.grid)}
        for c in self.cells:
            v = getattr(c, value) if value != "step_ms" else c.step_ms
            if c.B in index and v is not None:
                T[index[c.B], c.k] = v
        return T

    def step_time_matrix(self, source: Literal["best", "client", "engine"] = "best",
                         monotone: bool = True) -> np.ndarray:
        """T[g, k] in ms for grid point g; raises if a cell is missing.

        monotone: the weighted isotonic fit, non-decreasing in k and in B (tuner/core/monotone.py).
        Drafting and verifying more tokens, or serving more requests, never makes a step
        cheaper; a measured T(B,3) < T(B,0) is noise, and with near-zero acceptance (equal τ)
        noise alone would otherwise pick k=3. Cliffs (jumps up) are kept as measured.
        """
        T = self._grid_matrix({"best": "step_ms", "client": "client_ms",
                               "engine": "engine_ms"}[source])
        if np.isnan(T).any():
            missing = sorted(set(range(self.K + 1)) - self.finished_k())
            raise InvalidInput(f"profile: step times missing for k={missing}; rerun "
                               "`tabletune tune` with the same --out to finish the sweep")
        if not monotone:
            return T
        return monotone_step_times(T, 1.0 / np.square(self.step_time_sigma()))

    def step_time_sigma(self) -> np.ndarray:
        """σ of log T per grid cell, from the profile's own repeats (tuner/core/samples.cell_sigma):
        the larger of the cell's repeat sd and the sd pooled over all cells' repeats, over √n.
        A cell that kept no samples reads its stored interval instead; a profile with no
        repeated cell pools its cells' intervals (their median σ); with neither it says nothing
        of its noise, and no σ is made up for it."""
        med, lo, hi, level = (self._grid_matrix(v) for v in ("step_ms", "ci_low_ms", "ci_high_ms",
                                                            "ci_level"))
        ci = np.full(med.shape, np.nan)
        for g, k in np.ndindex(*med.shape):
            ci[g, k] = sigma_log(float(med[g, k]), _or_none(float(lo[g, k])), _or_none(float(hi[g, k])),
                                 fallback=np.nan, level=_or_none(float(level[g, k])) or 0.95)
        by = self.samples_by_cell()
        pooled = pooled_log_sd(by.values())
        if pooled is None and np.isfinite(ci).any():
            pooled = float(np.nanmedian(ci))
        if pooled is None:
            raise InvalidInput("profile: no cell was measured twice and none has an interval, so "
                               "nothing says how noisy its step times are; re-run `tabletune "
                               "tune --fresh` with --repeats 2 or more")
        out = np.empty(med.shape)
        for g, k in np.ndindex(*med.shape):
            own = by.get((self.grid[g], k), [])
            out[g, k] = max(cell_sigma(own, _or_none(float(ci[g, k])), pooled), 1e-3)
        return out

    def build(self, a: list[float] | None = None, allowed_k: set[int] | None = None) -> Confident:
        """The table for this profile's step times and acceptance (or ``a``), splitting only
        where the data can tell (tuner/core/confidence.py)."""
        acc = a if a is not None else (self.acceptance.a if self.acceptance else None)
        if acc is None:
            raise InvalidInput("profile has no acceptance yet; pass --acceptance a1,a2,...")
        if len(acc) != self.K:
            raise InvalidInput(f"acceptance has {len(acc)} values but the profile's K is "
                               f"{self.K}; give a_1..a_{self.K}")
        n = self.engine.max_num_seqs
        T = interpolate_step_times(self.grid, self.step_time_matrix(), n)
        sigma = interpolate_step_times(self.grid, self.step_time_sigma(), n)
        drafted = self.acceptance.drafted if a is None and self.acceptance else None
        # grid: each cell's error is drawn once and interpolated along B with its step time
        choice = choose_confident(T, sigma, acc, drafted, tie=self.tie, confidence=self.confidence,
                                  allowed_k=self._allowed(allowed_k), width=self.min_width,
                                  grid=self.grid,
                                  cliffs=cliffs(self.grid, self.step_time_matrix(monotone=False)))
        found = self.graph_boundaries(acc)
        if not found:
            return choice
        return dataclasses.replace(choice, table=snap_edges(choice.table, found))

    def _allowed(self, allowed_k: set[int] | None) -> set[int] | None:
        """allowed_k with the --min-k floor applied (None: every k)."""
        if not self.min_k:
            return allowed_k
        return {k for k in (allowed_k or range(self.K + 1)) if k >= self.min_k}

    def graph_boundaries(self, a: list[float] | None = None) -> list[Boundary]:
        """Where steps leave the engine's CUDA graphs or token budget, per k (tuner/core/graphs.py);
        under a workload each step also carries τ(k)·prompt/output prefill tokens a request."""
        if self.graph is None:
            return []
        acc = a if a is not None else (self.acceptance.a if self.acceptance else None)
        prefill = None
        if self.workload is not None and acc is not None:
            w = self.workload
            prefill = [float(t) * w.prompt_tokens / w.output_tokens for t in tau(acc)]
        return boundaries(self.graph.capture_sizes, self.graph.max_num_batched_tokens, self.K,
                          self.engine.max_num_seqs, prefill)

    def unmeasured_top(self) -> str | None:
        """In words, the batch sizes above the grid's last B, up to max_num_seqs: their step
        times are that B's held (goodput.interpolate_step_times), not measured. None: none."""
        last, top = self.grid[-1], self.engine.max_num_seqs
        if last >= top:
            return None
        return (f"the grid ends at B={last} but the engine runs up to max_num_seqs={top}: above "
                f"B={last} the step times are T(B={last}) held, not measured (past a CUDA-graph "
                f"limit a step can cost several times more)")

    def recommendation(self) -> Recommendation:
        """What to deploy (tuner/core/recommend.py): the table, one k, or no speculation."""
        pf = self.preflight
        return recommend(self.build(), self.tie, pf.B if pf else None, pf.nospec_ms if pf else None)

    def samples_by_cell(self) -> dict[tuple[int, int], list[StepSample]]:
        """(B, k) -> that cell's raw samples, in the order they were recorded."""
        by: dict[tuple[int, int], list[StepSample]] = {}
        for smp in self.samples:
            by.setdefault((smp.B, smp.k), []).append(smp)
        return by

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


def _or_none(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def load(path: Path) -> Profile:
    """A profile from disk; InvalidInput naming the file, the field and the fix."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InvalidInput(f"profile {path}: {exc.strerror}; pass the profile.json that "
                           "`tabletune tune --out` wrote") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"profile {path} is not JSON ({exc}); pass the profile.json that "
                           "`tabletune tune --out` wrote") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version not in READABLE_VERSIONS:
        raise InvalidInput(f"profile {path}: schema_version {version!r}, this TableTune reads "
                           f"{' and '.join(map(str, READABLE_VERSIONS))}; re-run `tabletune tune`")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise InvalidInput(f"profile {path}: {where}: {err['msg']}; the file is damaged or "
                           "not a TableTune profile, re-run `tabletune tune`") from None
