"""An id registered again with other tokens names them: requests bound to it read the
new context from HOT, requests already reading the old one finish on it, its slots are
freed with the last of them, and a request that can only be served from COLD is counted.
Every output is compared with stock vLLM's (float32, CPU)."""

from __future__ import annotations

from typing import Any

import pytest
from vllm.inputs import TokensPrompt

from granikv_engine.vllm_plugin.client import bind_args, control, register, register_params
from tests.vllm_plugin.conftest import HOT_SLOTS
from tests.vllm_plugin.helpers import assert_same, generate, params, tokens

pytestmark = pytest.mark.vllm

TEAM, PID = "again", "again-ctx"
CHUNK = 16  # a hit reads a prefix's whole hash chunks from HOT


@pytest.fixture(autouse=True)
def _empty_arena(gk_llm: Any) -> None:
    """The session's engine holds other tests' pinned prefixes: start from none."""
    for p in control(gk_llm, "list")["prefixes"]:
        control(gk_llm, "unregister", prefix_id=p["prefix_id"], team=p["team"])
    assert control(gk_llm, "stats")["hot"]["used"] == 0


def _hits(llm: Any) -> dict[str, int]:
    return control(llm, "stats")["hits"]


def _served_from_hot(stock_llm: Any, gk_llm: Any, ctx: list[int], seed: int) -> None:
    before = _hits(gk_llm)
    prompts = [ctx + tokens(seed + j, 5 + j) for j in range(4)]
    assert_same(generate(stock_llm, prompts, params(6)),
                generate(gk_llm, prompts, params(6, bind_args(TEAM, PID))))
    after = _hits(gk_llm)
    assert after["hits"] - before["hits"] == 4, (before, after)
    assert after["hit_tokens"] - before["hit_tokens"] == 4 * (len(ctx) // CHUNK * CHUNK)
    assert after["cold_fallbacks"] == before["cold_fallbacks"]


def test_register_again_longer_then_shorter(stock_llm: Any, gk_llm: Any) -> None:
    used0 = control(gk_llm, "stats")["hot"]["used"]
    replaced0 = control(gk_llm, "stats")["replacements"]
    for i, ctx in enumerate((tokens(30, 120), tokens(31, 300), tokens(32, 40))):
        rec = register(gk_llm, TEAM, ctx, prefix_id=PID)
        assert rec["state"] == "ready" and rec["length"] == len(ctx)
        # the old context's slots went with its registration: only the new one is held
        assert control(gk_llm, "stats")["hot"]["used"] == used0 + len(ctx)
        _served_from_hot(stock_llm, gk_llm, ctx, 700 + 10 * i)
    listed = control(gk_llm, "list", team=TEAM)["prefixes"]
    assert [(p["prefix_id"], p["length"]) for p in listed] == [(PID, 40)]
    assert control(gk_llm, "stats")["replacements"] - replaced0 == 2
    control(gk_llm, "unregister", prefix_id=PID, team=TEAM)


def test_register_again_while_requests_read_the_old_context(stock_llm: Any,
                                                             gk_llm: Any) -> None:
    old, new = tokens(33, 150), tokens(34, 200)
    register(gk_llm, TEAM, old, prefix_id=PID)
    used0 = control(gk_llm, "stats")["hot"]["used"]
    engine = gk_llm.llm_engine
    readers = {f"old-{j}": old + tokens(40 + j, 9) for j in range(3)}
    for rid, prompt in readers.items():
        engine.add_request(rid, TokensPrompt(prompt_token_ids=prompt),
                           params(24, bind_args(TEAM, PID)))
    done: dict[str, Any] = {}
    while not any(len(o.outputs[0].token_ids) >= 4 for o in done.values()):
        done.update({o.request_id: o for o in engine.step()})
    assert control(gk_llm, "stats")["hot"]["referenced"] >= len(old)
    before = _hits(gk_llm)
    # the old context is read: the id moves to the new tokens, the old range stays
    engine.add_request("again-fill", TokensPrompt(prompt_token_ids=new),
                       register_params(TEAM, PID))
    while engine.has_unfinished_requests():
        done.update({o.request_id: o for o in engine.step()})
    rec = control(gk_llm, "get", prefix_id=PID, team=TEAM)
    assert rec["state"] == "ready" and rec["length"] == len(new)
    got = [(list(done[r].outputs[0].token_ids),
            [lp[t].logprob for t, lp in zip(done[r].outputs[0].token_ids,
                                            done[r].outputs[0].logprobs or [])])
           for r in readers]
    assert_same(generate(stock_llm, list(readers.values()), params(24)), got)
    after = _hits(gk_llm)
    assert after["cold_fallbacks"] == before["cold_fallbacks"]  # they stayed on HOT
    # the readers ended: the old slots are free, the new context holds its own
    assert control(gk_llm, "stats")["hot"]["used"] == used0 - len(old) + len(new)
    _served_from_hot(stock_llm, gk_llm, new, 760)
    control(gk_llm, "unregister", prefix_id=PID, team=TEAM)


def test_a_request_bound_before_the_id_moved_is_served_cold_and_counted(
        stock_llm: Any, gk_llm: Any) -> None:
    """Bound to the old tokens, not yet scheduled when the id moved: its prompt does not
    start with the new context, so it runs from COLD and says so."""
    old, new = tokens(35, 80), tokens(36, 90)
    register(gk_llm, TEAM, old, prefix_id=PID)
    before = _hits(gk_llm)
    prompts = [old + tokens(50, 7), new]
    sps = [params(6, bind_args(TEAM, PID)), register_params(TEAM, PID)]
    outs = gk_llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sps,
                           use_tqdm=False)
    first = outs[0].outputs[0]
    got = [(list(first.token_ids), [lp[t].logprob
                                    for t, lp in zip(first.token_ids, first.logprobs or [])])]
    assert_same(generate(stock_llm, prompts[:1], params(6)), got)
    after = _hits(gk_llm)
    assert after["cold_replaced"] - before["cold_replaced"] == 1
    assert after["cold_fallbacks"] - before["cold_fallbacks"] == 1
    assert control(gk_llm, "get", prefix_id=PID, team=TEAM)["length"] == len(new)
    control(gk_llm, "unregister", prefix_id=PID, team=TEAM)


def test_register_again_with_a_context_the_arena_cannot_hold(stock_llm: Any,
                                                              gk_llm: Any) -> None:
    used0 = control(gk_llm, "stats")["hot"]["used"]
    register(gk_llm, TEAM, tokens(37, 100), prefix_id=PID)
    big = tokens(38, HOT_SLOTS + 20)
    rec = register(gk_llm, TEAM, big, prefix_id=PID)
    assert rec["state"] == "cold" and rec["length"] == len(big)
    assert control(gk_llm, "stats")["hot"]["used"] == used0  # the old one is gone
    before = _hits(gk_llm)
    prompts = [big + tokens(60 + j, 5) for j in range(2)]
    assert_same(generate(stock_llm, prompts, params(4)),
                generate(gk_llm, prompts, params(4, bind_args(TEAM, PID))))
    after = _hits(gk_llm)
    assert after["cold_fallbacks"] - before["cold_fallbacks"] == 2  # said, not silent
    assert after["hits"] == before["hits"]
    control(gk_llm, "unregister", prefix_id=PID, team=TEAM)
