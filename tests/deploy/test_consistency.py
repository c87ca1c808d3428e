"""The manifests use only what the code really accepts, and agree with themselves.

- every TABLETUNE_SIDECAR_* variable and sidecar `--flag` is a SidecarSettings field, and the
  values parse through the sidecar's real CLI and pydantic-settings;
- every other TABLETUNE_* variable is one the plugin documents and reads (vllm_patch/settings.py);
- ports: the sidecar's listen port is its containerPort and probe port, its engine/admin URLs
  point at the engine container's port and TABLETUNE_ADMIN_PORT on loopback;
- the token comes from one Secret for both, the profile from the ConfigMap, and the engine's
  --speculative-config carries the profile's K and table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from dockerfile_parse import DockerfileParser

from sidecar.profile_fit import mismatches
from sidecar.settings import ENV_PREFIX, SidecarSettings, flag, from_args
from tabletune.cli import parser as cli_parser
from tests.deploy import manifests as m
from tuner.core.profile import load as load_profile
from tuner.core.table import Table, check_for_engine
from vllm_patch.settings import from_env as plugin_from_env

ADMIN_PORT = 8500
LOOPBACK = "127.0.0.1"
SIDECAR_FLAGS = {flag(name) for name in SidecarSettings.model_fields}
PROFILE_DIRS = [m.DEPLOY / "base/profile", m.DEPLOY / "llm-d/tabletune/profile"]
# Files holding a complete pod (sidecar with mounts, engine, volumes) without rendering.
COMPLETE_POD_FILES = ["deploy/base/deployment.yaml", "deploy/llm-d/tabletune/patch-decode.yaml"]


def sidecar_settings(c: m.Container, monkeypatch: pytest.MonkeyPatch) -> SidecarSettings:
    """What `tabletune sidecar` would run with in this container: its args through the real
    CLI parser, its env through pydantic-settings (flag > env > default)."""
    command = c.spec.get("command")
    assert command in (None, ["tabletune", "sidecar"]), f"{c.source}: sidecar command {command}"
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    env = c.env()
    env.setdefault(ENV_PREFIX + "PROFILE", "/etc/tabletune/profile/profile.json")  # partial patches
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        args = cli_parser().parse_args(["sidecar", *c.spec.get("args", [])])
    except SystemExit:
        raise AssertionError(f"{c.source}: `tabletune sidecar` refuses args {c.spec.get('args')}") from None
    return from_args(args)


def sidecar_containers() -> list[m.Container]:
    found = [c for c in m.all_file_containers() if m.is_sidecar(c)]
    assert len(found) >= 4  # base, two overlays, llm-d
    return found


def all_env_names() -> list[tuple[str, str]]:
    """(where, NAME) for every env var in any manifest, Dockerfile ENV or deploy doc."""
    out = [(c.source, n) for c in m.all_file_containers() for n in c.env_names()]
    for df in sorted(m.DEPLOY.glob("*Dockerfile")):
        out += [(df.name, n) for n in DockerfileParser(path=str(df)).envs]
    for md in sorted(m.DEPLOY.rglob("*.md")):
        names = re.findall(r"\b(TABLETUNE_[A-Z0-9_]*[A-Z0-9])\b", md.read_text(encoding="utf-8"))
        out += [(str(md.relative_to(m.ROOT)), n) for n in names]
    return out


# -- names ------------------------------------------------------------------------------------
def test_sidecar_env_vars_are_settings_fields() -> None:
    fields = {ENV_PREFIX + name.upper() for name in SidecarSettings.model_fields}
    used = [(w, n) for w, n in all_env_names() if n.startswith(ENV_PREFIX)]
    assert used
    unknown = [(w, n) for w, n in used if n not in fields]
    assert not unknown, f"not SidecarSettings fields: {unknown}"


def test_plugin_env_vars_are_documented_and_read() -> None:
    known = m.plugin_env_names()
    assert {"TABLETUNE_ADMIN_PORT", "TABLETUNE_ADMIN_HOST", "TABLETUNE_ADMIN_TOKEN_FILE"} <= known
    used = [(w, n) for w, n in all_env_names() if n.startswith("TABLETUNE_") and not n.startswith(ENV_PREFIX)]
    assert used
    unknown = [(w, n) for w, n in used if n not in known]
    assert not unknown, f"not documented in vllm_patch/settings.py: {unknown}"


def test_sidecar_flags_in_docs_exist() -> None:
    """`--flags` on `tabletune sidecar` command lines in deploy's docs and Dockerfiles."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(m.DEPLOY.rglob("*.md"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted(m.DEPLOY.glob("*Dockerfile"))]
    flags = set()
    for text in texts:
        for line in re.findall(r"(?:tabletune sidecar|tabletune/sidecar:\S+)((?:\\\n|[^\n])*)", text):
            flags |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line))
    flags -= {"--help", "--network"}
    assert {"--profile", "--dry-run"} <= flags, "the sidecar image's usage line was not read"
    assert flags <= SIDECAR_FLAGS, f"unknown sidecar flags in docs: {flags - SIDECAR_FLAGS}"


@pytest.mark.parametrize("c", sidecar_containers(), ids=lambda c: c.source)
def test_sidecar_env_and_args_parse(c: m.Container, monkeypatch: pytest.MonkeyPatch) -> None:
    for a in c.spec.get("args", []):
        if a.startswith("--"):
            assert a.split("=", 1)[0] in SIDECAR_FLAGS, f"{c.source}: unknown sidecar flag {a}"
    settings = sidecar_settings(c, monkeypatch)
    for name, value in c.env().items():  # each value read as given, not dropped or coerced away
        field = name.removeprefix(ENV_PREFIX).lower()
        assert str(getattr(settings, field)).lower() == value.lower(), (c.source, name, value)


def test_checker_refuses_a_wrong_flag_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = m.Container("inline", {}, {}, {"name": m.SIDECAR_CONTAINER, "args": ["--dryrun"]}, True)
    with pytest.raises(AssertionError, match="refuses"):
        sidecar_settings(bad, monkeypatch)
    env = [{"name": ENV_PREFIX + "LISTEN_PORT", "value": "http"}]
    bad = m.Container("inline", {}, {}, {"name": m.SIDECAR_CONTAINER, "env": env}, True)
    with pytest.raises(ValueError):
        sidecar_settings(bad, monkeypatch)


# -- complete pods ----------------------------------------------------------------------------
def pod_groups(docs: list[Any], source: str) -> list[list[m.Container]]:
    groups: dict[int, list[m.Container]] = {}
    for c in m.containers(docs, source):
        groups.setdefault(id(c.pod), []).append(c)
    return [g for g in groups.values() if any(m.is_sidecar(c) for c in g)]


def check_pod(group: list[m.Container], services: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
              tmp_path: Path) -> None:
    (sidecar,) = [c for c in group if m.is_sidecar(c)]
    (engine,) = [c for c in group if "TABLETUNE_ADMIN_PORT" in c.env_names()]
    where = sidecar.source
    s = sidecar_settings(sidecar, monkeypatch)
    pod = sidecar.pod

    # Native sidecar that can never gate or block the engine.
    assert sidecar.init and sidecar.spec.get("restartPolicy") == "Always", f"{where}: not a native sidecar"
    assert "readinessProbe" not in sidecar.spec, f"{where}: a sidecar readiness probe gates the pod's"
    assert "startupProbe" not in sidecar.spec, f"{where}: a sidecar startup probe holds vLLM's start"
    assert not pod.get("readinessGates"), where
    live = sidecar.spec["livenessProbe"]
    assert live["httpGet"]["path"] == "/healthz"
    assert live.get("failureThreshold", 3) * live.get("periodSeconds", 10) >= 60, \
        f"{where}: liveness too eager"
    assert live.get("timeoutSeconds", 1) >= 2, where
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(sidecar.spec["resources"][kind]), f"{where}: sidecar {kind}"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if probe in engine.spec:  # llm-d's are upstream's; the base sets them on vLLM's /health
            path = engine.spec[probe]["httpGet"]["path"]
            assert path in ("/health", "/v1/models"), f"{where}: engine {probe} on {path}"
    if "deploy/base" in where:
        assert {"readinessProbe", "livenessProbe"} <= set(engine.spec)
        assert engine.spec["readinessProbe"]["httpGet"]["path"] == "/health"

    # The sidecar's own server: one port number everywhere, reachable by Prometheus.
    assert s.listen_host == "0.0.0.0", f"{where}: Prometheus cannot scrape 127.0.0.1 in a pod"
    ports = [p for p in sidecar.spec["ports"] if p["containerPort"] == s.listen_port]
    assert len(ports) == 1, f"{where}: listen_port {s.listen_port} is not the sidecar's containerPort"
    named = ports[0]
    assert sidecar.port(live["httpGet"]["port"]) == s.listen_port
    for svc in services:
        for p in svc["spec"]["ports"]:
            if p["targetPort"] == named["name"] or p["targetPort"] == s.listen_port:
                assert p["port"] == s.listen_port

    # Engine URL and admin URL: loopback, the engine's port, the plugin's admin port.
    engine_url, admin_url = urlsplit(s.engine_url), urlsplit(s.admin_url)
    assert engine_url.hostname == LOOPBACK, where
    env = engine.env()
    if admin_url.scheme == "unix":  # the plugin's socket, on one emptyDir both containers mount
        assert admin_url.path == env["TABLETUNE_ADMIN_UDS"], where
        (m_side, v_side), (m_eng, v_eng) = (c.mount_for(admin_url.path) for c in (sidecar, engine))
        assert v_side["name"] == v_eng["name"] and "emptyDir" in v_side, where
        assert m_side["mountPath"] == m_eng["mountPath"] and not m_side.get("readOnly"), where
    else:
        assert admin_url.hostname == LOOPBACK and admin_url.port == ADMIN_PORT, where
    args = engine.spec.get("args")
    if engine.spec.get("ports"):
        assert engine_url.port in [p["containerPort"] for p in engine.spec["ports"]], where
    if args and m.arg_value(args, "--port"):
        assert int(m.arg_value(args, "--port") or 0) == engine_url.port
    assert int(env["TABLETUNE_ADMIN_PORT"]) == ADMIN_PORT
    assert env.get("TABLETUNE_ADMIN_HOST", LOOPBACK) == LOOPBACK, f"{where}: admin endpoint off loopback"
    for c in group:
        assert ADMIN_PORT not in [p["containerPort"] for p in c.spec.get("ports", [])], where
    for svc in services:
        assert ADMIN_PORT not in [p["port"] for p in svc["spec"]["ports"]], f"{where}: admin port exposed"

    # One Secret, one key, for both ends of the admin endpoint.
    assert s.admin_token_file is not None and s.admin_token is None
    secrets = []
    for c, path in ((sidecar, str(s.admin_token_file)), (engine, env["TABLETUNE_ADMIN_TOKEN_FILE"])):
        mount, volume = c.mount_for(path)
        assert mount.get("readOnly"), f"{where}: token mount writable"
        item = path[len(mount["mountPath"].rstrip("/")) + 1:]
        keys = {i["path"]: i["key"] for i in volume["secret"].get("items", [])} or {item: item}
        secrets.append((volume["secret"]["secretName"], keys[item]))
    assert secrets[0] == secrets[1], f"{where}: sidecar and engine read different tokens {secrets}"
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    plugin = plugin_from_env({**{k: v for k, v in env.items() if k.startswith("TABLETUNE_")},
                              "TABLETUNE_ADMIN_TOKEN_FILE": str(token)})
    assert (plugin.admin_port, plugin.admin_host, plugin.admin_token) == (ADMIN_PORT, LOOPBACK, "t0ken")

    # The profile from the ConfigMap; the engine's speculative config from the same ConfigMap.
    mount, volume = sidecar.mount_for(str(s.profile))
    assert mount.get("readOnly")
    item = str(s.profile)[len(mount["mountPath"].rstrip("/")) + 1:]
    assert {i["path"]: i["key"] for i in volume["configMap"]["items"]}[item] == "profile.json"
    spec_env = [e for e in engine.spec["env"] if e["name"] == "SPECULATIVE_CONFIG"]
    assert spec_env and spec_env[0]["valueFrom"]["configMapKeyRef"] == {
        "name": volume["configMap"]["name"], "key": "speculative-config.json"}
    if args is not None:
        assert "--speculative-config=$(SPECULATIVE_CONFIG)" in args, f"{where}: engine ignores the profile"
        served = m.arg_value(args, "--served-model-name") or args[0]
        assert s.model_name == served, \
            f"{where}: sidecar reads model_name={s.model_name}, vLLM serves {served}"


@pytest.mark.parametrize("source", COMPLETE_POD_FILES)
def test_pod_files_agree(source: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    docs = m.load_docs(m.ROOT / source)
    services = [d for p in m.yaml_files() for d in m.load_docs(p)
                if isinstance(d, dict) and d.get("kind") == "Service"]
    groups = pod_groups(docs, source)
    assert len(groups) == 1
    check_pod(groups[0], services, monkeypatch, tmp_path)


def test_rendered_pods_agree(renders: dict[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch,
                             tmp_path: Path) -> None:
    checked = 0
    for name, docs in renders.items():
        services = [d for d in docs if d["kind"] == "Service"]
        for group in pod_groups(docs, f"render of {name}"):
            check_pod(group, services, monkeypatch, tmp_path)
            checked += 1
    assert checked == 5  # base, live, dry-run, live+servicemonitor, llm-d


# -- the profile and what the engine starts with ----------------------------------------------
@pytest.mark.parametrize("folder", PROFILE_DIRS, ids=lambda p: str(p.relative_to(m.DEPLOY)))
def test_speculative_config_is_the_profiles(folder: Path) -> None:
    profile = load_profile(folder / "profile.json")
    assert profile.table is not None, "a profile with a chosen table"
    table = Table.from_list(profile.table)
    check_for_engine(table, profile.K, profile.engine.max_num_seqs)
    spec = json.loads((folder / "speculative-config.json").read_text(encoding="utf-8"))
    expected = profile.speculative_config(table)
    assert {k: spec.get(k) for k in expected} == expected, (
        f"{folder}/speculative-config.json is not the profile's; regenerate it (deploy/README.md)")


def test_base_engine_matches_its_profile() -> None:
    profile = load_profile(m.DEPLOY / "base/profile/profile.json")
    (engine,) = [c for c in m.containers(m.load_docs(m.DEPLOY / "base/deployment.yaml"), "base")
                 if not m.is_sidecar(c)]
    args = engine.spec["args"]
    assert args[0] == profile.engine.model
    assert int(m.arg_value(args, "--max-num-seqs") or 0) == profile.engine.max_num_seqs

@pytest.mark.parametrize(("pod_file", "profile_dir"), [("base/deployment.yaml", "base/profile"),
                         ("llm-d/tabletune/patch-decode.yaml", "llm-d/tabletune/profile")])
def test_sidecar_accepts_its_profile(pod_file: str, profile_dir: str) -> None:
    """The sidecar refuses at start a profile for another model (sidecar/profile_fit.py)."""
    profile = load_profile(m.DEPLOY / profile_dir / "profile.json")
    (sidecar,) = [c for c in m.containers(m.load_docs(m.DEPLOY / pod_file), pod_file) if m.is_sidecar(c)]
    assert mismatches(profile, None, None, sidecar.env()["TABLETUNE_SIDECAR_MODEL_NAME"]) == []


# -- the tuning Job ---------------------------------------------------------------------------
def _job() -> m.Container:
    (job,) = m.containers(m.load_docs(m.DEPLOY / "jobs/tune-job.yaml"), "tune-job")
    return job


def _expanded_args(c: m.Container) -> list[str]:
    env = c.env()
    return [re.sub(r"\$\((\w+)\)", lambda g: env[g.group(1)], a) for a in c.spec["args"]]


def test_job_tunes_what_the_base_serves() -> None:
    job, profile = _job(), load_profile(m.DEPLOY / "base/profile/profile.json")
    args = _expanded_args(job)
    assert m.arg_value(args, "--model") == profile.engine.model
    assert m.arg_value(args, "--method") == profile.engine.method
    assert int(m.arg_value(args, "--num-speculative-tokens") or 0) == profile.K
    assert int(m.arg_value(args, "--max-num-seqs") or 0) == profile.engine.max_num_seqs
    out = m.arg_value(args, "--out")
    assert out is not None and Path(out).name == "profile.json"
    job.mount_for(out)


def test_job_flags_are_the_tuners() -> None:
    ap = cli_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    assert "tune" in sub.choices, "`tabletune tune` is missing from tabletune/cli.py"
    job = _job()
    assert job.spec["command"] == ["tabletune", "tune"]
    try:
        ap.parse_args(["tune", *_expanded_args(job)])
    except SystemExit:
        raise AssertionError(f"`tabletune tune` refuses {_expanded_args(job)}") from None
