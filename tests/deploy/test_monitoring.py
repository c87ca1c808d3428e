"""deploy/base/monitoring: the rule file passes promtool's own check and unit tests, the
PrometheusRule wraps exactly it, and every series the rules and the dashboard name is one the
project exports (the real-scrape check: tests/test_prometheus_engine.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from tests.deploy import manifests as m

RULES = m.MONITORING / "rules.yml"
DASHBOARD = m.MONITORING / "dashboard.json"
SERIES = re.compile(r"\b(?:tabletune[_:][A-Za-z0-9_:]*|vllm:[A-Za-z0-9_:]*)")
promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                              reason="promtool missing: `make setup` installs Debian's prometheus")


def exprs() -> list[str]:
    """Every PromQL expression in the rules and the dashboard (panels, annotations, variables)."""
    rules = yaml.safe_load(RULES.read_text())
    out = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    dash = json.loads(DASHBOARD.read_text())
    out += [t["expr"] for p in dash["panels"] for t in p["targets"]]
    out += [a["expr"] for a in dash["annotations"]["list"]]
    out += [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return out


def named_series() -> set[str]:
    return {name for e in exprs() for name in SERIES.findall(e)}


@promtool
def test_promtool_checks_and_unit_tests_the_rules() -> None:
    for args in (["check", "rules", str(RULES)], ["test", "rules", "rules.test.yml"]):
        proc = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120,
                              cwd=m.MONITORING)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "SUCCESS" in proc.stdout + proc.stderr


def test_the_prometheus_rule_wraps_exactly_the_rule_file() -> None:
    (rule,) = m.load_docs(m.DEPLOY / "base" / "prometheusrule.yaml")
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_every_alert_says_what_to_do() -> None:
    rules = yaml.safe_load(RULES.read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert {a["alert"] for a in alerts} == {
        "TableTuneSidecarNotReady", "TableTuneScrapesFailing", "TableTuneStepTimeDrift",
        "TableTuneGuardrailRollback", "TableTuneResumeAcceptanceLow", "TableTunePluginStale"}
    for a in alerts:
        assert a["labels"]["severity"] in ("info", "warning", "critical")
        assert a["annotations"]["summary"] and len(a["annotations"]["description"]) > 40


def test_the_dashboard_names_only_series_the_project_exports() -> None:
    recorded = {r["record"] for g in yaml.safe_load(RULES.read_text())["groups"]
                for r in g["rules"] if "record" in r}
    source = (m.ROOT / "sidecar" / "metrics.py").read_text() + (m.ROOT / "vllm_patch" /
                                                                "metrics.py").read_text()
    exported = set(re.findall(r'"(tabletune_[a-z_]+|vllm:[a-z_]+)"', source))
    counters = {n + "_total" for n in exported}
    vllm_own = {"vllm:num_requests_running", "vllm:generation_tokens_total"}
    unknown = named_series() - recorded - exported - counters - vllm_own
    assert not unknown, unknown
