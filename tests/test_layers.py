"""Imports point down: tabletune (the application) -> sidecar -> tuner/core <- vllm_patch, and the
tuning application (the rest of tuner/) -> tuner/core.

benchmarks/ is a development harness outside the wheel: importing any module of the four shipped
packages must not pull it in (the bench runs as `python -m benchmarks`), and tuner/ never
imports sidecar/. Each package is imported whole in a fresh interpreter, so what
one test imported cannot hide what another module needs.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import importlib, pkgutil, sys
for name in {names!r}:
    pkg = importlib.import_module(name)
    for info in pkgutil.walk_packages(getattr(pkg, "__path__", []), name + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
print(",".join(sorted(sys.modules)))
"""

FORBIDDEN = {"tuner": {"benchmarks", "sidecar", "tabletune"},
             "vllm_patch": {"benchmarks", "sidecar", "tabletune"},
             "sidecar": {"benchmarks", "tabletune"},
             "tabletune": {"benchmarks"}}
# The base (tuner/core/) imports no other package and nothing of the tuning application.
CORE = "tuner.core"
# What the plugin may import inside the vLLM engine: stdlib + pydantic modules of the base.
ENGINE_SAFE = ["tuner.core.errors", "tuner.core.files", "tuner.core.table", "tuner.core.admin_api",
               "tuner.core.buckets"]
NOT_IN_ENGINE = {"numpy", "aiohttp", "prometheus_client", "tenacity", "pydantic_settings"}


def loaded_by(*names: str) -> set[str]:
    """Every module a fresh interpreter holds after importing ``names`` (packages whole)."""
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(names=names)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set(proc.stdout.strip().split(","))


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_a_package_never_imports_a_layer_above_it(name: str) -> None:
    loaded = {m.split(".")[0] for m in loaded_by(name)}
    assert not loaded & FORBIDDEN[name], f"importing {name} loaded {sorted(loaded & FORBIDDEN[name])}"


def test_the_base_imports_nothing_above_it() -> None:
    loaded = loaded_by(CORE)
    above = {m for m in loaded if m.split(".")[0] in {"benchmarks", "sidecar", "tabletune", "vllm_patch"}
             or (m.startswith("tuner.") and not m.startswith(CORE))}
    assert not above, f"importing {CORE} loaded {sorted(above)}"


def test_the_engine_safe_base_is_stdlib_and_pydantic() -> None:
    loaded = loaded_by(*ENGINE_SAFE)
    heavy = {m.split(".")[0] for m in loaded} & NOT_IN_ENGINE
    assert not heavy, f"the engine-safe modules {ENGINE_SAFE} loaded {sorted(heavy)}"


def test_the_plugin_imports_only_the_engine_safe_base() -> None:
    tuner = {m for m in loaded_by("vllm_patch") if m.startswith("tuner.")}
    assert tuner <= {"tuner.core", *ENGINE_SAFE}, f"vllm_patch loaded {sorted(tuner - set(ENGINE_SAFE))}"


def test_the_sidecar_imports_only_the_base_of_tuner() -> None:
    tuner = {m for m in loaded_by("sidecar") if m.startswith("tuner.")}
    assert all(m.startswith(CORE) for m in tuner), f"sidecar loaded {sorted(tuner)}"


# Inside the sidecar: observe -> believe -> decide (the controller) -> publish; none reaches up.
DECIDE = {"sidecar.rebuild", "sidecar.arbiter", "sidecar.controller", "sidecar.publish"}
SIDECAR_ORDER = {"sidecar.observer": {"sidecar.belief", "sidecar.controller", "sidecar.publish"},
                 "sidecar.belief": DECIDE | {"sidecar.guard_watch"},
                 "sidecar.measured": {"sidecar.belief", *DECIDE},
                 "sidecar.model_error": {"sidecar.belief", "sidecar.rebuild", "sidecar.controller",
                                         "sidecar.publish"},
                 "sidecar.arbiter": {"sidecar.belief", "sidecar.rebuild", "sidecar.controller",
                                     "sidecar.publish"},
                 "sidecar.rebuild": {"sidecar.belief", "sidecar.controller", "sidecar.publish"},
                 "sidecar.guard_watch": {"sidecar.controller", "sidecar.publish"},
                 "sidecar.engine_table": {"sidecar.controller", "sidecar.belief", "sidecar.publish"}}


@pytest.mark.parametrize("name", sorted(SIDECAR_ORDER))
def test_the_sidecar_reads_before_it_believes_before_it_decides(name: str) -> None:
    above = loaded_by(name) & SIDECAR_ORDER[name]
    assert not above, f"importing {name} loaded {sorted(above)}"


def test_the_controller_only_decides_and_publishes() -> None:
    """docs/sidecar.md promises a controller of at most 350 lines: reading, believing and
    choosing live in their own modules, and a new rule that lands here instead shows."""
    from pathlib import Path

    import sidecar.controller

    lines = Path(sidecar.controller.__file__).read_text().splitlines()
    assert len(lines) <= 350, f"sidecar/controller.py has {len(lines)} lines"
