"""The demo tells what the sidecar did in words (tabletune/demo.py): a push with the evidence
behind each range it changed, a traffic change and a guardrail verdict in one line each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tabletune.demo import Narrator, describe

MEASURED = {"batch_size_start": 3, "batch_size_end": 4, "k_old": 0, "k_new": 3, "gain": 1.41,
            "gain_low": 0.88, "kept": True, "decided_by": "measured",
            "measured": {"ratio": 2.41, "low": 1.88, "high": 3.05, "pairs": 24}}
FUTILE = {"batch_size_start": 5, "batch_size_end": 8, "k_old": 3, "k_new": 0, "gain": 0.56,
          "gain_low": -0.61, "kept": True, "decided_by": "model"}  # the demo's push at a ~ 0
MODEL = {"batch_size_start": 9, "batch_size_end": 16, "k_old": 1, "k_new": 2, "gain": 0.08,
         "gain_low": 0.02, "kept": True, "decided_by": "model"}


def test_a_push_says_what_each_range_rests_on() -> None:
    d = {"outcome": "pushed", "a_hat": [0.9, 0.8, 0.7], "old_table": [[1, 32, 0]],
         "new_table": [[1, 2, 0], [3, 4, 3], [5, 32, 0]], "trigger": "measured",
         "changes": [MEASURED, MODEL, {**MODEL, "kept": False}, FUTILE]}
    assert describe(d).splitlines() == [
        "    sidecar: pushed    (measured) â=[0.90, 0.80, 0.70] table [[1, 32, 0]] -> "
        "[[1, 2, 0], [3, 4, 3], [5, 32, 0]]",
        "      B 3-4: k=0 -> k=3, measured on this engine: goodput x2.41 [1.88, 3.05] over 24 "
        "paired runs",
        "      B 9-16: k=1 -> k=2, predicted by the model (not measured): goodput x1.08, at "
        "least x1.02",
        "      B 5-8: k=3 -> k=0: k=3's extra drafts buy nothing at the acceptance measured (the "
        "model predicts goodput x1.56)"]


def test_changes_and_verdicts_are_told_in_words(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "sidecar.log"
    records = [
        {"event": "traffic change", "level": "INFO", "acceptance": {
            "position": 1, "recent": 0.31, "older": 0.74, "reference": 0.7, "drafted": 400,
            "z": -8.2}, "step_times": []},
        {"event": "guardrail verdict", "level": "INFO", "verdict": {
            "rolled_back": True, "ratio": 0.912, "judged_by": "scrapes"}},
        {"event": "live step times are slower than the profile", "level": "WARNING",
         "condition": "drift"}]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    Narrator(log).tell()
    out = capsys.readouterr().out
    assert ("traffic change: acceptance at position 1 went from 0.74 to 0.31 (z = -8.2); "
            "rebuilding from the new traffic") in out
    assert "guardrail: the push is rolled back (goodput x0.912 of before, judged by scrapes)" in out
    assert "sidecar warning: live step times are slower than the profile\n" in out
    assert "{" not in out  # no raw JSON
