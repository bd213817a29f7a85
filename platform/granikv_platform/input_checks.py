"""The checks every chat and completion passes before the engine, on the rendered
request: ``InputChecks.install`` wraps vLLM's renderer, so a refusal is a 400 before
the request is admitted, streams included, and applies to every route and to the
agents' in-cluster calls (all go through ``EngineHost``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vllm.entrypoints.openai.engine.protocol import ErrorResponse
from vllm.entrypoints.serve.utils.error_response import create_error_response

from granikv_platform.structured_checks import choice_grammar, structured_problem
from granikv_platform.token_ids import ID_LIST_FIELDS, prompt_problem, sampling_problem

logger = logging.getLogger("ray.serve")


def length_problem(prompt_len: int, asked: int | None, max_model_len: int) -> str | None:
    """Why a prompt of ``prompt_len`` tokens with ``asked`` output tokens (None: at
    least one) does not fit ``max_model_len``; vLLM's wording."""
    want = asked or 1
    if prompt_len + want <= max_model_len:
        return None
    return (f"This model's maximum context length is {max_model_len} tokens. However, "
            f"you requested {want} output tokens and your prompt contains {prompt_len} "
            f"input tokens, for a total of {prompt_len + want} tokens. Please reduce the "
            "length of the input prompt or the number of requested output tokens.")


@dataclass(frozen=True)
class InputChecks:
    """What every chat and completion must pass before the engine, checked on the
    rendered request (a team chat's context spliced in): its token ids against the
    model's vocabulary (token_ids.py), its structured-output constraint against the
    grammar backend (structured_checks.py), and its prompt plus ``max_tokens`` against
    ``max_model_len`` (vLLM checks that before a team chat's context is spliced in)."""

    vocab: int
    max_model_len: int
    backend: str
    max_prompt_tokens: int | None = None  # limits.max_prompt_tokens, below max_model_len

    def install(self, serving: Any, render: str) -> None:
        """Make ``serving.<render>`` (vLLM's renderer: the engine inputs, or an
        ErrorResponse) answer a 400 for a request that fails a check."""
        inner = getattr(serving, render)

        async def checked(request: Any) -> Any:
            out = await inner(request)
            if isinstance(out, ErrorResponse):
                return out
            inputs = out[1] if isinstance(out, tuple) else out  # chat: (conversation, inputs)
            why = self.problem(request, inputs, serving)
            if why is not None:
                logger.warning("request refused before the engine: %s", why)
                return create_error_response(why)
            return out

        setattr(serving, render, checked)

    def problem(self, request: Any, inputs: Sequence[Any], serving: Any) -> str | None:
        fields = {f: getattr(request, f, None) for f in (*ID_LIST_FIELDS, "logit_bias")}
        why = (prompt_problem((inp.get("prompt_token_ids") or () for inp in inputs),
                              self.vocab)
               or sampling_problem(fields, self.vocab)
               or self.length_problem(request, inputs, serving))
        if why is None:
            _escape_choice(request)
            why = structured_problem(_constraint(request, serving), self.backend)
        return why

    def length_problem(self, request: Any, inputs: Sequence[Any], serving: Any) -> str | None:
        asked = getattr(request, "max_completion_tokens", None) or request.max_tokens
        cap = self.max_prompt_tokens
        for inp in inputs:
            n = serving._extract_prompt_len(inp)
            why = length_problem(n, asked, self.max_model_len)
            if why is not None:
                return why
            if cap is not None and n > cap:
                return (f"the prompt has {n} tokens; this platform accepts at most {cap} "
                        "(limits.max_prompt_tokens)")
        return None


def _escape_choice(request: Any) -> None:
    """A ``structured_outputs.choice`` with a control character, as the grammar of the
    same choices (``choice_grammar``)."""
    so: Any = getattr(request, "structured_outputs", None)
    choices = getattr(so, "choice", None)
    if isinstance(choices, list) and all(isinstance(c, str) for c in choices):
        grammar = choice_grammar(choices)
        if grammar is not None:
            so.choice, so.grammar = None, grammar


def _constraint(request: Any, serving: Any) -> Any:
    """The request's structured-output constraint as the engine will get it (from
    ``structured_outputs``, ``response_format`` or, once rendered, a forced tool)."""
    try:
        return request.to_sampling_params(1, serving.default_sampling_params).structured_outputs
    except Exception:  # vLLM refuses it itself, with its own message, right after
        return None
