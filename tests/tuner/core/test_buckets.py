"""The batch-size buckets (tuner/core/buckets.py): every B falls in exactly one bucket of each
scheme, and a bucket's rows are the B it holds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tuner.core.buckets import band, band_rows, step_bucket, step_bucket_rows


def test_step_buckets_are_exact_to_16_then_8_wide() -> None:
    assert [step_bucket(b) for b in (1, 16, 17, 24, 25)] == [1, 16, 24, 24, 32]


def test_bands_double_to_16_then_follow_the_step_buckets() -> None:
    assert [band(b) for b in (1, 2, 3, 4, 5, 8, 9, 16, 17, 24, 25)] == [1, 2, 4, 4, 8, 8, 16, 16,
                                                                         24, 24, 32]


@pytest.mark.parametrize(("bucket_of", "rows_of"), [(step_bucket, step_bucket_rows),
                                                    (band, band_rows)])
def test_each_batch_size_is_in_the_rows_of_its_own_bucket_only(
        bucket_of: Callable[[int], int], rows_of: Callable[[int, int], range]) -> None:
    max_b = 256
    for b in range(1, max_b + 1):
        holders = {bucket_of(x) for x in range(1, max_b + 1) if b in rows_of(bucket_of(x), max_b)}
        assert holders == {bucket_of(b)}


def test_rows_are_cut_at_max_num_seqs() -> None:
    assert list(step_bucket_rows(256, 250)) == [249, 250]
    assert list(band_rows(256, 250)) == [249, 250]
    assert list(step_bucket_rows(8, 4)) == [4]  # a bucket past the engine's last B: its last row
