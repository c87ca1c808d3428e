"""Batch-size buckets, in one place (pure, stdlib only: the plugin imports it).

- ``step_bucket``: the key of the plugin's step counters and ring cells, exact up to 16, then
  8 wide (a bounded label count); the sidecar reads live step times by it.
- ``band``: what a paired comparison speaks for: the step buckets above 16, and 1, 2, 3-4, 5-8,
  9-16 below them (at small B requests come and go every few steps, and exact buckets would
  rarely keep a run beside its reference).

Each is named by its largest B; its rows are the batch sizes it holds, cut at max_num_seqs (a
bucket above max_num_seqs holds the last row).
"""

from __future__ import annotations

__all__ = ["band", "band_rows", "step_bucket", "step_bucket_rows"]


def step_bucket(batch_size: int) -> int:
    return batch_size if batch_size <= 16 else -(-batch_size // 8) * 8


def step_bucket_rows(bucket: int, max_b: int) -> range:
    low = bucket if bucket <= 16 else max(bucket - 7, 17)
    return range(min(low, max_b), min(bucket, max_b) + 1)


def band(batch_size: int) -> int:
    if batch_size > 16:
        return step_bucket(batch_size)
    return 1 if batch_size <= 1 else 1 << (batch_size - 1).bit_length()


def band_rows(top: int, max_b: int) -> range:
    low = top - 7 if top > 16 else top // 2 + 1
    return range(min(max(low, 1), max_b), min(top, max_b) + 1)
