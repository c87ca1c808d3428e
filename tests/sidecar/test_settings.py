"""The sidecar's settings and their documentation (docs/sidecar.md) cannot drift apart."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sidecar.settings import (HELP_GROUPS, USAGE, SidecarSettings, add_arguments, flags_table,
                             from_args)
from tuner.core.errors import InvalidInput

DOC = Path(__file__).resolve().parents[2] / "docs" / "sidecar.md"


def test_the_flags_table_in_the_docs_is_generated_from_the_settings() -> None:
    table = flags_table()
    assert len(table.splitlines()) == len(SidecarSettings.model_fields) + 2
    assert table in DOC.read_text(encoding="utf-8"), (
        "docs/sidecar.md's flags table differs from SidecarSettings; paste "
        "`python -c 'from sidecar.settings import flags_table; print(flags_table())'`")


def test_operating_notes_name_every_probe_and_event() -> None:
    doc = DOC.read_text(encoding="utf-8")
    for word in ("## Operating the sidecar", "/healthz", "/readyz", "foreign_table",
                 "foreign_table_hold_ended", "tabletune_stats_age_seconds",
                 "tabletune_engine_started_at_seconds", "incomplete", "--foreign-hold-s"):
        assert word in doc, word


def test_a_missing_profile_says_so_in_one_line_without_the_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TABLETUNE_SIDECAR_PROFILE", raising=False)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(InvalidInput) as got:
        from_args(parser.parse_args(["--engine-url", "http://127.0.0.1:1"]))
    assert str(got.value) == ("--profile (env TABLETUNE_SIDECAR_PROFILE) is required; "
                              "see `tabletune sidecar --help`")


def test_a_rotation_past_the_exploration_budget_is_refused_naming_the_fix() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = ["--profile", "p.json", "--engine-url", "http://127.0.0.1:1", "--explore-every", "10",
            "--admin-token", "sekrit"]
    with pytest.raises(InvalidInput) as got:
        from_args(parser.parse_args(args))
    # the plugin charges the rotation to explore_share: 30% of the steps would silently be 2%
    assert str(got.value).startswith("explore_every=10 with explore_run=3 explores 30.0% of the "
                                     "steps, more than explore_share=0.02 lets the plugin run: "
                                     "use explore_every of at least 150")
    assert "sekrit" not in str(got.value)  # a rule across fields shows no input
    assert from_args(parser.parse_args(args + ["--explore-share", "0.3"])).explore_every == 10
    with pytest.raises(InvalidInput, match="use explore_every=0"):
        from_args(parser.parse_args(args[:4] + ["--explore-share", "0"]))


def test_help_groups_every_flag_once_with_what_a_user_sets_first() -> None:
    named = [name for _, members in HELP_GROUPS for name, _ in members]
    assert sorted(named) == sorted(SidecarSettings.model_fields) and len(named) == len(set(named))
    title, first = HELP_GROUPS[0]
    assert {"profile", "model_name", "admin_url", "dry_run"} <= {name for name, _ in first}
    parser = argparse.ArgumentParser(usage=USAGE)
    add_arguments(parser)
    text = parser.format_help()
    body = text.split("\n\n", 1)[1]  # after the usage line, which names --profile too
    assert body.index(title) < body.index("--profile") < body.index("--interval-s")
    assert len(text.splitlines()) < 160  # it was 238 lines of the paper's words
