"""Bench policies that name tables (benchmarks/policies.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.policies import policy_tables, unknown_policies
from tests.sidecar.fake_engine import make_profile
from tuner.core.errors import InvalidInput


def test_tuned_of_names_another_profiles_table_of_the_same_engine(tmp_path: Path) -> None:
    this = make_profile()
    make_profile().model_copy(update={"table": [[1, 16, 1]]}).save(tmp_path / "older.json")
    name = f"tuned-of:{tmp_path / 'older.json'}"
    assert policy_tables(this, [name])[name].to_list() == [[1, 16, 1]]
    assert unknown_policies(this, [name]) == []
    make_profile(max_num_seqs=32).model_copy(update={"table": [[1, 32, 1]]}).save(tmp_path / "big.json")
    with pytest.raises(InvalidInput, match="max_num_seqs=32, but this profile has K=3, max_num_seqs=16"):
        policy_tables(this, [f"tuned-of:{tmp_path / 'big.json'}"])


def test_sidecar_from_tuned_starts_from_the_profiles_table_and_needs_one() -> None:
    from benchmarks.policies import start_table
    this = make_profile().model_copy(update={"table": [[1, 8, 3], [9, 16, 1]]})
    assert unknown_policies(this, ["sidecar-from-tuned"]) == []
    assert start_table("sidecar-from-tuned", policy_tables(this)).to_list() == [[1, 8, 3], [9, 16, 1]]
    untuned = this.model_copy(update={"table": None})
    assert unknown_policies(untuned, ["sidecar-from-tuned", "sidecar-from-quarter"]) == ["sidecar-from-tuned"]
