"""Structured-output constraints checked the way the engine's grammar backend will read
them, before the request is admitted.

vLLM validates a request's constraint (``choice``, ``regex``, ``json``, ``grammar``,
``structural_tag``: from ``structured_outputs``, ``response_format`` or a forced tool
choice) when it builds the sampling parameters; with the ``auto`` backend, one that
xgrammar refuses is accepted for the guidance backend. But the engine core holds ONE
grammar backend, chosen by the first constrained request it gets: with xgrammar chosen,
such a request fails in the engine after admission (a 500, or a stream that ended with
neither a finish nor an error). Here a constraint is checked with xgrammar's own
validation (``validate_xgrammar_grammar``), on a copy, whenever the engine may use
xgrammar; a refusal is the client's mistake (400). A tool's parameters that refer to
themselves (``{"$ref": "#"}``) are one such: with a forced tool choice they become a
structural tag that xgrammar refuses (and the fallback's validation failed on with a
KeyError: a 500). A choice that holds a newline is not refused: it is rewritten as the
grammar of the same choices, escaped (``choice_grammar``), which both backends compile.
"""

from __future__ import annotations

import copy
import re
from types import SimpleNamespace
from typing import Any


def uses_xgrammar(backend: str) -> bool:
    """Whether an engine configured with ``backend`` may compile with xgrammar."""
    return backend == "auto" or backend.startswith("xgrammar")


def choice_grammar(choices: list[str]) -> str | None:
    """An EBNF grammar of exactly ``choices``, for a choice that holds a control
    character (a newline, say: a tool-call format's); None for one without.

    vLLM turns a choice into a grammar escaping only quotes and backslashes, so xgrammar
    refuses a choice with a newline, while the guidance backend takes it: which one the
    engine runs depends on the first constrained request it got. Escaped here, the
    choice is a grammar either backend compiles."""
    if not any(ord(ch) < 0x20 or ord(ch) == 0x7F for c in choices for ch in c):
        return None
    return "root ::= " + " | ".join(f'"{_ebnf_escaped(c)}"' for c in choices)


def _ebnf_escaped(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def structured_problem(params: Any, backend: str = "auto") -> str | None:
    """Why ``params`` (vLLM's ``StructuredOutputsParams``, or None) cannot be compiled by
    the engine's grammar backend; None when it can (or there is no constraint)."""
    if params is None or not uses_xgrammar(backend):
        return None
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    try:  # it rewrites a choice as a grammar: on a copy
        validate_xgrammar_grammar(SimpleNamespace(  # type: ignore[arg-type]  # reads only this
            structured_outputs=copy.deepcopy(params)))
    except Exception as e:  # xgrammar's own errors too: the engine would raise them
        return f"structured output: {_first_line(e)}"
    return None


# xgrammar's messages start with a time and its own source file: "[16:16:37]
# /project/cpp/grammar_parser.cc:106: EBNF lexer error ...": the client gets the rest.
_XGRAMMAR_WHERE = re.compile(r"\[\d\d:\d\d:\d\d\]\s*\S+:\d+:\s*")


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    cause = e.__cause__
    if cause is not None and str(cause).strip():
        text = f"{text} ({str(cause).strip()})"
    return " ".join(_XGRAMMAR_WHERE.sub("", text).split())[:500]
