"""The scenario a bench stands on, from its shared flags (benchmarks/scenario.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.scenario import Rig, Startup, scenario_of
from benchmarks.workload import lengths
from tuner.core.errors import InvalidInput
from tuner.core.table import Table
from tuner.engine_defaults import default_model
from tuner.replay import Replay

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


def test_a_startup_names_each_way_a_bench_starts_the_engine_otherwise(tmp_path: Path) -> None:
    rig = Rig(model=tmp_path, method="ngram", K=3, max_num_seqs=16, drafter=None,
              engine_args=("--x",), replay=Replay(rates=(0.5, 0.3, 0.1), by="vllm"), out=tmp_path)
    default = rig.server(1234)
    assert default.speculative is not None and default.speculative.table is not None
    assert default.speculative.table.to_list()[0] == [1, 1, 3] and default.extra_args == ("--x",)
    assert default.env["TABLETUNE_ADMIN_TOKEN"] == "bench-token"
    # the honor check's second engine: K=1, the replay cut to it, reject-all, no token
    second = rig.server(1, Startup(K=1, token=None, reject_all=True, emulates=False))
    assert second.speculative is not None and second.speculative.num_speculative_tokens == 1
    assert second.speculative.extra["synthetic_acceptance_rates"] == [0.5]
    assert second.env == {"TABLETUNE_ADMIN_PORT": "1", "TABLETUNE_REJECT_ALL": "1"}
    table = Table.from_list([[1, 1, 3], [2, 16, 1]])
    switch = rig.server(1, Startup(table=table, restrict_k=True))
    assert switch.speculative is not None and switch.speculative.table == table
    assert switch.env["TABLETUNE_RESTRICT_K"] == "1"
    assert rig.server(1, Startup(has_plugin=False)).env == {"VLLM_PLUGINS": "none"}
    plain = rig.server(1, Startup(is_speculative=False))
    assert plain.speculative is None and plain.env == {} and plain.extra_args == ("--x",)
