"""A replica's warm-up: one real generation of one token through each OpenAI path
(chat template, tokenizer, prefill, sampler) before the replica first reports, and so
before /readyz says ready: the first client request does not pay for the first run of
each."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from granikv_platform.engine import EngineHost
from granikv_platform.protocol import JsonItem

logger = logging.getLogger("ray.serve")


async def warm_up(engine: EngineHost, model: str, name: str) -> dict[str, float]:
    """The seconds each path took; a failure is logged (the replica still starts)."""
    calls: dict[str, tuple[Any, dict[str, Any]]] = {
        "chat": (engine.chat, {"messages": [{"role": "user", "content": "hi"}]}),
        "completion": (engine.completions, {"prompt": "hi"})}
    took: dict[str, float] = {}
    for kind, (run, body) in calls.items():
        t0 = asyncio.get_running_loop().time()
        items = [i async for i in run({**body, "model": model, "max_tokens": 1})]
        if not items or not isinstance(items[-1], JsonItem):
            logger.warning("GraniKV replica %s: warm-up %s answered %s", name, kind,
                           items[-1] if items else "nothing")
            continue
        took[kind] = round(asyncio.get_running_loop().time() - t0, 3)
    logger.info("GraniKV replica %s: warmed up in %s s", name, took)
    return took
