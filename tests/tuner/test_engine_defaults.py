"""Where a bench or the tuner serves a profile's model from (tuner/engine_defaults.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.core.errors import InvalidInput
from tuner.engine_defaults import resolve_model


def test_a_given_model_is_a_folder_here_or_a_hugging_face_id(tmp_path: Path) -> None:
    assert resolve_model("m", tmp_path) == tmp_path
    assert resolve_model("m", "meta-llama/Llama-3.2-3B") == Path("meta-llama/Llama-3.2-3B")
    assert resolve_model("m", "gpt2") == Path("gpt2")


@pytest.mark.parametrize("given", ["/nonexistent/model", "./gone", "a/b/c"])
def test_a_given_model_that_is_neither_says_so_in_one_line(given: str) -> None:
    with pytest.raises(InvalidInput) as got:
        resolve_model("m", given)
    assert str(got.value) == (f"--model={given!r}: no such folder here, and not a Hugging Face "
                              "id (owner/name); pass the folder of the model")
