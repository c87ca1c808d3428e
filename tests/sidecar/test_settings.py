"""The sidecar's settings and their documentation (docs/sidecar.md) cannot drift apart."""

from __future__ import annotations

from pathlib import Path

from sidecar.settings import SidecarSettings, flags_table

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
