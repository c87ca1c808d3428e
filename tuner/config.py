"""What `tabletune tune` measures: its configuration, validated before any vLLM starts."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tuner.engine_defaults import model_shape, vocab_size
from tuner.hardware import hardware, vllm_version
from tuner.launcher import MODEL_DRAFTERS
from tuner.core.profile import EngineInfo
from tuner.prompts import Prompt
from tuner.replay import Replay
from tuner.core.workload import Workload

__all__ = ["TuneConfig", "engine_info"]


class TuneConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Path
    method: str = "ngram"
    drafter: Path | None = None
    num_speculative_tokens: int = Field(ge=1, description="K: the longest draft length")
    max_num_seqs: int = Field(ge=1)
    grid: list[int]
    repeats: int = Field(3, ge=1)
    # more repeats, interleaved across k, up to max_repeats, while a cell's interval is wider
    # than ± ci_target of its estimate (None: repeats + 2); the looks are paid for in the level
    # (tuner/core/samples.cell_level)
    max_repeats: int | None = Field(None, ge=1)
    ci_target: float = Field(0.02, gt=0)
    decode_tokens: int = Field(65, ge=3)
    temperature: float = Field(0.0, ge=0)
    acceptance_prompts: list[Prompt]
    acceptance_max_tokens: int = Field(64, ge=2)
    out: Path
    tie: float = Field(0.005, ge=0)
    confidence: float = Field(0.9, ge=0.5, lt=1)  # one-sided level of a split's gain
    min_width: int = Field(4, ge=1)  # narrowest range a table keeps without a measured cliff
    min_k: int = Field(0, ge=0)  # never fewer drafts than this (EAGLE state across K=0)
    fresh: bool = False
    extra_args: tuple[str, ...] = ()
    # Replay this acceptance profile instead of the drafter's own (dummy weights): see replay.py.
    # Step times are measured under reject-all either way.
    emulate: Replay | None = None
    one_server: bool = False  # swap the per-k tables into one vLLM instead of one vLLM per k
    # Rounds of bisection where a table edge falls between two grid points across which T jumps
    # (goodput.cliffs): each adds the middle of each such interval, measured for every k.
    # None: 2 with one_server (a few cells), 0 otherwise (K+1 more vLLM starts per round).
    refine: int | None = Field(None, ge=0)
    # Time steps in steady serving of this request shape (prefill included) instead of pure
    # decode; acceptance is then measured first, since a request's lifetime depends on τ(k).
    workload: Workload | None = None
    log_dir: Path = Path("runs/logs")
    served_model_name: str = "tiny"  # the name vLLM serves it under (its /metrics label)

    @model_validator(mode="after")
    def _check(self) -> TuneConfig:
        if not self.grid or self.grid != sorted(set(self.grid)) or self.grid[0] < 1:
            raise ValueError(f"grid={self.grid}: batch sizes must be distinct, sorted and >= 1")
        if self.grid[-1] > self.max_num_seqs:
            raise ValueError(f"grid goes to B={self.grid[-1]} but max_num_seqs={self.max_num_seqs};"
                             " lower the grid or raise --max-num-seqs")
        if self.method in MODEL_DRAFTERS and self.drafter is None:
            raise ValueError(f"method={self.method} needs --drafter (the drafter model's path)")
        if not self.acceptance_prompts:
            raise ValueError("acceptance_prompts is empty")
        if self.min_k > self.num_speculative_tokens:
            raise ValueError(f"min_k={self.min_k} exceeds num_speculative_tokens="
                             f"{self.num_speculative_tokens}")
        if self.emulate is not None:
            self.emulate.check_k(self.num_speculative_tokens)
        return self

    @property
    def repeat_limit(self) -> int:
        return max(self.repeats, self.max_repeats if self.max_repeats is not None else self.repeats + 2)

    @property
    def refine_rounds(self) -> int:
        return self.refine if self.refine is not None else (2 if self.one_server else 0)

    @property
    def vocab_size(self) -> int:
        return vocab_size(self.model)


def engine_info(cfg: TuneConfig) -> EngineInfo:
    """What the profile records of the engine it measured (names and shapes, never paths)."""
    return EngineInfo(hardware=hardware(), vllm_version=vllm_version(), model=str(cfg.model),
                      served_model_name=cfg.served_model_name, model_shape=model_shape(cfg.model),
                      method=cfg.method, drafter=str(cfg.drafter) if cfg.drafter else None,
                      num_speculative_tokens=cfg.num_speculative_tokens,
                      max_num_seqs=cfg.max_num_seqs, temperature=cfg.temperature)
