"""Replayed acceptance: a chosen profile a_1..a_K instead of the drafter's own.

For dummy weights (the GPU runs here), whose real acceptance means nothing. Two ways to replay:

- ``plugin``: the plugin's emulator caps each request-step's accepted count inside vLLM's
  rejection sampler. It can only *lower* acceptance: right for ngram on repetitive output, which
  accepts almost everything; useless for a dummy drafter that never agrees with its target.
- ``vllm``: vLLM's own ``rejection_sample_method: "synthetic"`` accepts drafts at the given
  unconditional rates whatever they are (GPU builds; vLLM CPU asserts against it). The plugin's
  emulator then passes everything through (rates 1.0), except in the tuner's reject-all timing
  mode, where it still cuts every draft.

Timing is measured under reject-all in both cases, so only the acceptance side differs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ReplayBy = Literal["plugin", "vllm"]


class Replay(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rates: tuple[float, ...] = Field(min_length=1)
    by: ReplayBy = "plugin"

    @field_validator("rates")
    @classmethod
    def _rates(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0.0 <= a <= 1.0 for a in v):
            raise ValueError(f"rates={list(v)}: each a_i is a probability in [0, 1]")
        if any(b > a for a, b in zip(v, v[1:])):
            raise ValueError(f"rates={list(v)}: a_i is P(first i drafts accepted), so it cannot "
                             "grow with i; e.g. 0.75,0.55,0.40")
        return v

    @model_validator(mode="before")
    @classmethod
    def _from_tuple(cls, v: Any) -> Any:
        return {"rates": tuple(v)} if isinstance(v, (tuple, list)) else v

    @classmethod
    def parse(cls, text: str, by: ReplayBy = "plugin") -> Replay:
        try:
            rates = tuple(float(x) for x in text.split(","))
        except ValueError:
            raise ValueError("expected rates like 0.75,0.55,0.4") from None
        return cls(rates=rates, by=by)

    def check_k(self, K: int) -> None:
        """vLLM's synthetic mode wants exactly K rates; the plugin pads with the last one."""
        if self.by == "vllm" and len(self.rates) != K:
            raise ValueError(f"{len(self.rates)} rates but K={K}: vLLM's synthetic "
                             f"rejection sampling needs exactly one rate per position")

    def speculative_extra(self) -> dict[str, Any]:
        """Fields for vLLM's --speculative-config."""
        if self.by != "vllm":
            return {}
        return {"rejection_sample_method": "synthetic",
                "synthetic_acceptance_rates": list(self.rates)}

    def emulator_rates(self) -> tuple[float, ...]:
        """What the plugin's emulator caps at while acceptance is being measured or served."""
        return self.rates if self.by == "plugin" else (1.0,) * len(self.rates)

    def describe(self) -> str:
        how = "the plugin's emulator" if self.by == "plugin" else "vLLM's synthetic rejection sampling"
        return f"replayed by {how} at {list(self.rates)}"
