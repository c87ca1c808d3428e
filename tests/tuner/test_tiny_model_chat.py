"""The tiny model's chat template (tuner/tiny_model.py): the demo's vLLM answers
/v1/chat/completions (issue #15.6; the engine half is in test_end_to_end.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2

from tuner.tiny_model import CHAT_TEMPLATE, add_chat_template


def test_the_template_renders_role_lines_and_the_generation_prompt() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    text = jinja2.Template(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=True)
    assert text == "system: be brief\nuser: hi\nassistant: "


def test_a_cached_model_without_a_template_gets_one_once(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    assert add_chat_template(tmp_path)
    assert (tmp_path / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    assert not add_chat_template(tmp_path)  # already there: nothing rewritten


def test_a_model_with_its_own_template_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"}))
    assert not add_chat_template(tmp_path)
    assert not (tmp_path / "chat_template.jinja").exists()
