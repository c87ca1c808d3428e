"""Sample prompts: the built-in sets and the loader for a user's file.

Built-in sets are token-id prompts for the embedded tiny model (tuner/tiny_model.py):
- `repetitive`: orbits of the model's planted successor map f, so the prompt already holds the
  cycle greedy decoding will follow; ngram matches it and acceptance is high;
- `random`: uniform random tokens; with temperature > 0 the continuation wanders and
  acceptance is low.
A user's file is JSONL ({"prompt": "..."} per line) or plain text (one prompt per line).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tuner.core.errors import InvalidInput
from tuner.tiny_model import BIGRAM_SEED, SPECIAL_TOKENS, successor_map

Prompt = str | list[int]


def repetitive(n: int, vocab_size: int, length: int = 96, seed: int = 0) -> list[Prompt]:
    f = successor_map(vocab_size, BIGRAM_SEED)
    rng = random.Random(seed)
    out: list[Prompt] = []
    for _ in range(n):
        t = rng.randrange(len(SPECIAL_TOKENS), vocab_size)
        ids = []
        for _ in range(length):
            ids.append(t)
            t = f[t]
        out.append(ids)
    return out


def random_tokens(n: int, vocab_size: int, length: int = 32, seed: int = 0) -> list[Prompt]:
    rng = random.Random(seed)
    return [[rng.randrange(len(SPECIAL_TOKENS), vocab_size) for _ in range(length)]
            for _ in range(n)]


def load_file(path: Path) -> list[Prompt]:
    """Prompts from JSONL or text; a clear error for a missing, empty or malformed file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInput(f"prompts file {path}: {exc.strerror}; pass an existing JSONL or text "
                           "file, or omit --prompts to use the built-in set") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise InvalidInput(f"prompts file {path} is empty; it needs one prompt per line")
    if path.suffix != ".jsonl":
        return list(lines)
    prompts: list[Prompt] = []
    for no, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
            prompts.append(obj["prompt"] if isinstance(obj, dict) else str(obj))
        except (ValueError, KeyError) as exc:
            raise InvalidInput(f"{path}:{no}: expected a JSON object with a 'prompt' field "
                               f"({exc})") from None
    return prompts
