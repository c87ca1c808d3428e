"""Where the embedded default lives and how a TableTune-managed vLLM is configured.

One place for: the cache folder, the default model, a model's vocabulary size, and the
plugin's environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tuner.errors import InvalidInput
from tuner.tiny_model import ModelPaths, build


def cache_dir() -> Path:
    return Path(os.environ.get("TABLETUNE_CACHE", Path.home() / ".cache" / "tabletune"))


def default_model(seed: int = 0) -> ModelPaths:
    """The tiny Llama target and drafter, built on first use (a few seconds) and cached."""
    return build(cache_dir() / "models", seed=seed)


def vocab_size(model: Path) -> int:
    """vocab_size from a Hugging Face model folder's config.json (prompts are token ids)."""
    config = model / "config.json"
    try:
        value = json.loads(config.read_text())["vocab_size"]
    except OSError as exc:
        raise InvalidInput(f"model {model}: cannot read {config.name} ({exc.strerror}); pass the "
                           "folder of a Hugging Face model (--model)") from None
    except (ValueError, KeyError, TypeError):
        raise InvalidInput(f"model {model}: {config.name} has no integer vocab_size") from None
    if not isinstance(value, int) or value < 1:
        raise InvalidInput(f"model {model}: vocab_size={value!r} in {config.name} is not a "
                           "positive integer")
    return value


def plugin_env(admin_port: int | None = None, token: str | None = None, reject_all: bool = False,
               emulate: tuple[float, ...] | None = None, explore_every: int = 0,
               hysteresis: int = 0) -> dict[str, str]:
    env: dict[str, str] = {}
    if admin_port is not None:
        env["TABLETUNE_ADMIN_PORT"] = str(admin_port)
    if token:
        env["TABLETUNE_ADMIN_TOKEN"] = token
    if reject_all:
        env["TABLETUNE_REJECT_ALL"] = "1"
    if emulate is not None:
        env["TABLETUNE_EMULATE_ACCEPTANCE"] = ",".join(f"{a:g}" for a in emulate)
    if explore_every:
        env["TABLETUNE_EXPLORE_EVERY"] = str(explore_every)
    if hysteresis:
        env["TABLETUNE_HYSTERESIS"] = str(hysteresis)
    return env
