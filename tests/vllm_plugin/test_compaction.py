"""HOT compaction on the real engine: a registration that only fails because the arena is
fragmented slides the unreferenced prefixes down (the worker copies their K/V through
vLLM's block-copy channel) and succeeds; requests on the moved prefixes still give stock
vLLM's tokens, which they could not if a copy were wrong or late."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from granikv_engine.vllm_plugin.client import bind_args, control, register
from tests.vllm_plugin.conftest import _start
from tests.vllm_plugin.helpers import assert_same, generate, params, tokens

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def small_arena() -> Iterator[Any]:
    llm = _start(additional_config={"granikv": {"enabled": True, "hot_slots": 600,
                                                "backend": "cascade"}})
    yield llm
    llm.llm_engine.engine_core.shutdown()


def test_fragmented_arena_is_compacted_and_moved_prefixes_stay_correct(
        stock_llm: Any, small_arena: Any) -> None:
    gk = small_arena
    ctx = {pid: tokens(40 + i, n) for i, (pid, n) in enumerate(
        [("a", 200), ("b", 200), ("c", 150)])}
    for pid, toks in ctx.items():
        assert register(gk, "t", toks, prefix_id=pid)["state"] == "ready"
    assert control(gk, "get", prefix_id="b", team="t")["hot_start"] == 201
    control(gk, "unregister", prefix_id="a", team="t")  # a 200-slot hole before b
    ctx["d"] = tokens(50, 240)  # fits only if b and c slide down
    rec = register(gk, "t", ctx["d"], prefix_id="d")
    assert rec["state"] == "ready" and rec["hot_start"] == 351
    assert control(gk, "get", prefix_id="b", team="t")["hot_start"] == 1
    assert control(gk, "get", prefix_id="c", team="t")["hot_start"] == 201
    prompts, sps = [], []
    for j, pid in enumerate(("b", "c", "d", "b", "c", "d")):
        prompts.append(ctx[pid] + tokens(900 + j, 6 + j))
        sps.append(params(8, bind_args("t", pid)))
    assert_same(generate(stock_llm, prompts, params(8)), generate(gk, prompts, sps))
    assert control(gk, "stats")["hits"]["hits"] == 6
