"""The launcher on the real vLLM CPU engine: it starts, answers, exports counters, fails clearly."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from pydantic import ValidationError

from tests.conftest import Engine
from tests.helpers import burst
from tuner.core.errors import EngineStartError
from tuner.launcher import ServerConfig, SpeculativeSpec, launch, parse_spec, startup_cause
from tuner.prompts import repetitive
from tuner.core.scrape import parse
from tuner.core.table import Table


async def metrics(url: str) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/metrics") as r:
            return await r.text()


@pytest.mark.engine
async def test_server_answers_and_counts_drafts(engine: Engine) -> None:
    before = parse(await metrics(engine.url))
    replies = await burst(engine.url, repetitive(3, engine.vocab_size, seed=7), max_tokens=24)
    assert all(r["usage"]["completion_tokens"] == 24 for r in replies)
    after = parse(await metrics(engine.url))
    assert after.num_drafts > before.num_drafts
    assert sum(after.accepted_per_pos) > sum(before.accepted_per_pos)
    assert len(after.accepted_per_pos) == 3


@pytest.mark.parametrize("table, needle", [
    ([[1, 8, 4]], "exceeds num_speculative_tokens=3"),
    ([[1, 8, 3], [5, 16, 1]], "overlap"),
    ([[2, 8, 3]], "start"),
])
def test_bad_speculative_config_is_refused_before_start(table: list[list[int]], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ServerConfig(model=Path("unused"), max_num_seqs=16,
                     speculative=SpeculativeSpec(num_speculative_tokens=3, table=table))


def test_parse_spec_reads_vllm_json() -> None:
    spec = parse_spec('{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,'
                      '"num_speculative_tokens_per_batch_size":[[1,8,3],[9,32,1]]}')
    assert spec.table == Table.from_list([[1, 8, 3], [9, 32, 1]])
    assert '"prompt_lookup_max":4' in spec.to_json()
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        parse_spec('{"method":"ngram"}')


def test_draft_model_needs_a_drafter() -> None:
    with pytest.raises(ValidationError, match="draft_model"):
        SpeculativeSpec(method="draft_model", num_speculative_tokens=2)


@pytest.mark.engine
async def test_failed_start_names_the_cause(tmp_path: Path) -> None:
    cfg = ServerConfig(model=tmp_path / "no-such-model", log_path=tmp_path / "vllm.log",
                       speculative=SpeculativeSpec(num_speculative_tokens=2), startup_timeout_s=120)
    with pytest.raises(EngineStartError) as err:
        async with launch(cfg):
            pass
    message = str(err.value)
    assert "exited during startup" in message and "log tail" in message
    assert "no-such-model" in message


def test_startup_cause_names_the_engine_core_error_not_the_api_servers_summary(tmp_path: Path) -> None:
    # the shape of a real failed start (vLLM 0.26, V2 runner): EngineCore's traceback, then the
    # API server's own RuntimeError that only points up at it
    log = tmp_path / "vllm.log"
    log.write_text(
        "(EngineCore pid=11) ERROR 11-29 13:47:50 [core.py:1101] EngineCore failed to start.\n"
        "(EngineCore pid=11) ERROR Traceback (most recent call last):\n"
        '(EngineCore pid=11) ERROR   File "/x/vllm/utils/math_utils.py", line 22, in round_up\n'
        "(EngineCore pid=11) ERROR ZeroDivisionError: integer division or modulo by zero\n"
        "(APIServer pid=10) Traceback (most recent call last):\n"
        "(APIServer pid=10) RuntimeError: Engine core initialization failed. See root cause above."
        " Failed core proc(s): {}\n")
    assert "ZeroDivisionError: integer division" in startup_cause(log)
    log.write_text("(APIServer pid=10) RuntimeError: Engine core initialization failed. See root "
                   "cause above.\n")  # nothing better: the summary is still said
    assert "Engine core initialization failed" in startup_cause(log)
