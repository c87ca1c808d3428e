"""A table in each engine's form means the same draft length at every batch size."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tuner.schedules import trtllm_draft_len, trtllm_schedule, write
from tuner.core.table import Table


def test_the_trtllm_example_from_its_own_docs() -> None:
    schedule = trtllm_schedule(Table.from_list([[1, 4, 4], [5, 8, 2], [9, 32, 1]]), 32)
    assert schedule == {1: 4, 4: 4, 8: 2, 32: 1}
    assert [trtllm_draft_len(schedule, b) for b in (1, 4, 5, 8, 9, 32, 33)] == [4, 4, 2, 2, 1, 1, 0]


@given(st.lists(st.integers(0, 4), min_size=1, max_size=64))
def test_every_batch_size_gets_the_same_k_in_both_forms(ks: list[int]) -> None:
    table = Table.from_dense(ks)
    n = len(ks)
    schedule = trtllm_schedule(table, n)
    assert all(trtllm_draft_len(schedule, b) == table.k_at(b) for b in range(1, n + 1))


def test_write_names_both_forms() -> None:
    table = Table.from_list([[1, 8, 3], [9, 16, 1]])
    cfg = {"method": "ngram", "num_speculative_tokens": 3,
           "num_speculative_tokens_per_batch_size": table.to_list()}
    assert write("vllm", table, cfg, 16)["num_speculative_tokens_per_batch_size"] == table.to_list()
    trt = write("trtllm", table, cfg, 16)
    assert trt["speculative_config"] == {"max_draft_len": 3, "draft_len_schedule": {1: 3, 8: 3, 16: 1}}
