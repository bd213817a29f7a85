"""The embedded tiny model's tokenizer: rebuilt from code identically, sized to the
model, and with a boundary-safe chat template (a conversation's tokens start with the
tokens of its first message rendered alone)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

MODEL = Path(__file__).resolve().parents[2] / "deploy" / "models" / "tiny-llama"


def _build_module() -> Any:
    path = MODEL.parent / "build_tiny_tokenizer.py"
    spec = importlib.util.spec_from_file_location("build_tiny_tokenizer", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tok() -> Any:
    return AutoTokenizer.from_pretrained(str(MODEL))


def test_rebuild_reproduces_the_saved_files(tmp_path: Path) -> None:
    _build_module().save(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (tmp_path / name).read_text() == (MODEL / name).read_text(), name


def test_vocabulary_matches_the_model(tok: Any) -> None:
    config = json.loads((MODEL / "config.json").read_text())
    assert len(tok) == config["vocab_size"] == 1024
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.convert_tokens_to_ids("<|end|>") == 7
    assert all(tok.decode([i]) is not None for i in range(1024))  # every id decodes


@pytest.mark.parametrize("turns", [
    [("user", "hello")],
    [("user", " leading space"), ("assistant", "an answer\n"), ("user", "again?")],
    [("system", "a second system message"), ("user", "ünïcödé and emoji 🙂")],
    [("user", "")],
])
def test_chat_template_is_boundary_safe(tok: Any, turns: list[tuple[str, str]]) -> None:
    context = (MODEL.parents[1] / "contexts" / "red.md").read_text()
    head = [{"role": "system", "content": context}]
    prefix = tok.encode(tok.apply_chat_template(head, tokenize=False), add_special_tokens=False)
    convo = head + [{"role": r, "content": c} for r, c in turns]
    text = tok.apply_chat_template(convo, tokenize=False, add_generation_prompt=True)
    full = tok.encode(text, add_special_tokens=False)
    assert full[: len(prefix)] == prefix and len(full) > len(prefix)
    assert prefix[0] == tok.bos_token_id and prefix[-1] == 7  # BOS ... <|end|>
    assert text.endswith("<|assistant|>")
