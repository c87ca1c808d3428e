"""What one arm of a client bench leaves in its record (noharm.json, field.json): typed runs.

Built by benchmarks/client_arms.py, written as JSON after every block in the bench's record
(benchmarks/client_record.py), parsed back with it by the summaries, so a field renamed on one
side fails the parse instead of reading as a default on the other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from benchmarks.field_client import ClientResult
from sidecar.state import Ranges, RecentDecision

__all__ = ["ArmRun", "BlockRun", "EngineCounts", "Phase", "SidecarSeen"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EngineCounts(_Record):
    """The engine's own counters around one client run: the cross-check of the client's."""

    generated_tokens: float
    steps: int | None                # the plugin's engine steps (None: no plugin counters)
    step_ms: float | None
    steps_per_k: dict[int, int] | None = None  # the plugin's engine steps at each k verified
    explore_steps: int | None = None  # of those, steps at a k not the table's (duels, rotation)
    table_version: list[int]         # before, after: a change means someone pushed
    accepted_per_pos: list[int]
    drafted_per_pos: list[int]


class Phase(_Record):
    """One run of vLLM's client (a shape has one, the ramp's staircase several)."""

    file: str                        # its whole result, relative to the bench's folder
    argv: list[str]                  # the shape's client flags
    client: ClientResult
    engine: EngineCounts


class SidecarSeen(_Record):
    """What the sidecar did in one of its arms, from its /v1/state and /metrics."""

    pushes: int
    traffic_changes: int
    rollbacks: int
    foreign_tables: int
    minutes: float                   # thawed in this arm
    decisions: list[RecentDecision]  # the notable ones (pushed, rolled back, ...)
    cumulative: dict[str, int]       # the counts above since the sidecar started
    engine_table: Ranges | None
    a_hat: list[float]
    rebuilds: dict[str, int]         # by outcome, since the sidecar started
    cpu_s: float | None = None       # its CPU seconds since its last reading (None: older records)


class ArmRun(_Record):
    """A shape's runs in one arm (a table, or the sidecar awake)."""

    shape: str
    arm: str
    seed: int
    wall_s: float
    phases: list[Phase]
    sidecar: SidecarSeen | None      # None: a table arm

    def placed(self, block: int, position: int, part: int) -> BlockRun:
        return BlockRun(**dict(self), block=block, position=position, part=part)


class BlockRun(ArmRun):
    """An arm's run where the design put it: the block (negative: warmup), its place in the
    block's order, and the call (part) that ran it."""

    block: int
    position: int
    part: int
