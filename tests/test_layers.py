"""Imports point down: tabletune (the application) -> sidecar -> tuner <- vllm_patch.

benchmarks/ is a development harness outside the wheel: importing any module of the four shipped
packages must not pull it in (the bench runs as `python -m benchmarks`), and tuner/ (the base
layer) never imports sidecar/. Each package is imported whole in a fresh interpreter, so what
one test imported cannot hide what another module needs.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import importlib, pkgutil, sys
pkg = importlib.import_module({name!r})
for info in pkgutil.walk_packages(pkg.__path__, {name!r} + "."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
print(",".join(sorted({{m.split(".")[0] for m in sys.modules}})))
"""

FORBIDDEN = {"tuner": {"benchmarks", "sidecar", "tabletune"},
             "vllm_patch": {"benchmarks", "sidecar", "tabletune"},
             "sidecar": {"benchmarks", "tabletune"},
             "tabletune": {"benchmarks"}}


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_a_package_never_imports_a_layer_above_it(name: str) -> None:
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(name=name)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = set(proc.stdout.strip().split(","))
    assert not loaded & FORBIDDEN[name], f"importing {name} loaded {sorted(loaded & FORBIDDEN[name])}"
