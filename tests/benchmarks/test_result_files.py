"""Every committed result file of a typed bench parses through the bench's model and dumps back
to the values it holds (issue #37 item 5): a field renamed on one side fails here."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from benchmarks.client_record import FieldRecord, NoharmRecord
from benchmarks.json_out import dumped
from benchmarks.overhead_model import OverheadReport
from benchmarks.sidecar_http_load import LoadRun
from benchmarks.stationary import StationaryRun
from benchmarks.switch_cost import SwitchCost

RESULTS = Path(__file__).parents[2] / "benchmarks" / "results"


def _dump(model: BaseModel) -> Any:
    return model.model_dump(mode="json")


# a file name's pattern -> its model and how the bench writes it
KINDS: dict[str, tuple[type[BaseModel], Callable[[Any], Any]]] = {
    "switch-cost.json": (SwitchCost, _dump),
    "stationary.json": (StationaryRun, dumped),
    "runs.jsonl": (LoadRun, _dump),               # the sidecar's HTTP load: a run a line
    "*overhead.json": (OverheadReport, dumped), # a GPU's copy is hooks-overhead.json
    "field.json": (FieldRecord, dumped),
    "noharm.json": (NoharmRecord, dumped),
}
FILES = [(pattern, path) for pattern in KINDS for path in sorted(RESULTS.rglob(pattern))]


def test_every_kind_has_a_committed_file() -> None:
    assert {pattern for pattern, _ in FILES} == set(KINDS)


@pytest.mark.parametrize(("pattern", "path"), FILES,
                         ids=[str(p.relative_to(RESULTS)) for _, p in FILES])
def test_a_committed_file_parses_and_dumps_back_to_its_values(pattern: str, path: Path) -> None:
    model, dump = KINDS[pattern]
    for text in path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
        assert dump(model.model_validate_json(text)) == json.loads(text)
