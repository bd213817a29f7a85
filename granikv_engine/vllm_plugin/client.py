"""Caller-side helpers: register prefixes and run control operations on an engine.

Works with ``LLM``, ``LLMEngine`` (sync) and ``AsyncLLM`` (async); control calls travel
as vLLM utility calls to ``EngineCore.granikv_control`` (see ``control.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from vllm import SamplingParams
from vllm.inputs import TokensPrompt

from granikv_engine.prefix_registry import (
    PrefixAccessDenied,
    PrefixConflict,
    PrefixError,
    PrefixNotFound,
    default_prefix_id,
)
from granikv_engine.vllm_plugin.installed import not_loaded
from granikv_engine.vllm_plugin.request_args import GraniKVArgs

_ERRORS: dict[str, type[PrefixError]] = {
    "PrefixNotFound": PrefixNotFound, "PrefixAccessDenied": PrefixAccessDenied,
    "PrefixConflict": PrefixConflict}


def raise_for_error(reply: dict[str, Any]) -> dict[str, Any]:
    err = reply.get("error") if isinstance(reply, dict) else None
    if err:
        raise _ERRORS.get(err.get("type", ""), PrefixError)(err.get("message", "error"))
    return reply


def _core_client(engine: Any) -> Any:
    """LLM -> LLMEngine -> EngineCoreClient; AsyncLLM -> EngineCoreClient."""
    if hasattr(engine, "llm_engine"):
        engine = engine.llm_engine
    return engine.engine_core


def control(engine: Any, op: str, **args: Any) -> dict[str, Any]:
    """Synchronous control call on an ``LLM`` or ``LLMEngine``."""
    client = _core_client(engine)
    try:
        if hasattr(client, "call_utility"):
            reply = client.call_utility("granikv_control", op, args)
        else:
            reply = client.engine_core.granikv_control(op, args)  # in-process
    except Exception as e:
        raise not_loaded(e) or e from e
    return raise_for_error(reply)


async def acontrol(engine: Any, op: str, **args: Any) -> dict[str, Any]:
    """Control call on an ``AsyncLLM``."""
    client = _core_client(engine)
    try:
        reply = await client.call_utility_async("granikv_control", op, args)
    except Exception as e:
        raise not_loaded(e) or e from e
    return raise_for_error(reply)


def register_params(team: str, prefix_id: str, pin: bool = True) -> SamplingParams:
    return SamplingParams(max_tokens=1, temperature=0.0, detokenize=False,
                          extra_args=GraniKVArgs(team=team, prefix_id=prefix_id,
                                                 register=True, pin=pin).to_extra_args())


def bind_args(team: str, prefix_id: str | None = None) -> dict[str, Any]:
    """``extra_args`` that bind a request to a team prefix."""
    return GraniKVArgs(team=team, prefix_id=prefix_id).to_extra_args()


def register(llm: Any, team: str, token_ids: Sequence[int], prefix_id: str | None = None,
             pin: bool = True) -> dict[str, Any]:
    """Register (fill and pin) a prefix through an ``LLM``; returns its record."""
    pid = prefix_id or default_prefix_id(team, token_ids)
    llm.generate([TokensPrompt(prompt_token_ids=list(token_ids))],
                 register_params(team, pid, pin), use_tqdm=False)
    return control(llm, "get", prefix_id=pid, team=team)


async def aregister(engine: Any, team: str, token_ids: Sequence[int],
                    prefix_id: str | None = None, pin: bool = True) -> dict[str, Any]:
    """Register (fill and pin) a prefix through an ``AsyncLLM``; returns its record
    (``state`` "ready" with ``hot_start``, or "cold" when it did not fit the arena)."""
    pid = prefix_id or default_prefix_id(team, token_ids)
    async for _ in engine.generate(TokensPrompt(prompt_token_ids=list(token_ids)),
                                   register_params(team, pid, pin),
                                   request_id=f"granikv-register-{uuid.uuid4().hex}"):
        pass
    return await acontrol(engine, "get", prefix_id=pid, team=team)
