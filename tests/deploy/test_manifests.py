"""deploy/: every YAML parses, kustomizations hold together, resources validate offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy import manifests as m

# Oldest Kubernetes the manifests support (native sidecars are on by default from 1.29) and the
# newest schema kubernetes-validate ships.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())


def validate(doc: dict[str, Any], where: str) -> None:
    """Built-in kinds against the Kubernetes JSON schema (strict: unknown fields fail);
    Prometheus Operator CRDs have no schema offline, so only their shape is checked."""
    assert isinstance(doc, dict), f"{where}: a document is not a mapping"
    for key in ("apiVersion", "kind", "metadata"):
        assert key in doc, f"{where}: {doc.get('kind')} has no {key}"
    assert doc["metadata"].get("name"), f"{where}: {doc['kind']} has no metadata.name"
    if doc["kind"] in m.CRD_KINDS:
        assert doc["apiVersion"] == "monitoring.coreos.com/v1", where
        assert isinstance(doc.get("spec"), dict) and doc["spec"], f"{where}: {doc['kind']} has no spec"
        if doc["kind"] == "PrometheusRule":
            assert doc["spec"].get("groups"), f"{where}: a PrometheusRule without groups"
            return
        assert doc["spec"].get("selector"), f"{where}: {doc['kind']} selects nothing"
        endpoints = doc["spec"].get("podMetricsEndpoints") or doc["spec"].get("endpoints")
        assert endpoints and all(e.get("port") and e.get("path") == "/metrics" for e in endpoints), where
        return
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            raise AssertionError(f"{where}: {doc['kind']}/{doc['metadata']['name']} invalid for "
                                 f"Kubernetes {version} at {path}: {exc.message}") from None


def patch_files() -> set[str]:
    out = set()
    for k in m.kustomizations():
        for p in k.patches():
            if "path" in p:
                out.add(str((k.dir / p["path"]).resolve()))
    return out


# -- parsing ----------------------------------------------------------------------------------
def test_there_is_something_to_check() -> None:
    names = {str(p.relative_to(m.DEPLOY)) for p in m.yaml_files()}
    for expected in ("base/kustomization.yaml", "base/deployment.yaml", "overlays/live/kustomization.yaml",
                     "overlays/dry-run/kustomization.yaml", "jobs/tune-job.yaml",
                     "components/servicemonitor/kustomization.yaml", "llm-d/kustomization.yaml"):
        assert expected in names


@pytest.mark.parametrize("path", m.yaml_files(), ids=lambda p: str(p.relative_to(m.DEPLOY)))
def test_yaml_parses_into_resources(path: Path) -> None:
    docs = m.load_docs(path)
    assert docs, f"{path}: empty"
    where = str(path.relative_to(m.ROOT))
    if str(path.resolve()) in patch_files():
        for d in docs:  # strategic merge (a mapping) or JSON 6902 (a list of operations)
            if isinstance(d, list):
                assert all(isinstance(op, dict) and op.get("op") and op.get("path") for op in d), where
            else:
                assert {"apiVersion", "kind", "metadata"} <= set(d), where
        return
    for d in docs:
        assert isinstance(d, dict), f"{where}: not a mapping"
        if d.get("kind") in m.KUSTOMIZATION_KINDS:
            assert d["apiVersion"].startswith("kustomize.config.k8s.io/"), where
            continue
        validate(d, where)


@pytest.mark.parametrize("path", sorted(m.DEPLOY.rglob("*.json")), ids=lambda p: str(p.relative_to(m.DEPLOY)))
def test_json_parses(path: Path) -> None:
    assert isinstance(json.loads(path.read_text(encoding="utf-8")), dict)


def test_validator_is_live() -> None:
    """The schema check rejects what the API server would: a misspelt field, a wrong type."""
    bad = yaml.safe_load("""
apiVersion: v1
kind: Service
metadata: {name: x}
spec:
  ports: [{name: http, port: "eighty", targetPurt: http}]
""")
    with pytest.raises(AssertionError, match="invalid"):
        validate(bad, "inline")


# -- kustomization structure (pure Python, no kustomize needed) --------------------------------
@pytest.mark.parametrize("k", m.kustomizations(), ids=lambda k: str(k.dir.relative_to(m.DEPLOY)))
def test_kustomization_references_exist(k: m.Kustomization) -> None:
    where = k.dir.relative_to(m.ROOT)
    assert k.kind in m.KUSTOMIZATION_KINDS, where
    for ref in k.refs("resources") + k.refs("components"):
        if m.is_remote(ref):
            assert k.dir.name == "llm-d", f"{where}: remote resource {ref}; only deploy/llm-d may use one"
            continue
        target = k.dir / ref
        assert target.exists(), f"{where}: {ref} does not exist"
        if target.is_dir():
            assert list(target.glob("kustomization.y*ml")), f"{where}: {ref} has no kustomization.yaml"
    for ref in k.refs("components"):
        (doc,) = m.load_docs(next((k.dir / ref).glob("kustomization.y*ml")))
        assert doc.get("kind") == "Component", f"{where}: {ref} is not a Component"
    for p in k.patches():
        assert "path" in p or "patch" in p, f"{where}: patch without path or patch"
        if "path" in p:
            assert (k.dir / p["path"]).is_file(), f"{where}: patch {p['path']} does not exist"
    for f in k.generator_files():
        assert (k.dir / f).is_file(), f"{where}: generator file {f} does not exist"


@pytest.mark.parametrize("k", [k for k in m.kustomizations() if k.kind == "Kustomization"],
                         ids=lambda k: str(k.dir.relative_to(m.DEPLOY)))
def test_patches_target_existing_resources(k: m.Kustomization) -> None:
    resources, remote = m.local_resources(k)
    if remote:  # deploy/llm-d: upstream's decode Deployment (the render tests use a stand-in)
        resources.add(("Deployment", m.LLMD_DEPLOYMENT))
    for patch, kind, name in m.patch_targets(k):
        assert (kind, name) in resources, (
            f"{k.dir.relative_to(m.ROOT)}: {patch} targets {kind}/{name}, which is not among "
            f"{sorted(resources)}")


def test_overlays_only_flip_dry_run() -> None:
    """live and dry-run differ in exactly one thing: TABLETUNE_SIDECAR_DRY_RUN."""
    values = {}
    for overlay in ("live", "dry-run"):
        cs = m.all_file_containers()
        (c,) = [c for c in cs if c.source == f"deploy/overlays/{overlay}/patch-sidecar.yaml"]
        assert m.is_sidecar(c) and c.init
        values[overlay] = c.env()
        assert set(c.env()) == {"TABLETUNE_SIDECAR_DRY_RUN"}
    assert values["live"]["TABLETUNE_SIDECAR_DRY_RUN"] == "false"
    assert values["dry-run"]["TABLETUNE_SIDECAR_DRY_RUN"] == "true"


def test_no_secret_material_committed() -> None:
    for path in m.yaml_files():
        for d in m.load_docs(path):
            if isinstance(d, dict):
                assert d.get("kind") != "Secret", f"{path}: commit no Secret; create it in the cluster"
                gens = d.get("secretGenerator") or []
                assert not gens, f"{path}: no secretGenerator (it would commit the token)"
    for c in m.all_file_containers():
        for name in ("TABLETUNE_ADMIN_TOKEN", "TABLETUNE_SIDECAR_ADMIN_TOKEN"):
            assert name not in c.env(), f"{c.source}: {name} as a literal; use the _FILE from the Secret"
