"""What the client benches write after every block (noharm.json, field.json) as types (issue #37
item 5): the meta both share, each bench's own fields, the calls (parts) and the typed runs.

Built by benchmarks/noharm.py and benchmarks/field.py, extended block by block by
benchmarks/client_bench.py, parsed back by `--resume` and by every reader (the summaries,
noharm_of_field, noharm_pool). Written with exclude_unset: an older file keeps its shape (a run
from before a field was added stays without it), so every new value is built with all its fields
set (``whole``).
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from benchmarks.arm_run import BlockRun
from tuner.core.profile import EngineInfo

__all__ = ["ClientMeta", "ClientRecord", "FieldMeta", "FieldRecord", "NoharmMeta", "NoharmRecord",
           "Part", "PromptsMeta", "ShapeMeta", "SizesMeta", "parse_error", "whole"]

M = TypeVar("M", bound=BaseModel)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ShapeMeta(_Frozen):
    """A traffic shape by name and the client's flags of each of its runs."""

    name: str
    runs: list[list[str]]


class PromptsMeta(_Frozen):
    """The user's prompts file (benchmarks/traffic.Prompts)."""

    path: str
    lines: int
    own_lengths: bool
    chat_template: bool


class SizesMeta(_Frozen):
    """The flags that sized the shapes (benchmarks/traffic.Sizes)."""

    concurrency: list[int]
    rates: list[float]
    burstiness: float
    ramp: list[int]
    input_len: int
    output_len: int
    range_ratio: float
    mixed_input_len: int
    mixed_range: float
    run_s: float
    waves: int
    prompts: PromptsMeta | None = None    # absent: a file from before --prompts


class Part(BaseModel):
    """One call of the bench: its first block, why it stopped, its sidecars' logs, the blocks
    it ran and its wall time (the last two set as they become known)."""

    model_config = ConfigDict(extra="forbid")  # not frozen: filled while the call runs
    part: int
    first_block: int
    stop_reason: str
    sidecar_log: str | None = None
    watch_log: str | None = None
    blocks: int | None = None
    wall_s: float | None = None
    plain_blocks: int | None = None  # the field bench's no-speculation blocks this call ran


class ClientMeta(BaseModel):
    """What both benches record of their set-up; each adds its arms' fields."""

    model_config = ConfigDict(extra="forbid")  # not frozen: each call appends its part
    command: str
    profile: str
    model: str
    served_name: str
    engine: EngineInfo
    shapes: list[ShapeMeta]
    sizes: SizesMeta
    idle_s: float
    seed: int
    emulate: list[float] | None           # the plugin's emulated acceptance (dummy weights)
    engine_args: list[str]
    parts: list[Part]


class NoharmMeta(ClientMeta):
    """noharm.json's meta: the table both arms start from and the sidecar's command line."""

    start_table: list[list[int]]
    profile_table: list[list[int]] | None
    sidecar: list[str]


class FieldMeta(ClientMeta):
    """field.json's meta: the policies, their tables, each kind of sidecar's command line
    (None: no such policy) and the client's SLOs."""

    policies: list[str]
    tables: dict[str, list[list[int]]]
    sidecar: list[str] | None
    watch: list[str] | None = None        # absent: a file from before watch-from policies
    goodput: list[str] | None


class ClientRecord(BaseModel):
    """A client bench's record: its meta, the measured runs and the warmup's."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, serialize_by_alias=True)
    schema_: int = Field(alias="schema")
    meta: ClientMeta
    runs: list[BlockRun]
    warmup: list[BlockRun]


class NoharmRecord(ClientRecord):
    meta: NoharmMeta


class FieldRecord(ClientRecord):
    meta: FieldMeta


def whole(value: M) -> M:
    """``value`` with every field set, nested ones too, so an exclude_unset dump writes it all."""
    return type(value).model_validate(value.model_dump())


def parse_error(exc: ValidationError) -> str:
    """Why a file is not the record asked for, in one line: how many errors, and the first."""
    first = exc.errors()[0]
    return (f"{exc.error_count()} errors, the first at {'.'.join(map(str, first['loc']))}: "
            f"{first['msg']}")

