"""Replayed acceptance: validation and what each way puts into vLLM's config and the plugin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from tuner.config import TuneConfig
from tuner.prompts import repetitive
from tuner.replay import Replay
from tuner.tune import server_for


def test_plugin_replay_caps_in_the_plugin_and_leaves_vllm_alone() -> None:
    r = Replay.parse("0.75,0.55,0.4")
    assert r.by == "plugin" and r.rates == (0.75, 0.55, 0.4)
    assert r.speculative_extra() == {}
    assert r.emulator_rates() == (0.75, 0.55, 0.4)


def test_vllm_replay_uses_synthetic_sampling_and_passes_the_plugin_through() -> None:
    r = Replay.parse("0.75,0.55,0.4", by="vllm")
    assert r.speculative_extra() == {"rejection_sample_method": "synthetic",
                                     "synthetic_acceptance_rates": [0.75, 0.55, 0.4]}
    # both at once would draw twice: P(first i accepted) = a_i^2
    assert r.emulator_rates() == (1.0, 1.0, 1.0)
    assert "synthetic" in r.describe()


@pytest.mark.parametrize("text, message", [
    ("0.7,x", "expected rates like"),
    ("0.5,0.6", "cannot grow"),
    ("1.2", r"in \[0, 1\]"),
])
def test_bad_rates_name_the_problem(text: str, message: str) -> None:
    with pytest.raises((ValueError, ValidationError), match=message):
        Replay.parse(text)


def config(tmp_path: Path, emulate: Replay) -> TuneConfig:
    return TuneConfig(model=tmp_path, num_speculative_tokens=3, max_num_seqs=8, grid=[1, 8],
                      acceptance_prompts=repetitive(2, 100), out=tmp_path / "p.json",
                      emulate=emulate)


def test_vllm_replay_needs_one_rate_per_position(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="exactly one rate per position"):
        config(tmp_path, Replay.parse("0.7,0.5", by="vllm"))
    config(tmp_path, Replay.parse("0.7,0.5"))  # the plugin pads with the last rate


def test_tuner_servers_carry_the_synthetic_config_and_still_reject_all(tmp_path: Path) -> None:
    server = server_for(config(tmp_path, Replay.parse("0.7,0.5,0.3", by="vllm")), 2, 9999,
                        reject_all=True)
    assert server.speculative is not None
    spec = json.loads(server.speculative.to_json())
    assert spec["rejection_sample_method"] == "synthetic"
    assert spec["synthetic_acceptance_rates"] == [0.7, 0.5, 0.3]
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 8, 2]]
    assert server.env["TABLETUNE_REJECT_ALL"] == "1"  # timing still sees every draft rejected
