"""A tokenizer as wide as a real model's vocabulary, built from code, for dummy weights.

A benchmark model folder pairs a real model's shape (Llama-3.1-8B: 128,256 ids) with
dummy weights and no downloaded tokenizer. The tiny model's tokenizer has 1,024 ids, so
most ids such a model emits decode to nothing, and vLLM's incremental detokenizer then
decodes the whole prompt again for every generated token (the server, not the engine,
becomes the bottleneck). This tokenizer fills the whole vocabulary: after the special
tokens (the tiny model's, same ids, same chat template) and the 256 byte symbols of
byte-level BPE, every id is a space followed by one to four lowercase letters, reached by
merges (``Ġ`` + ``a`` -> ``Ġa``, ``Ġa`` + ``b`` -> ``Ġab`` ...). So every id from
``first_word_id()`` on decodes to a whole word on its own, and any text still encodes.

    python -m granikv_engine.bench.word_tokenizer --vocab-size 128256 --out MODEL_DIR

writes ``tokenizer.json`` there; the folder's ``tokenizer_config.json`` and
``special_tokens_map.json`` come from ``deploy/models/tiny-llama/`` (the same specials).
"""

from __future__ import annotations

import argparse
import itertools
import os
import string
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

# the tiny model's special tokens, at the same ids (deploy/models/build_tiny_tokenizer.py)
SPECIALS = ("<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>",
            "<|end|>")
SPACE = "Ġ"  # byte-level BPE's symbol for a space
MAX_LETTERS = 4


def first_word_id() -> int:
    return len(SPECIALS) + len(pre_tokenizers.ByteLevel.alphabet())


def _words() -> itertools.chain[str]:
    """Every space-led word of 1..MAX_LETTERS letters, shortest first (a word's prefix
    always comes before it: the merges that build it exist)."""
    letters = string.ascii_lowercase
    return itertools.chain.from_iterable(
        (SPACE + "".join(p) for p in itertools.product(letters, repeat=n))
        for n in range(1, MAX_LETTERS + 1))


def build(vocab_size: int) -> Tokenizer:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    n_words = vocab_size - first_word_id()
    if n_words < 1 or n_words > sum(26 ** n for n in range(1, MAX_LETTERS + 1)):
        raise ValueError(f"vocab_size {vocab_size}: must leave 1..{26 ** MAX_LETTERS} ids "
                         f"for words after the first {first_word_id()}")
    vocab: dict[str, int] = {s: i for i, s in enumerate(SPECIALS)}
    for sym in alphabet:
        vocab[sym] = len(vocab)
    merges: list[tuple[str, str]] = []
    for word in itertools.islice(_words(), n_words):
        merges.append((word[:-1], word[-1]))  # SPACE + "a" -> "Ġa"; "Ġab" + "c" -> "Ġabc"
        vocab[word] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None,
                               byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIALS))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab-size", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True, help="the model folder")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    tmp = a.out / f"tokenizer.json.{os.getpid()}"
    build(a.vocab_size).save(str(tmp))
    os.replace(tmp, a.out / "tokenizer.json")  # whole: a server may be reading it


if __name__ == "__main__":
    main()
