"""The bench's engines: one vLLM with speculation and the plugin (every table policy runs on it,
swapped through the admin API), and, for `nospec`, one without speculation beside it."""

from __future__ import annotations

from pathlib import Path

from tuner.core.engine_client import EngineClient
from tuner.engine_defaults import plugin_env, resolve_model
from tuner.launcher import ServerConfig, SpeculativeSpec
from tuner.core.profile import Profile
from tuner.replay import Replay
from tuner.core.table import every_k_table

TOKEN = "bench-token"


def admin_client(admin_port: int) -> EngineClient:
    """The plugin of the bench's engine (token: TOKEN)."""
    return EngineClient(admin_url=f"http://127.0.0.1:{admin_port}", token=TOKEN, timeout_s=30.0)


def spec_server(profile: Profile, model: Path, admin_port: int, emulate: Replay | None,
                extra_args: tuple[str, ...], drafter: Path | None = None) -> ServerConfig:
    """The speculating engine: it starts with every k in its table (the GPU V2 runner captures
    full CUDA graphs only for the startup table's k's), the plugin's admin API on `admin_port`.
    The drafter is `drafter`, else the one the profile names (resolved like the model)."""
    K, n = profile.K, profile.engine.max_num_seqs
    name = profile.engine.drafter
    path = drafter or (resolve_model(name, None, "--drafter") if name else None)
    spec = SpeculativeSpec(method=profile.engine.method, num_speculative_tokens=K,
                           table=every_k_table(K, n), draft_model=str(path) if path else None,
                           extra=emulate.speculative_extra() if emulate else {})
    env = plugin_env(admin_port, token=TOKEN, emulate=emulate.emulator_rates() if emulate else None)
    return ServerConfig(model=model, max_num_seqs=n, speculative=spec, env=env,
                        extra_args=extra_args)


def nospec_server(profile: Profile, model: Path, extra_args: tuple[str, ...]) -> ServerConfig:
    return ServerConfig(model=model, max_num_seqs=profile.engine.max_num_seqs,
                        extra_args=extra_args)


def max_model_len(extra_args: tuple[str, ...], default: int = 1024) -> int:
    """The engine's --max-model-len as the bench's flags set it (vLLM takes the last one)."""
    found = default
    for i, a in enumerate(extra_args):
        if a.startswith("--max-model-len="):
            found = int(a.split("=", 1)[1])
        elif a == "--max-model-len" and i + 1 < len(extra_args):
            found = int(extra_args[i + 1])
    return found
