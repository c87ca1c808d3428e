"""Fixtures for the deploy/ checks: rendered kustomizations (when kubectl is available)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy import manifests as m

# A hand-written stand-in for llm-d's rendered optimized-baseline decode Deployment: only what
# the tabletune component relies on (names, the vLLM container first, its args and port).
LLMD_STANDIN = f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {m.LLMD_DEPLOYMENT}
  labels: {{llm-d.ai/guide: optimized-baseline, llm-d.ai/model: Qwen3-32B, llm-d.ai/role: decode}}
spec:
  replicas: 2
  selector:
    matchLabels: {{llm-d.ai/guide: optimized-baseline, llm-d.ai/model: Qwen3-32B, llm-d.ai/role: decode}}
  template:
    metadata:
      labels: {{llm-d.ai/guide: optimized-baseline, llm-d.ai/model: Qwen3-32B, llm-d.ai/role: decode}}
    spec:
      serviceAccountName: optimized-baseline-nvidia-gpu-vllm-sa
      containers:
        - name: {m.LLMD_CONTAINER}
          image: vllm/vllm-openai:v0.26.0
          command: [vllm, serve]
          args: [Qwen/Qwen3-32B, --tensor-parallel-size=2]
          env:
            - name: HF_TOKEN
              valueFrom: {{secretKeyRef: {{name: llm-d-hf-token, key: HF_TOKEN}}}}
          ports: [{{name: modelserver, containerPort: 8000, protocol: TCP}}]
          readinessProbe: {{httpGet: {{path: /v1/models, port: modelserver}}, periodSeconds: 5}}
          livenessProbe: {{httpGet: {{path: /health, port: modelserver}}, periodSeconds: 10}}
          resources:
            limits: {{nvidia.com/gpu: 2}}
            requests: {{nvidia.com/gpu: 2}}
          volumeMounts: [{{name: shm, mountPath: /dev/shm}}]
      volumes:
        - name: shm
          emptyDir: {{medium: Memory}}
"""


def _write(dir: Path, kustomization: str, **files: str) -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    (dir / "kustomization.yaml").write_text(kustomization)
    for name, text in files.items():
        (dir / name).write_text(text)
    return dir


@pytest.fixture(scope="session")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """name -> rendered documents; skips when kubectl (with built-in kustomize) is absent."""
    if m.kubectl() is None:
        pytest.skip("kubectl not on PATH: kustomize rendering not checked (structure still is)")
    out = {name: m.render(m.DEPLOY / name)
           for name in ("base", "overlays/live", "overlays/dry-run", "jobs")}

    sm = tmp_path_factory.mktemp("servicemonitor")
    _write(sm, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
               f"resources:\n  - {m.relative(m.DEPLOY / 'overlays/live', sm)}\n"
               f"components:\n  - {m.relative(m.DEPLOY / 'components/servicemonitor', sm)}\n")
    out["overlays/live+servicemonitor"] = m.render(sm)

    up = tmp_path_factory.mktemp("llmd-upstream")
    _write(up, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
               "resources:\n  - upstream.yaml\n", **{"upstream.yaml": LLMD_STANDIN})
    out["llm-d-upstream"] = m.render(up)
    ll = tmp_path_factory.mktemp("llmd")
    _write(ll, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
               "resources:\n  - upstream.yaml\n"
               f"components:\n  - {m.relative(m.DEPLOY / 'llm-d/tabletune', ll)}\n",
           **{"upstream.yaml": LLMD_STANDIN})
    out["llm-d"] = m.render(ll)
    return out
