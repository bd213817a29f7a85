"""Token ids a client sends, checked against the model's vocabulary: pure functions.

Every id that reaches the engine indexes a tensor of the model's vocabulary size
(``model_config.get_vocab_size()``): a prompt id the embedding table, a
``stop_token_ids`` entry the logits (the ``min_tokens`` processor masks them), an
``allowed_token_ids`` entry the logits mask. An id outside ``[0, vocab)`` there is an
IndexError in the engine core, which kills it for every request it holds. vLLM's own
prompt check lets ``vocab`` itself through (it compares with the larger of the
tokenizer's last id and ``vocab - 1``), and it checks ``allowed_token_ids`` against the
tokenizer's size, which may exceed the model's; ``stop_token_ids`` it does not check.
So the platform checks them all here, before the engine, against the model's size.

The tokenizer may be smaller than the model's vocabulary: ``/detokenize`` checks
against the tokenizer's own size (``detokenize_problem``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Request fields whose values are lists of token ids the engine indexes with.
ID_LIST_FIELDS = ("stop_token_ids", "allowed_token_ids", "logprob_token_ids")


def out_of_range(ids: Iterable[Any], size: int) -> list[Any]:
    """The ids of ``ids`` that are not integers in ``[0, size)``, in order (at most 5)."""
    bad: list[Any] = []
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < size:
            bad.append(t)
            if len(bad) == 5:
                break
    return bad


def _said(where: str, bad: list[Any], size: int, what: str = "the model's vocabulary") -> str:
    return (f"{where}: token id(s) {bad} out of range; token ids must be integers in "
            f"[0, {size}) ({what} has {size} tokens)")


def prompt_problem(prompts: Iterable[Iterable[Any]], vocab: int) -> str | None:
    """Why the prompts (as token ids, one list per prompt) cannot reach the engine;
    None when every id is in ``[0, vocab)``."""
    for i, ids in enumerate(prompts):
        bad = out_of_range(ids, vocab)
        if bad:
            return _said(f"prompt {i}" if i else "prompt", bad, vocab)
    return None


def sampling_problem(fields: Mapping[str, Any], vocab: int) -> str | None:
    """Why a request's token-id sampling fields (``ID_LIST_FIELDS``, ``logit_bias``'s
    keys) cannot reach the engine; None when they are absent or in ``[0, vocab)``."""
    for name in ID_LIST_FIELDS:
        ids = fields.get(name)
        if ids:
            bad = out_of_range(ids, vocab)
            if bad:
                return _said(name, bad, vocab)
    bias = fields.get("logit_bias")
    if bias:
        keys = [_as_int(k) for k in bias]
        bad = out_of_range(keys, vocab)
        if bad:
            return _said("logit_bias", bad, vocab)
    return None


def detokenize_problem(tokens: Iterable[Any], tokenizer_size: int) -> str | None:
    """Why ``tokens`` cannot be detokenized: an id the tokenizer does not have."""
    bad = out_of_range(tokens, tokenizer_size)
    return _said("tokens", bad, tokenizer_size, "the tokenizer") if bad else None


def _as_int(key: Any) -> Any:
    """A ``logit_bias`` key as vLLM reads it (JSON keys are strings)."""
    if isinstance(key, str):
        try:
            return int(key)
        except ValueError:
            return key
    return key
