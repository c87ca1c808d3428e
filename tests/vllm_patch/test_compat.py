"""The V2 draft-decode CUDA-graph workaround (compat.py), against vLLM 0.26's own arithmetic."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from vllm_patch import compat


class Manager026:
    """CudaGraphManager._init_candidates as vLLM 0.26 computes decode query lengths under DSD
    (v1/worker/gpu/cudagraph_utils.py l.200-229): round_up(n, 0) divides by zero."""

    def __init__(self, decode_query_len: int, K: int, table: list[list[int]] | None) -> None:
        self.decode_query_len = decode_query_len
        self.vllm_config = SimpleNamespace(
            num_speculative_tokens=K,
            speculative_config=SimpleNamespace(num_speculative_tokens_per_batch_size=table))
        self.lens: list[int] = []

    def _init_candidates(self) -> None:
        table = self.vllm_config.speculative_config.num_speculative_tokens_per_batch_size
        if table is not None:
            new = self.decode_query_len - self.vllm_config.num_speculative_tokens
            lens = [k + new for _, _, k in table]
        else:
            lens = [self.decode_query_len]
        for n in lens:
            -(-8 // n)  # round_up(8, n)
        self.lens = lens


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> type[Any]:
    from vllm.v1.worker.gpu import cudagraph_utils

    fake = type("CudaGraphManager", (Manager026,), {})
    monkeypatch.setattr(cudagraph_utils, "CudaGraphManager", fake)
    assert compat.fix_v2_draft_decode_graphs() and compat.fix_v2_draft_decode_graphs()  # once
    return fake


EVERY_K = [[1, 1, 3], [2, 2, 2], [3, 3, 1], [4, 256, 0]]


def test_vllm_026_arithmetic_fails_without_the_fix() -> None:
    with pytest.raises(ZeroDivisionError):
        Manager026(1, 3, EVERY_K)._init_candidates()


def test_draft_decode_manager_captures_length_one_and_keeps_the_table(patched: type[Any]) -> None:
    m = patched(1, 3, EVERY_K)
    m._init_candidates()
    assert m.lens == [1]
    assert m.vllm_config.speculative_config.num_speculative_tokens_per_batch_size == EVERY_K


def test_target_and_draft_prefill_managers_still_capture_every_k(patched: type[Any]) -> None:
    m = patched(4, 3, EVERY_K)  # decode_query_len = K + 1
    m._init_candidates()
    assert m.lens == [4, 3, 2, 1]
    no_table = patched(1, 3, None)
    no_table._init_candidates()
    assert no_table.lens == [1]


def test_a_manager_laid_out_otherwise_runs_vllms_own_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.worker.gpu import cudagraph_utils

    class Other:  # another vLLM: no decode_query_len, no num_speculative_tokens on the config
        def __init__(self) -> None:
            self.vllm_config = SimpleNamespace(speculative_config=SimpleNamespace(
                num_speculative_tokens_per_batch_size=EVERY_K))
            self.ran = False

        def _init_candidates(self) -> None:
            self.ran = True

    monkeypatch.setattr(cudagraph_utils, "CudaGraphManager", Other)
    assert compat.fix_v2_draft_decode_graphs()
    m = Other()
    m._init_candidates()  # the wrapper must not raise into vLLM, only step aside
    assert m.ran and m.vllm_config.speculative_config.num_speculative_tokens_per_batch_size == EVERY_K
