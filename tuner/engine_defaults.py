"""Where the embedded default lives and how a TableTune-managed vLLM is configured.

One place for: the cache folder, the default model, and the plugin's environment.
"""

from __future__ import annotations

import os
from pathlib import Path

from tuner.tiny_model import ModelPaths, build


def cache_dir() -> Path:
    return Path(os.environ.get("TABLETUNE_CACHE", Path.home() / ".cache" / "tabletune"))


def default_model(seed: int = 0) -> ModelPaths:
    """The tiny Llama target and drafter, built on first use (a few seconds) and cached."""
    return build(cache_dir() / "models", seed=seed)


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
