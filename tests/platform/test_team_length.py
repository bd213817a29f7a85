"""A team chat's length check counts the team's context: on one CPU engine of the tiny
model (no Ray), with deploy/local.yaml's limits (no max_prompt_tokens below
max_model_len), a message that fits beside the placeholder but not beside the context
is refused, with the whole prompt's count, as the same conversation on /v1 is."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from granikv_platform.config import PlatformConfig
from granikv_platform.engine import EngineHost
from granikv_platform.protocol import ErrorItem, Item, JsonItem
from granikv_platform.registry import PrefixSpec
from granikv_platform.team_splice import CONTEXT_PLACEHOLDER
from tests.conftest import app_args

pytestmark = [pytest.mark.vllm]
CONTEXT = "The team reviews code and answers in short sentences. " * 40


async def collect(items: Any) -> list[Item]:
    return [item async for item in items]


async def prompt_len(engine: EngineHost, message: str,
                     system: str = CONTEXT_PLACEHOLDER) -> int:
    """Tokens of the chat [``system`` message, ``message``], as rendered."""
    item = await engine.tokenize_body({"model": "tiny-llama", "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": message}]})
    assert isinstance(item, JsonItem), item
    return int(item.body["count"])


async def sized_message(engine: EngineHost, target: int) -> str:
    """A user message whose chat with the placeholder has ``target`` tokens or a few
    fewer."""
    base, per = await prompt_len(engine, ""), 0
    words = 1
    while True:
        n = await prompt_len(engine, " ".join(["word"] * words))
        per = max(1, (n - base) // words)
        if n > target:
            return " ".join(["word"] * (words - 1 - (n - target) // per))
        words += max(1, (target - n) // per)


async def scenario(tmp: Path) -> dict[str, Any]:
    cfg = PlatformConfig.model_validate(app_args(tmp))
    engine = await EngineHost.start(cfg.engine_args(), None, cfg.engine.weight_seed, None,
                                    cfg.frontend)
    try:
        context_ids = await engine.render_system(CONTEXT)
        context = PrefixSpec("ctx", "red", tuple(context_ids), kind="context", text=CONTEXT)
        max_tokens = 600
        # a message whose chat, with the placeholder, leaves room for max_tokens (10 to
        # spare) but, with the context spliced in, does not
        message = await sized_message(engine, engine.max_model_len - max_tokens - 10)
        body = {"model": "tiny-llama", "max_tokens": max_tokens, "ignore_eos": True,
                "messages": [{"role": "user", "content": message}]}
        team = await collect(engine.team_chat(body, context))
        plain = await collect(engine.chat({**body, "messages": [
            {"role": "system", "content": CONTEXT}, *body["messages"]]}))
        fits = await collect(engine.team_chat({**body, "max_tokens": 8}, context))
        return {"team": team, "plain": plain, "fits": fits,
                "whole": await prompt_len(engine, message, CONTEXT),
                "placeholder": await prompt_len(engine, message),
                "max_model_len": engine.max_model_len}
    finally:
        engine.shutdown()


def test_the_team_chat_counts_its_context(tmp_path: Path) -> None:
    out = asyncio.run(scenario(tmp_path))
    team, plain, fits = out["team"][0], out["plain"][0], out["fits"][0]
    assert isinstance(plain, ErrorItem) and plain.status == 400, plain
    assert isinstance(team, ErrorItem) and team.status == 400, team
    # the team's 400 counts the whole prompt, context included, as /v1 renders it
    whole, length = out["whole"], out["max_model_len"]
    assert f"your prompt contains {whole} input tokens" in team.message, (team, out)
    assert out["placeholder"] + 600 <= length < whole + 600 and whole + 8 <= length, out
    assert isinstance(fits, JsonItem) and fits.status == 200, fits
    assert fits.body["usage"]["completion_tokens"] == 8
