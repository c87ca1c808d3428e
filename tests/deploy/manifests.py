"""Reading deploy/: YAML documents, kustomizations, containers, and rendering with kustomize.

Pure helpers for tests/deploy; nothing here talks to a cluster or the network. Rendering uses
`kubectl kustomize` (kustomize is built into kubectl) when kubectl is on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

SIDECAR_CONTAINER = "tabletune-sidecar"
# Upstream llm-d names the tabletune component patches (see deploy/llm-d/tabletune).
LLMD_DEPLOYMENT = "optimized-baseline-nvidia-gpu-vllm-decode"
LLMD_CONTAINER = "modelserver"

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "Pod"}
CRD_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
# Prometheus's own files (rule file, its promtool test), not Kubernetes resources
MONITORING = DEPLOY / "base" / "monitoring"
KUSTOMIZATION_KINDS = {"Kustomization", "Component"}


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()
                  and MONITORING not in p.parents)


def load_docs(path: Path) -> list[Any]:
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def is_remote(ref: str) -> bool:
    return "://" in ref or ref.startswith(("github.com/", "git@"))


# -- kustomizations ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Kustomization:
    dir: Path
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc.get("kind", "Kustomization"))

    def refs(self, key: str) -> list[str]:
        return [str(r) for r in self.doc.get(key) or []]

    def patches(self) -> list[dict[str, Any]]:
        out = []
        for p in self.doc.get("patches") or []:
            out.append(p if isinstance(p, dict) else {"path": p})
        for p in self.doc.get("patchesStrategicMerge") or []:
            out.append({"path": p})
        return out

    def generator_files(self) -> list[str]:
        files = []
        for key in ("configMapGenerator", "secretGenerator"):
            for gen in self.doc.get(key) or []:
                for f in gen.get("files") or []:
                    files.append(str(f).split("=", 1)[-1])
        return files


def kustomizations() -> list[Kustomization]:
    found = []
    for path in sorted(DEPLOY.rglob("kustomization.y*ml")):
        (doc,) = load_docs(path)
        found.append(Kustomization(path.parent, doc))
    return found


def local_resources(k: Kustomization, seen: frozenset[Path] = frozenset()
                    ) -> tuple[set[tuple[str, str]], bool]:
    """(kind, name) of every resource a kustomization accumulates from local files, and whether
    any resource is remote (then the set is incomplete). Minimal: namePrefix/nameSuffix only."""
    if k.dir in seen:
        raise AssertionError(f"kustomization cycle through {k.dir}")
    out: set[tuple[str, str]] = set()
    remote = False
    for ref in k.refs("resources"):
        if is_remote(ref):
            remote = True
            continue
        target = (k.dir / ref).resolve()
        if target.is_dir():
            (doc,) = load_docs(next(target.glob("kustomization.y*ml")))
            sub, sub_remote = local_resources(Kustomization(target, doc), seen | {k.dir})
            out |= sub
            remote |= sub_remote
        else:
            for d in load_docs(target):
                out.add((d["kind"], d["metadata"]["name"]))
    for gen_key, kind in (("configMapGenerator", "ConfigMap"), ("secretGenerator", "Secret")):
        for gen in k.doc.get(gen_key) or []:
            out.add((kind, gen["name"]))
    prefix, suffix = k.doc.get("namePrefix", ""), k.doc.get("nameSuffix", "")
    return {(kind, f"{prefix}{name}{suffix}") for kind, name in out}, remote


def patch_targets(k: Kustomization) -> Iterator[tuple[str, str, str]]:
    """(patch file, kind, name) for every patch of a kustomization."""
    for p in k.patches():
        label = p.get("path", "<inline>")
        if "target" in p:
            t = p["target"]
            yield label, t.get("kind", ""), t.get("name", "")
            continue
        docs = load_docs(k.dir / p["path"]) if "path" in p else [yaml.safe_load(p["patch"])]
        for d in docs:
            yield label, d["kind"], d["metadata"]["name"]


# -- containers -------------------------------------------------------------------------------
@dataclass
class Container:
    source: str  # file or render it came from
    workload: dict[str, Any]  # the document (Deployment, Job, patch...)
    pod: dict[str, Any]  # the pod spec
    spec: dict[str, Any]
    init: bool

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    def env(self) -> dict[str, str]:
        return {e["name"]: e["value"] for e in self.spec.get("env") or [] if "value" in e}

    def env_names(self) -> list[str]:
        return [e["name"] for e in self.spec.get("env") or []]

    def port(self, ref: int | str) -> int:
        """A probe's or Service's port, resolved by name against this container's ports."""
        if isinstance(ref, int):
            return ref
        for p in self.spec.get("ports") or []:
            if p.get("name") == ref:
                return int(p["containerPort"])
        raise AssertionError(f"{self.source}: container {self.name} has no port named {ref!r}")

    def mount_for(self, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The volumeMount holding ``path`` and its pod volume."""
        for m in self.spec.get("volumeMounts") or []:
            if path.startswith(m["mountPath"].rstrip("/") + "/"):
                for v in self.pod.get("volumes") or []:
                    if v["name"] == m["name"]:
                        return m, v
                raise AssertionError(f"{self.source}: mount {m['name']} has no volume")
        raise AssertionError(f"{self.source}: {self.name} has no volumeMount holding {path}")


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    kind = doc.get("kind")
    if kind == "Pod":
        return doc.get("spec")
    if kind in WORKLOAD_KINDS:
        return ((doc.get("spec") or {}).get("template") or {}).get("spec")
    return None


def containers(docs: list[Any], source: str) -> list[Container]:
    out = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        pod = pod_spec(doc)
        if not pod:
            continue
        for init, key in ((True, "initContainers"), (False, "containers")):
            for c in pod.get(key) or []:
                out.append(Container(source, doc, pod, c, init))
    return out


def all_file_containers() -> list[Container]:
    out = []
    for path in yaml_files():
        docs = load_docs(path)
        if docs and isinstance(docs[0], dict) and docs[0].get("kind") in KUSTOMIZATION_KINDS:
            continue
        out += containers(docs, str(path.relative_to(ROOT)))
    return out


def is_sidecar(c: Container) -> bool:
    return c.name == SIDECAR_CONTAINER or "tabletune/sidecar" in str(c.spec.get("image", ""))


def arg_value(args: list[str], flag: str) -> str | None:
    """``--flag=value`` or ``--flag value`` from an argument list."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


# -- plugin settings, as documented -----------------------------------------------------------
def plugin_env_names() -> set[str]:
    """TABLETUNE_* names both documented in vllm_patch/settings.py's docstring table and read
    by its code. `NAME[_SUFFIX]` in the table stands for NAME and NAME_SUFFIX."""
    import vllm_patch.settings as mod

    source = Path(mod.__file__).read_text(encoding="utf-8")
    documented: set[str] = set()
    for m in re.finditer(r"^\|\s*(TABLETUNE_[A-Z_]+)(\[(_[A-Z_]+)\])?\s*\|", mod.__doc__ or "", re.M):
        documented.add(m.group(1))
        if m.group(3):
            documented.add(m.group(1) + m.group(3))
    read = set(re.findall(r"[\"'](TABLETUNE_[A-Z_]+)[\"']", source))
    return documented & read


# -- rendering --------------------------------------------------------------------------------
def kubectl() -> str | None:
    return shutil.which("kubectl")


def render(directory: Path) -> list[dict[str, Any]]:
    exe = kubectl()
    assert exe is not None
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.run([exe, "kustomize", str(directory)], capture_output=True, text=True,
                          timeout=60, env=env, cwd=directory)
    assert proc.returncode == 0, f"kustomize {directory} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d is not None]


def relative(target: Path, start: Path) -> str:
    """kustomize refuses absolute resource paths."""
    return os.path.relpath(target, start)
