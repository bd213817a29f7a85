"""Tiny model folders in the prompt formats of Llama 3.1 and Qwen2.5: the embedded tiny
tokenizer plus each family's special tokens, its chat template (tests/platform/
templates/, written for these tests in the families' formats) and the tool-call parser
vLLM uses for it. Weights are random (load_format dummy), so a test that needs a tool
call forces its text with a structured-output choice (``Family.call``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import AddedToken, Tokenizer

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "deploy" / "models" / "tiny-llama"
TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Family:
    name: str
    template: str
    specials: tuple[str, ...]  # added, special (skipped in output text)
    plain: tuple[str, ...]  # added, not special (the tool-call tags stay in the text)
    bos: str | None
    eos: str
    parser: str  # vLLM's --tool-call-parser
    call: str  # a get_weather(city="Paris") call as the model writes it


LLAMA_31 = Family(
    "llama-3.1", "llama-3.1.jinja",
    ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
     "<|eom_id|>", "<|python_tag|>"), (), "<|begin_of_text|>", "<|eot_id|>", "llama3_json",
    '{"name": "get_weather", "parameters": {"city": "Paris"}}')
# Qwen's <tool_call> tags stay plain text here: as added tokens, the structured-output
# grammar that forces the call would have to emit them as one token, which it cannot.
QWEN_25 = Family(
    "qwen-2.5", "qwen-2.5.jinja", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    (), None, "<|im_end|>", "hermes",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
FAMILIES = (LLAMA_31, QWEN_25)


def make_model(family: Family, out: Path) -> Path:
    """Write the family's tiny model folder to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in family.specials])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in family.plain])
    tok.save(str(out / "tokenizer.json"))
    config = json.loads((TINY / "config.json").read_text())
    eos = tok.token_to_id(family.eos)
    config.update(vocab_size=tok.get_vocab_size(), eos_token_id=eos,
                  bos_token_id=tok.token_to_id(family.bos) if family.bos else None)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": family.bos,
        "eos_token": family.eos, "pad_token": "<pad>", "unk_token": None,
        "additional_special_tokens": list(family.specials), "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "chat_template": (TEMPLATES / family.template).read_text()}, indent=1))
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": family.bos, "eos_token": family.eos, "pad_token": "<pad>"}))
    return out
