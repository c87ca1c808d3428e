from __future__ import annotations

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st
from vllm.v1.spec_decode.dynamic.utils import (
    build_dynamic_sd_schedule_lookup,
    validate_and_normalize_dynamic_sd_schedule,
)

from tuner.core.errors import InvalidInput, InvalidTable, TableTuneError
from tuner.core.table import Table, check_for_engine, documented_table, fit_to_engine, shrink

DOC = [[1, 64, 3], [65, 128, 1], [129, 512, 0]]


# --- strategies -------------------------------------------------------------------------

@st.composite
def valid_ranges(draw: st.DrawFn) -> list[list[int]]:
    """Sorted, non-overlapping ranges starting at 1, possibly with gaps between them."""
    ranges = []
    start = 1
    for _ in range(draw(st.integers(1, 6))):
        length = draw(st.integers(1, 40))
        ranges.append([start, start + length - 1, draw(st.integers(0, 10))])
        start += length + draw(st.sampled_from([0, 0, 1, 5, 30]))
    return ranges


engine = st.tuples(st.integers(1, 200), st.integers(1, 8))  # max_num_seqs, num_spec_tokens


# --- construction and errors ------------------------------------------------------------

def test_list_round_trip() -> None:
    table = Table.from_list(DOC)
    assert table.ranges == ((1, 64, 3), (65, 128, 1), (129, 512, 0))
    assert table.to_list() == DOC
    assert Table.parse_list(table.to_list()) == table


def test_table_is_frozen_and_forbids_extra() -> None:
    table = Table.from_list(DOC)
    with pytest.raises(pydantic.ValidationError):
        table.ranges = ()
    with pytest.raises(pydantic.ValidationError):
        Table(ranges=((1, 2, 3),), extra=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(("ranges", "message"), [
    ([], "ranges: empty; give at least one [start_bs, end_bs, K] range starting at 1"),
    ([[1, 80, 3], [65, 100, 1]],
     "ranges[1]: start_bs=65 overlaps the previous range ending at 80; "
     "ranges must not overlap"),
    ([[1, 64, 3], [65, 128, 1], [65, 80, 0]],
     "ranges[2]: start_bs=65 overlaps the previous range ending at 128; "
     "ranges must not overlap"),
    ([[2, 8, 1]], "ranges[0]: start_bs=2 but the first range must start at 1"),
    ([[0, 8, 1]], "ranges[0]: start_bs=0 is below 1"),
    ([[1, 8, 1], [20, 10, 1]], "ranges[1]: start_bs=20 > end_bs=10"),
    ([[1, 8, -1]], "ranges[0]: K=-1 is negative"),
    ([[1, 8, 1], [30, 40, 1], [10, 20, 2]],
     "ranges[2]: start_bs=10 comes after start_bs=30 of ranges[1]; sort the ranges"),
    ([[1, "x", 3]], "ranges[0][1]: Input should be a valid integer"),
    ([[1, 2]], "ranges[0][2]: Field required"),
    ("1-64:3", "ranges: got str"),
    ({"ranges": []}, "ranges: got dict"),
])
def test_invalid_tables_name_index_value_and_fix(ranges: object, message: str) -> None:
    with pytest.raises(InvalidTable) as info:
        Table.parse_list(ranges)
    assert str(info.value).startswith(message)
    assert isinstance(info.value, TableTuneError) and isinstance(info.value, ValueError)


def test_pydantic_callers_get_a_validation_error_with_the_same_message() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        Table(ranges=((1, 80, 3), (65, 100, 1)))
    assert "ranges[1]: start_bs=65 overlaps the previous range ending at 80" in str(info.value)
    assert isinstance(info.value, ValueError)


# --- lookup semantics -------------------------------------------------------------------

def test_dense_matches_vllm_docs_example() -> None:
    dense = Table.from_list(DOC).dense(max_num_seqs=200, num_speculative_tokens=3)
    assert len(dense) == 201 and dense[0] == 0
    assert dense[1] == dense[64] == 3 and dense[65] == dense[128] == 1 and dense[129] == 0


def test_dense_carries_k_over_gaps_and_tail_and_clamps() -> None:
    table = Table.from_list([[1, 16, 3], [32, 128, 2]])
    dense = table.dense(max_num_seqs=200, num_speculative_tokens=2)
    assert dense[17:32] == [2] * 15  # K=3 carried, then clamped to 2
    assert dense[129:] == [2] * 72
    assert table.dense(max_num_seqs=10, num_speculative_tokens=5) == [0] + [3] * 10


def test_dense_rejects_bad_engine_settings() -> None:
    table = Table.from_list(DOC)
    with pytest.raises(InvalidInput, match="max_num_seqs=0 must be >= 1"):
        table.dense(0, 3)
    with pytest.raises(InvalidInput, match="num_speculative_tokens=0 must be >= 1"):
        table.dense(8, 0)


def test_k_at() -> None:
    table = Table.from_list([[1, 16, 3], [32, 128, 2]])
    assert [table.k_at(b) for b in (1, 16, 17, 31, 32, 128, 5000)] == [3, 3, 3, 3, 2, 2, 2]
    assert table.k_at(1, num_speculative_tokens=1) == 1
    with pytest.raises(InvalidInput, match="batch_size=0"):
        table.k_at(0)


def test_from_dense_compacts_runs_and_accepts_vllm_lookup() -> None:
    assert Table.from_dense([3, 3, 1, 1, 1, 0]).to_list() == [[1, 2, 3], [3, 5, 1], [6, 6, 0]]
    lookup = Table.from_list(DOC).dense(100, 3)
    assert Table.from_dense(lookup, start=0).to_list() == [[1, 64, 3], [65, 100, 1]]
    with pytest.raises(InvalidTable, match="ranges: empty"):
        Table.from_dense([])
    with pytest.raises(InvalidTable, match="must start at 1"):
        Table.from_dense([1, 2], start=3)


def test_documented_table_fits_the_engine() -> None:
    assert documented_table(3, 512).to_list() == DOC
    assert documented_table(3, 1024).to_list() == [[1, 64, 3], [65, 128, 1], [129, 1024, 0]]
    assert documented_table(2, 100).to_list() == [[1, 64, 2], [65, 100, 1]]
    assert documented_table(5, 64).to_list() == [[1, 64, 3]]
    assert documented_table(3, 65).to_list() == [[1, 64, 3], [65, 65, 1]]


def test_shrink_is_the_papers_wrong_table() -> None:
    assert shrink(documented_table(3, 256)).to_list() == [[1, 16, 3], [17, 32, 1], [33, 256, 0]]
    assert shrink(Table.from_list([[1, 2, 3], [3, 8, 1]])).to_list() == [[1, 8, 1]]
    with pytest.raises(InvalidInput, match="factor=0"):
        shrink(documented_table(3, 256), factor=0)


def test_check_for_engine() -> None:
    table = Table.from_list([[1, 8, 3], [9, 16, 4], [17, 32, 2]])
    with pytest.raises(InvalidTable) as info:
        check_for_engine(table, num_speculative_tokens=3, max_num_seqs=32)
    assert str(info.value) == ("ranges[1]: K=4 exceeds num_speculative_tokens=3; lower K or "
                               "restart vLLM with a larger num_speculative_tokens")
    check_for_engine(table, num_speculative_tokens=4, max_num_seqs=32)
    # ranges vLLM cuts off never reach the engine
    check_for_engine(table, num_speculative_tokens=3, max_num_seqs=8)
    with pytest.raises(InvalidTable, match=r"ranges\[2\]: K=2 is not in allowed_k=\[0, 3, 4\];"
                                           " on the GPU V2 runner only the K values"):
        check_for_engine(table, num_speculative_tokens=4, max_num_seqs=32, allowed_k={0, 3, 4})


def test_fit_to_engine_cuts_what_vllm_cuts() -> None:
    # the tables of issue #39 item 3, on a max_num_seqs=32 engine
    fitted = fit_to_engine(Table.from_list([[1, 33, 1]]), 32)
    assert fitted.table.to_list() == [[1, 32, 1]]
    assert fitted.clipped == ("fitted to max_num_seqs=32 as vLLM does: ranges[0] end_bs=33 cut "
                              "to 32")
    fitted = fit_to_engine(Table.from_list([[1, 8, 3], [9, 10**9, 1]]), 32)
    assert fitted.table.to_list() == [[1, 8, 3], [9, 32, 1]]
    assert fitted.clipped is not None and "ranges[1] end_bs=1000000000 cut to 32" in fitted.clipped
    fitted = fit_to_engine(Table.from_list([[b, b, 1] for b in range(1, 4096)]), 32)
    assert fitted.table.to_list() == [[b, b, 1] for b in range(1, 33)]
    assert fitted.clipped == ("fitted to max_num_seqs=32 as vLLM does: ranges[32..4094] dropped "
                              "(start_bs > 32)")
    fitted = fit_to_engine(Table.from_list([[1, 32, 1], [33, 40, 9]]), 32)
    assert fitted.table.to_list() == [[1, 32, 1]]
    assert fitted.clipped is not None and fitted.clipped.endswith("ranges[1] dropped (start_bs > 32)")
    # both cuts at once; a table that fits comes back as it is, with nothing to say
    fitted = fit_to_engine(Table.from_list(DOC), 100)
    assert fitted.table.to_list() == [[1, 64, 3], [65, 100, 1]]
    assert fitted.clipped == ("fitted to max_num_seqs=100 as vLLM does: ranges[1] end_bs=128 cut "
                              "to 100; ranges[2] dropped (start_bs > 100)")
    table = Table.from_list([[1, 8, 3], [20, 30, 1]])  # a gap, and a tail short of max_num_seqs
    assert fit_to_engine(table, 32) == (table, None)
    assert fit_to_engine(table, 30) == (table, None)
    with pytest.raises(InvalidInput, match="max_num_seqs=0"):
        fit_to_engine(table, 0)


# --- properties -------------------------------------------------------------------------

@given(valid_ranges(), engine)
def test_fit_to_engine_keeps_vllms_lookup(ranges: list[list[int]], eng: tuple[int, int]) -> None:
    max_num_seqs, num_speculative_tokens = eng
    table = Table.from_list(ranges)
    fitted = fit_to_engine(table, max_num_seqs)
    assert fitted.table.dense(max_num_seqs, num_speculative_tokens) == \
        build_dynamic_sd_schedule_lookup(ranges, max_num_seqs, num_speculative_tokens)
    assert fitted.table.ranges[-1][1] <= max_num_seqs and len(fitted.table.ranges) <= max_num_seqs
    assert (fitted.clipped is None) == (fitted.table == table)
    assert fitted.table.ranges == table.ranges[:len(fitted.table.ranges) - 1] + fitted.table.ranges[-1:]

@given(valid_ranges(), engine)
def test_dense_compact_round_trip(ranges: list[list[int]], eng: tuple[int, int]) -> None:
    max_num_seqs, num_speculative_tokens = eng
    dense = Table.from_list(ranges).dense(max_num_seqs, num_speculative_tokens)
    back = Table.from_dense(dense[1:])
    assert back.ranges[-1][1] == max_num_seqs
    assert back.dense(max_num_seqs, num_speculative_tokens) == dense


@given(valid_ranges(), engine)
def test_dense_covers_every_batch_size(ranges: list[list[int]], eng: tuple[int, int]) -> None:
    max_num_seqs, num_speculative_tokens = eng
    table = Table.from_list(ranges)
    dense = table.dense(max_num_seqs, num_speculative_tokens)
    assert len(dense) == max_num_seqs + 1
    assert all(0 <= k <= num_speculative_tokens for k in dense[1:])
    assert dense[1:] == [table.k_at(b, num_speculative_tokens) for b in range(1, max_num_seqs + 1)]


@given(valid_ranges(), engine)
def test_dense_equals_vllm(ranges: list[list[int]], eng: tuple[int, int]) -> None:
    max_num_seqs, num_speculative_tokens = eng
    ours = Table.from_list(ranges).dense(max_num_seqs, num_speculative_tokens)
    assert ours == build_dynamic_sd_schedule_lookup(ranges, max_num_seqs, num_speculative_tokens)


triples = st.lists(st.tuples(st.integers(-2, 30), st.integers(-2, 30), st.integers(-2, 5)),
                   max_size=5)


@given(st.one_of(triples, valid_ranges().map(lambda rs: [tuple(r) for r in rs])))
def test_validator_accepts_exactly_what_vllm_accepts(ranges: list[tuple[int, int, int]]) -> None:
    ranges = sorted(ranges, key=lambda rng: rng[0])  # vLLM sorts; we require sorted input
    try:
        validate_and_normalize_dynamic_sd_schedule([list(rng) for rng in ranges])
        vllm_accepts = True
    except ValueError:
        vllm_accepts = False
    try:
        Table.parse_list([list(rng) for rng in ranges])
        we_accept = True
    except InvalidTable:
        we_accept = False
    assert we_accept == vllm_accepts


def test_every_k_table_holds_each_k_once_and_covers_the_engine() -> None:
    from tuner.core.table import every_k_table

    t = every_k_table(3, 16)
    assert t.to_list() == [[1, 1, 3], [2, 2, 2], [3, 3, 1], [4, 16, 0]]
    assert every_k_table(3, 2).to_list() == [[1, 1, 3], [2, 2, 2]]  # no room for every k
