"""Render every kustomization with kustomize (kubectl's) and check what comes out."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.deploy import manifests as m
from tests.deploy.test_manifests import validate

Renders = dict[str, list[dict[str, Any]]]

SMP_ADDED_ENV = {"SPECULATIVE_CONFIG", "TABLETUNE_ADMIN_PORT", "TABLETUNE_ADMIN_HOST",
                 "TABLETUNE_ADMIN_TOKEN_FILE", "TABLETUNE_RESTRICT_K"}


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def test_every_render_validates(renders: Renders) -> None:
    for name, docs in renders.items():
        assert docs, name
        for d in docs:
            validate(d, f"render of {name}")


@pytest.mark.parametrize("name", ["base", "overlays/live", "overlays/dry-run"])
def test_engine_stack(renders: Renders, name: str) -> None:
    docs = renders[name]
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "ConfigMap", "Deployment", "PodMonitor",
                                               "PrometheusRule", "Service"]
    deployment = one(docs, "Deployment")
    (cm,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] != "tabletune-dashboard"]
    (dashboard,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "tabletune-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # Grafana's sidecar loads it
    assert set(dashboard["data"]) == {"dashboard.json"}
    assert cm["metadata"]["name"].startswith("tabletune-profile-"), "hash suffix rolls pods on change"
    assert set(cm["data"]) == {"profile.json", "speculative-config.json"}
    pod = deployment["spec"]["template"]["spec"]
    refs = [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v]
    refs += [e["valueFrom"]["configMapKeyRef"]["name"] for c in pod["containers"]
             for e in c.get("env", []) if "configMapKeyRef" in e.get("valueFrom", {})]
    assert refs and set(refs) == {cm["metadata"]["name"]}
    expected = {"overlays/live": "false"}.get(name, "true")
    (sidecar,) = [c for c in m.containers(docs, name) if m.is_sidecar(c)]
    assert sidecar.env()["TABLETUNE_SIDECAR_DRY_RUN"] == expected


def test_live_and_dry_run_differ_only_in_dry_run(renders: Renders) -> None:
    live, dry = copy.deepcopy(renders["overlays/live"]), renders["overlays/dry-run"]
    for c in m.containers(live, "live"):
        for e in c.spec.get("env", []):
            if e["name"] == "TABLETUNE_SIDECAR_DRY_RUN":
                e["value"] = "true"
    assert live == dry


def _pod_ports(deployment: dict[str, Any]) -> set[str]:
    pod = deployment["spec"]["template"]["spec"]
    return {p["name"] for c in pod.get("initContainers", []) + pod["containers"] for p in c.get("ports", [])}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_podmonitor_scrapes_engine_and_sidecar(renders: Renders) -> None:
    docs = renders["overlays/live"]
    deployment, pm = one(docs, "Deployment"), one(docs, "PodMonitor")
    assert _selects(pm["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    ports = {e["port"] for e in pm["spec"]["podMetricsEndpoints"]}
    assert ports == {"http", "tabletune"} and ports <= _pod_ports(deployment)


def test_servicemonitor_component_replaces_podmonitor(renders: Renders) -> None:
    docs = renders["overlays/live+servicemonitor"]
    assert not by_kind(docs, "PodMonitor"), "both would scrape every target twice"
    sm, svc, deployment = one(docs, "ServiceMonitor"), one(docs, "Service"), one(docs, "Deployment")
    assert _selects(sm["spec"]["selector"], svc["metadata"]["labels"])
    assert svc["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert {e["port"] for e in sm["spec"]["endpoints"]} == {p["name"] for p in svc["spec"]["ports"]}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= _pod_ports(deployment)


def test_tune_job(renders: Renders) -> None:
    docs = renders["jobs"]
    job, pvc = one(docs, "Job"), one(docs, "PersistentVolumeClaim")
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod.get("nodeSelector")
    (c,) = pod["containers"]
    assert c["command"] == ["tabletune", "tune"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    out = m.arg_value(c["args"], "--out")
    assert out is not None
    container = m.Container("jobs", job, pod, c, False)
    _, volume = container.mount_for(out)
    assert volume["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]


def test_llmd_component_changes_nothing_else(renders: Renders) -> None:
    """Rendered onto a stand-in of llm-d's decode Deployment, the component only adds: remove
    exactly what it adds and the upstream Deployment comes back unchanged."""
    upstream, patched = renders["llm-d-upstream"], renders["llm-d"]
    (up,) = upstream
    assert sorted(d["kind"] for d in patched) == ["ConfigMap", "Deployment", "PodMonitor"]
    cm, pm, dep = one(patched, "ConfigMap"), one(patched, "PodMonitor"), one(patched, "Deployment")
    assert cm["metadata"]["name"].startswith("tabletune-profile-")
    assert _selects(pm["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} == {"tabletune"}

    undone = copy.deepcopy(dep)
    pod = undone["spec"]["template"]["spec"]
    (sidecar,) = pod.pop("initContainers")
    assert sidecar["name"] == m.SIDECAR_CONTAINER and sidecar["restartPolicy"] == "Always"
    pod["volumes"] = [v for v in pod["volumes"] if not v["name"].startswith("tabletune-")]
    engine = pod["containers"][0]
    assert engine["name"] == m.LLMD_CONTAINER
    assert engine["args"][-1] == "--speculative-config=$(SPECULATIVE_CONFIG)"
    engine["args"].pop()
    assert {e["name"] for e in engine["env"]} - {e["name"] for e in up["spec"]["template"]["spec"]
                                                    ["containers"][0]["env"]} == SMP_ADDED_ENV
    engine["env"] = [e for e in engine["env"] if e["name"] not in SMP_ADDED_ENV]
    engine["volumeMounts"] = [v for v in engine["volumeMounts"] if not v["name"].startswith("tabletune-")]
    assert engine["image"].startswith("tabletune/vllm-llm-d:"), "the plugin must be in the image"
    engine["image"] = up["spec"]["template"]["spec"]["containers"][0]["image"]
    assert undone == up
