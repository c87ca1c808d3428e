"""The served requests' shape that `tabletune tune --workload PROMPT:OUTPUT` times steps under."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tuner.core.errors import InvalidInput

__all__ = ["Workload"]


class Workload(BaseModel):
    """The served requests' shape. Timed under it, a step carries the prefill such a load brings:
    at batch size B and draft length k each request lives output_tokens / τ(k) steps, so
    B·τ(k)/output_tokens requests finish and as many prompts are prefilled per step. Without it
    steps are pure decode (the paper's method), which can sit under a CUDA-graph token limit that
    real steps, prefill included, cross."""

    model_config = ConfigDict(extra="forbid")

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
