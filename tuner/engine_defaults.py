"""Where the embedded default lives and how a TableTune-managed vLLM is configured.

One place for: the cache folder, the default model, a model's vocabulary size, and the
plugin's environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tuner.core.errors import InvalidInput
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


SHAPE_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "vocab_size", "num_experts",
              "num_experts_per_tok", "moe_intermediate_size")


def model_shape(model: Path) -> dict[str, int | str]:
    """What a profile records of the model: its architecture and sizes (config.json), so a
    profile names the model by name and shape, never by a path of the machine that tuned it.
    Empty when the folder has no config.json (a Hugging Face id vLLM downloads itself)."""
    try:
        config = json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    shape: dict[str, int | str] = {k: config[k] for k in SHAPE_KEYS
                                   if isinstance(config.get(k), int | str)}
    if isinstance(config.get("architectures"), list) and config["architectures"]:
        shape["architecture"] = str(config["architectures"][0])
    return shape


def resolve_model(name: str, given: str | Path | None, what: str = "--model") -> Path:
    """The folder to serve a profile's model from: ``given`` if set, else the embedded tiny
    model when the profile names it, else ``name`` itself when it is a folder here (older
    profiles stored paths) or a Hugging Face id vLLM can fetch."""
    if given:
        text = str(given)
        if not Path(given).is_dir() and (Path(given).is_absolute() or text.startswith(".")
                                         or text.count("/") > 1):
            raise InvalidInput(f"{what}={str(given)!r}: no such folder here, and not a Hugging "
                               "Face id (owner/name); pass the folder of the model")
        return Path(given)
    paths = default_model()
    for path in (paths.target, paths.drafter):
        if name == path.name:
            return path
    if Path(name).is_dir() or (not Path(name).is_absolute() and name.count("/") == 1):
        return Path(name)
    raise InvalidInput(f"the profile's model {name!r} is not on this machine; pass {what} PATH "
                       "(the folder of that model)")


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
