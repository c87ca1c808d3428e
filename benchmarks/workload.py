"""The bench's request mixes (pure): what each closed-loop client asks for next.

Lengths are drawn from a distribution, so requests started together do not finish together
and every window sees the same mix (docs/measurement.md, rule 4: stationary load):

- `steady` (default): prompts of exactly `prompt_tokens`; outputs uniform on
  [0.5, 1.5] x `max_tokens` (mean `max_tokens`, the shape the profile was timed for);
- `chat`: long-tailed like chat traffic: prompt and output lengths lognormal with medians
  `prompt_tokens` and `max_tokens` (sigma 1.0 and 0.8: means about 1.65x and 1.38x the medians,
  95th percentiles about 5.2x and 3.7x), prompts clipped to half of `max_model_len` and outputs
  to what is left of it (1024 on the tiny model).

Prompts are token-id lists cut from one set of long prompts (tuner/prompts.py), so a request's
prompt of length L is the first L tokens of one of them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from tuner.load import Request

MIXES = ("steady", "chat")
POOL = 512  # requests drawn per bench: more than any load keeps in flight, cycled


def lengths(mix: str, prompt_tokens: int, max_tokens: int, max_model_len: int,
            n: int = POOL, seed: int = 0) -> list[tuple[int, int]]:
    """(prompt length, output length) of n requests; ValueError naming an unknown mix."""
    rng = random.Random(seed)
    out: list[tuple[int, int]] = []
    for _ in range(n):
        if mix == "steady":
            prompt = prompt_tokens
            output = rng.randint(max(1, round(0.5 * max_tokens)), max(1, round(1.5 * max_tokens)))
        elif mix == "chat":
            prompt = min(max(4, round(rng.lognormvariate(0, 1.0) * prompt_tokens)),
                         max_model_len // 2)
            output = max(1, round(rng.lognormvariate(0, 0.8) * max_tokens))
        else:
            raise ValueError(f"workload mix {mix!r}: use one of {', '.join(MIXES)}")
        out.append((prompt, max(1, min(output, max_model_len - prompt - 1))))
    return out


def requests(mix: str, long_prompts: Sequence[Any], prompt_tokens: int, max_tokens: int,
             max_model_len: int, seed: int = 0) -> list[Request]:
    """The bench's request pool: each prompt cut from `long_prompts` (token-id lists, each at
    least as long as the longest prompt the mix may draw: `max_model_len // 2` for chat)."""
    drawn = lengths(mix, prompt_tokens, max_tokens, max_model_len, seed=seed)
    return [Request(prompt=long_prompts[i % len(long_prompts)][:p], max_tokens=o)
            for i, (p, o) in enumerate(drawn)]


def longest_prompt(mix: str, prompt_tokens: int, max_model_len: int) -> int:
    return prompt_tokens if mix == "steady" else max_model_len // 2
