"""A simulation's result as JSON: printed, and written to ``--out`` too when given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel


def emit(result: dict[str, Any], out: Path | None) -> None:
    """Print ``result`` as indented JSON; write the same text (with a final newline) to ``out``."""
    text = json.dumps(result, indent=1) + "\n"
    if out is not None:
        out.write_text(text)
    print(text, end="")


def dumped(model: BaseModel) -> dict[str, Any]:
    """A typed result file's JSON values: the fields it was given, so an older file, or a part
    a run did not measure, keeps its shape (absent, not null)."""
    return model.model_dump(mode="json", exclude_unset=True)
