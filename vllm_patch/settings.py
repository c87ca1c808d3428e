"""The plugin's settings, read once per process from the environment.

Nothing listens unless TABLETUNE_ADMIN_PORT is set; the default bind is loopback.

| variable                         | meaning                                                    |
|----------------------------------|------------------------------------------------------------|
| TABLETUNE_ADMIN_PORT             | admin HTTP port (unset: no admin endpoint, no extra series) |
| TABLETUNE_ADMIN_HOST             | bind address (default 127.0.0.1)                           |
| TABLETUNE_ADMIN_UDS              | also listen on this Unix-domain socket (mode 0660), a path  |
|                                  | on a volume the sidecar shares; only with ADMIN_PORT        |
| TABLETUNE_ADMIN_TOKEN[_FILE]     | bearer token required for every mutating call              |
| TABLETUNE_EXPLORE_EVERY          | every N steps an exploration run at another k (0 = off)    |
| TABLETUNE_EXPLORE_RUN            | steps per exploration run (default 3, < EXPLORE_EVERY)     |
| TABLETUNE_HYSTERESIS             | edge hysteresis band h in requests (0 = off)               |
| TABLETUNE_RESTRICT_K             | 1: swapped tables may only use the startup table's K set   |
| TABLETUNE_REJECT_ALL             | 1: reject every draft after the full draft+verify (timing) |
| TABLETUNE_EMULATE_ACCEPTANCE     | "a1,a2,..": cap acceptance at these rates; runtime-settable |
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tuner.core.admin_api import check_exploration, check_rates

MAX_BODY_BYTES = 64 * 1024
MAX_EXPLORE_RUN = 64  # PolicyBody's bound (tuner/core/admin_api.py)


@dataclass(frozen=True, slots=True)
class PluginSettings:
    admin_port: int | None
    admin_host: str
    admin_token: str | None
    admin_uds: str | None
    explore_every: int
    explore_run: int
    hysteresis: int
    restrict_k: bool
    reject_all: bool
    emulate_acceptance: tuple[float, ...] | None

    @property
    def emulation_enabled(self) -> bool:
        """Whether the rejection sampler is wrapped (reject-all or an acceptance profile)."""
        return self.reject_all or self.emulate_acceptance is not None


def _int(env: dict[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"{name}={value} must be >= 0")
    return value


def _rates(raw: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"TABLETUNE_EMULATE_ACCEPTANCE={raw!r}: expected rates like 0.7,0.5,0.3") from None
    check_rates(rates)
    return rates


def _token(env: dict[str, str]) -> str | None:
    if env.get("TABLETUNE_ADMIN_TOKEN"):
        return env["TABLETUNE_ADMIN_TOKEN"].strip()
    path = env.get("TABLETUNE_ADMIN_TOKEN_FILE")
    if path:
        return Path(path).read_text().strip() or None
    return None


def _exploration(env: dict[str, str]) -> tuple[int, int]:
    every = _int(env, "TABLETUNE_EXPLORE_EVERY", 0)
    run = _int(env, "TABLETUNE_EXPLORE_RUN", 3)
    if not 1 <= run <= MAX_EXPLORE_RUN:
        raise ValueError(f"TABLETUNE_EXPLORE_RUN={run} must be in 1..{MAX_EXPLORE_RUN}")
    try:
        check_exploration(every, run)
    except ValueError as exc:
        raise ValueError(f"TABLETUNE_EXPLORE_EVERY/TABLETUNE_EXPLORE_RUN: {exc}") from None
    return every, run


def from_env(env: dict[str, str] | None = None) -> PluginSettings:
    """The settings from TABLETUNE_* variables; ValueError naming the variable and the fix."""
    env = dict(os.environ) if env is None else env
    port = env.get("TABLETUNE_ADMIN_PORT", "").strip()
    emulate = env.get("TABLETUNE_EMULATE_ACCEPTANCE", "").strip()
    explore_every, explore_run = _exploration(env)
    return PluginSettings(
        admin_port=_int(env, "TABLETUNE_ADMIN_PORT", 0) if port else None,
        admin_host=env.get("TABLETUNE_ADMIN_HOST", "127.0.0.1"),
        admin_token=_token(env),
        admin_uds=env.get("TABLETUNE_ADMIN_UDS", "").strip() or None,
        explore_every=explore_every, explore_run=explore_run,
        hysteresis=_int(env, "TABLETUNE_HYSTERESIS", 0),
        restrict_k=env.get("TABLETUNE_RESTRICT_K", "0") == "1",
        reject_all=env.get("TABLETUNE_REJECT_ALL", "0") == "1",
        emulate_acceptance=_rates(emulate) if emulate else None,
    )
