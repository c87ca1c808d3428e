"""The scenario a bench stands on, from its shared flags (benchmarks/scenario.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.scenario import scenario_of
from benchmarks.workload import lengths
from tuner.core.errors import InvalidInput
from tuner.engine_defaults import default_model

PROFILE = Path(__file__).resolve().parents[2] / "benchmarks/results/cpu-tiny/profile.json"


def test_a_scenario_holds_what_the_bench_serves(tmp_path: Path) -> None:
    args = argparse.Namespace(profile=str(PROFILE), model=None, out=str(tmp_path),
                              emulate="0.9,0.8,0.7", emulate_with="plugin")
    s = scenario_of(args, ("--no-enable-prefix-caching",))
    assert s.profile.K == 3 and s.model == default_model().target and s.drafter is None
    assert s.engine_args == ("--no-enable-prefix-caching",) and s.out == tmp_path
    assert s.replay is not None and s.replay.rates == (0.9, 0.8, 0.7)


def test_a_bench_without_a_model_or_emulation_flag_still_has_a_scenario(tmp_path: Path) -> None:
    s = scenario_of(argparse.Namespace(profile=str(PROFILE), out=str(tmp_path)), ())
    assert s.model == default_model().target and s.replay is None


def test_a_model_that_is_not_here_is_named(tmp_path: Path) -> None:
    args = argparse.Namespace(profile=str(PROFILE), model="/nonexistent/m", out=str(tmp_path))
    with pytest.raises(InvalidInput, match="--model='/nonexistent/m': no such folder"):
        scenario_of(args, ())


def test_the_request_pool_cuts_the_prompts_to_the_mixs_lengths(tmp_path: Path) -> None:
    s = scenario_of(argparse.Namespace(profile=str(PROFILE), out=str(tmp_path)),
                    ("--max-model-len", "512"))
    steady = s.requests(32, 16)
    assert {len(r.prompt) for r in steady} == {32}
    assert all(8 <= r.max_tokens <= 24 for r in steady)
    # chat draws long prompts too (up to half the model length): none is cut short at 32
    chat = s.requests(32, 16, mix="chat")
    want = lengths("chat", 32, 16, 512)
    assert [(len(r.prompt), r.max_tokens) for r in chat] == want
    assert max(len(r.prompt) for r in chat) > 32
    # one set of prompts for every bench: the same token ids, cut to length
    assert chat[0].prompt[:4] == s.prompts()[0][:4] and steady[0].prompt == s.prompts(32)[0]
