"""The contract on the plugin's side: every reply carries exactly its model's fields, so a field
renamed on one side fails here instead of reading as the other side's default (issue 37)."""

from __future__ import annotations

import json

from pydantic import BaseModel

from tests.vllm_patch.test_admin_fuzz import new_engine
from tuner.core.admin_api import EmulationReply, ErrorReply, PolicyReply, StatsReply, TableReply
from vllm_patch.admin import (HttpError, emulation_reply, policy_reply, put_table, stats_reply,
                              table_reply)


def fields(model: type[BaseModel]) -> set[str]:
    return set(model.model_fields)


def test_every_reply_has_exactly_its_models_fields() -> None:
    engine = new_engine()
    assert set(table_reply(engine)) == fields(TableReply) - {"clipped"}  # what a PUT cut
    assert set(put_table(engine, json.dumps({"table": [[1, 16, 2]]}).encode())) == fields(TableReply)
    assert set(policy_reply(engine)) == fields(PolicyReply)
    assert set(emulation_reply(engine)) == fields(EmulationReply)
    assert set(stats_reply(engine)) == fields(StatsReply)
    error = HttpError(400, "bad", "table").body()
    assert set(error) == fields(ErrorReply) and ErrorReply.model_validate(error).field == "table"


def test_replies_parse_back_into_their_models_with_the_values_sent() -> None:
    engine = new_engine()
    table = TableReply.model_validate_json(json.dumps(table_reply(engine)))
    assert table.table == [[1, 4, 3], [5, 16, 1]] and table.version == 1
    assert table.startup_k == [1, 3] and table.max_num_seqs == 16
    stats = StatsReply.model_validate_json(json.dumps(stats_reply(engine)))
    assert stats.num_speculative_tokens == 3 and stats.model_name == "m"
