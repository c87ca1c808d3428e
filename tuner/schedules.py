"""One schedule, more engines: a table written in the form each engine takes (pure).

- vLLM: `speculative_config.num_speculative_tokens_per_batch_size = [[start_bs, end_bs, K], ...]`
  (inclusive ranges; gaps and the tail carry the last K forward; tuner/core/table.py).
- TensorRT-LLM (PyTorch backend): `speculative_config.draft_len_schedule = {batch_size: draft_len}`.
  Since TensorRT-LLM PR #10860 (merged March 2026, `tensorrt_llm/_torch/speculative/utils.py`
  `get_draft_len_for_batch_size`) a key is the LAST batch size of its range: the draft length
  of batch size B is the value of the first key >= B, and batch sizes above the largest key
  draft 0 (speculation off, implicit). So {4: 4, 8: 2, 32: 1} is 1-4: 4, 5-8: 2, 9-32: 1, 33+: 0.
  Its config validator (`llm_args.py`) has required a key 1 whose value equals max_draft_len;
  under the upper-bound reading a key 1 only restates B=1's own length, so the schedule below
  always carries it (and that validator then also needs B=1 to draft max_draft_len). Its CUDA
  graphs are captured per (batch size, draft length) pair, so list the keys in
  `cuda_graph_config.batch_sizes` too.
- SGLang has no per-batch-size setting: its adaptive speculative decoding (EAGLE/EAGLE3 with
  topk 1) picks `speculative_num_steps` from a few pre-built tiers by an EMA of the accept
  length, not by batch size (docs.sglang.io, "Adaptive speculative decoding"). Nothing to write.
"""

from __future__ import annotations

from typing import Any

from tuner.core.table import Table

__all__ = ["FORMATS", "trtllm_draft_len", "trtllm_schedule", "write"]

FORMATS = ("vllm", "trtllm")


def trtllm_schedule(table: Table, max_num_seqs: int) -> dict[int, int]:
    """{last batch size of a range: its draft length}, covering 1..max_num_seqs, plus key 1."""
    dense = table.dense(max_num_seqs, max(k for _, _, k in table.ranges) or 1)
    ranges = Table.from_dense(dense[1:]).to_list()  # gaps and the tail resolved as vLLM does
    schedule = {1: ranges[0][2]}
    schedule.update({end: k for _, end, k in ranges})
    return schedule


def trtllm_draft_len(schedule: dict[int, int], batch_size: int) -> int:
    """TensorRT-LLM's lookup (the first key >= batch_size; 0 above the largest key)."""
    for key in sorted(schedule):
        if key >= batch_size:
            return schedule[key]
    return 0


def write(fmt: str, table: Table, speculative_config: dict[str, Any],
          max_num_seqs: int) -> dict[str, Any]:
    """The table in one engine's form (`tabletune table --format`)."""
    if fmt == "vllm":
        return {"num_speculative_tokens_per_batch_size": table.to_list(),
                "speculative_config": speculative_config}
    if fmt == "trtllm":
        schedule = trtllm_schedule(table, max_num_seqs)
        return {"draft_len_schedule": schedule,
                "speculative_config": {"max_draft_len": speculative_config["num_speculative_tokens"],
                                       "draft_len_schedule": schedule},
                "cuda_graph_batch_sizes_to_include": sorted(schedule)}
    raise ValueError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")
