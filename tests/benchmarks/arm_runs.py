"""Typed client-bench runs and records for the summaries' tests (benchmarks/arm_run.py,
benchmarks/client_record.py), figures chosen."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from benchmarks.arm_run import BlockRun, EngineCounts, Phase, SidecarSeen
from benchmarks.client_record import FieldRecord, NoharmRecord
from benchmarks.field_client import ClientResult
from benchmarks.synthetic import paper_profile
from benchmarks.traffic import Sizes

LATENCY = ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "p50_itl_ms", "p99_itl_ms",
           "mean_itl_ms")


def phase(tokens: float, seconds: float, tpot: float = 20.0, engine: float | None = None,
          goodput: float | None = None, **client: float) -> Phase:
    """One client run of `tokens` in `seconds` (the engine counting `engine`, else the same)."""
    fields: dict[str, Any] = {
        "duration": seconds, "completed": 8, "total_input_tokens": 800,
        "total_output_tokens": tokens, "request_throughput": 8 / seconds,
        "output_throughput": tokens / seconds, "mean_ttft_ms": 100.0, "mean_tpot_ms": tpot,
        "spec_decode_acceptance_length": 2.0, "request_goodput": goodput,
        **{f: 1.0 for f in LATENCY}, **client}
    return Phase(file="runs/x.json", argv=[], client=ClientResult(**fields),
                 engine=EngineCounts(generated_tokens=tokens if engine is None else engine,
                                     steps=100, step_ms=10.0, table_version=[1, 1],
                                     accepted_per_pos=[], drafted_per_pos=[]))


def seen(pushes: int = 0, changes: int = 0, minutes: float = 0.5,
         cpu_s: float | None = None) -> SidecarSeen:
    return SidecarSeen(pushes=pushes, traffic_changes=changes, rollbacks=0, foreign_tables=0,
                       minutes=minutes, decisions=[], cumulative={}, engine_table=None, a_hat=[],
                       rebuilds={}, cpu_s=cpu_s)


def block_run(block: int, shape: str, arm: str, phases: list[Phase],
              sidecar: SidecarSeen | None = None) -> BlockRun:
    return BlockRun(shape=shape, arm=arm, seed=block, wall_s=10.0, phases=phases,
                    sidecar=sidecar, block=block, position=0, part=0)


def _meta(shapes: Sequence[str]) -> dict[str, Any]:
    """The meta both benches write, for a run of one call over ``shapes`` (no client flags)."""
    return {"command": "python -m benchmarks.x", "profile": "profile.json", "model": "m",
            "served_name": "m", "engine": paper_profile().engine.model_dump(),
            "shapes": [{"name": s, "runs": []} for s in shapes],
            "sizes": dataclasses.asdict(Sizes()), "idle_s": 3.0, "seed": 0, "emulate": None,
            "engine_args": [], "parts": [{"part": 0, "first_block": 0, "stop_reason": "blocks"}]}


def field_record(runs: Sequence[BlockRun], shapes: Sequence[str], policies: Sequence[str],
                 tables: dict[str, list[list[int]]] | None = None) -> FieldRecord:
    """field.json's record of ``runs``: every policy given, the tables ``tables`` (none: {})."""
    meta = {**_meta(shapes), "policies": list(policies), "tables": tables or {},
            "sidecar": None, "goodput": None}
    return FieldRecord.model_validate({"schema": 1, "meta": meta, "runs": runs, "warmup": []})


def noharm_record(runs: Sequence[BlockRun], shapes: Sequence[str],
                  warmup: Sequence[BlockRun] = ()) -> NoharmRecord:
    """noharm.json's record of ``runs`` and ``warmup``."""
    meta = {**_meta(shapes), "start_table": [[1, 16, 1]], "profile_table": None,
            "sidecar": ["tabletune", "sidecar"]}
    return NoharmRecord.model_validate({"schema": 1, "meta": meta, "runs": runs,
                                        "warmup": warmup})
