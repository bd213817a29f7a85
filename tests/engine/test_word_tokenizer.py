"""The benchmark tokenizer as wide as a real model's vocabulary: every id after the
specials and the byte symbols decodes to a whole word on its own (vLLM's incremental
detokenizer never waits for more bytes), any text still round-trips, and the special
tokens and chat template are the tiny model's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders

from granikv_engine.bench import online, word_tokenizer

TINY = Path(__file__).resolve().parents[2] / "deploy" / "models" / "tiny-llama"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return word_tokenizer.build(20_000)


def test_every_word_id_decodes_alone_and_in_a_stream(tok: Tokenizer) -> None:
    assert tok.get_vocab_size() == 20_000
    prompt = tok.encode("<s><|system|>a context<|end|><|user|>hi<|end|><|assistant|>").ids
    stream = decoders.DecodeStream(ids=prompt, skip_special_tokens=True)
    for i in range(word_tokenizer.first_word_id(), 20_000):
        text = tok.decode([i])
        assert text.startswith(" ") and text[1:].isalpha() and text[1:].islower(), (i, text)
        assert stream.step(tok, i) == text, i
    with pytest.raises(ValueError, match="vocab_size"):
        word_tokenizer.build(26 ** 4 * 2)


def test_any_text_round_trips_and_words_are_one_token(tok: Tokenizer) -> None:
    text = " Team 3 context: the quick brown fox, 42 times; ünïcødé and emoji 🙂."
    assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text
    for word in ("a", "zz", "abc"):
        assert tok.encode(" " + word, add_special_tokens=False).tokens == ["Ġ" + word]


def test_specials_and_config_match_the_tiny_model(tok: Tokenizer, tmp_path: Path) -> None:
    tiny = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    for i, special in enumerate(word_tokenizer.SPECIALS):
        assert tok.token_to_id(special) == i == tiny.token_to_id(special)
    config = json.loads((TINY / "tokenizer_config.json").read_text())
    assert set(config["additional_special_tokens"]) <= set(word_tokenizer.SPECIALS)
    tok.save(str(tmp_path / "tokenizer.json"))
    words = online.word_pool(tmp_path / "tokenizer.json")
    assert len(words) > 10_000  # the load generator builds its prompts from them
