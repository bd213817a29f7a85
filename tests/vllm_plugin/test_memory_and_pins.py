"""KV accounting, pins under pressure, and deferred frees, on the real engine."""

from __future__ import annotations

from typing import Any

import pytest
from vllm.inputs import TokensPrompt

from granikv_engine.prefix_registry import PrefixNotFound
from granikv_engine.vllm_plugin.client import bind_args, control, register, register_params
from tests.vllm_plugin.helpers import assert_same, generate, params, tokens

pytestmark = pytest.mark.vllm


def test_kv_slots_used_are_exactly_prefix_plus_agent_tokens(stock_llm: Any, gk_llm: Any,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    """Every step: COLD slots in use == the agents' own tokens (computed or scheduled),
    and the prefix sits once in HOT. A hit reads the prefix's whole hash chunks from HOT
    (16 tokens each), so each agent computes the prefix's last Lp % 16 tokens in COLD:
    used = Lp + sum of per-agent tokens + n * (Lp % 16), exactly."""
    n, lp, s, m = 8, 300, 24, 10
    prefix = tokens(11, lp)
    rec = register(gk_llm, "mem", prefix, prefix_id="mem-ctx")
    generate(stock_llm, [prefix], params(1))  # stock: the prefix in its prefix cache
    agents = [prefix + tokens(600 + j, s) for j in range(n)]
    for llm in (gk_llm, stock_llm):
        control(llm, "reset_peaks", track=True)
    assert_same(generate(stock_llm, agents, params(m)),
                generate(gk_llm, agents, params(m, bind_args("mem", "mem-ctx"))))
    gk = control(gk_llm, "stats")["scheduler"]
    stock = control(stock_llm, "stats")["scheduler"]
    assert rec["length"] == lp and gk["steps"] >= m
    assert gk["max_over"] == 0 and gk["max_shared"] == 0, gk  # slots == tokens, every step
    tail = lp % 16  # 12: the prefix's tokens after its last whole chunk
    assert 0 < gk["peak_cold_used"] <= n * (s + m - 1 + tail)
    # Stock pages at 16 tokens: its slots in use exceed its tokens by the partial blocks
    # (the last block of each agent, plus the shared prefix's partial block).
    assert stock["peak_cold_used"] > lp + gk["peak_cold_used"]
    with capsys.disabled():
        print(f"\nKV slots at peak, {n} agents on a {lp}-token prefix: GraniKV {lp} HOT + "
              f"{gk['peak_cold_used']} COLD = {lp + gk['peak_cold_used']}, no slot beyond the "
              f"tokens in any step; stock vLLM at block 16: {stock['peak_cold_used']}")


def test_pinned_survives_pressure_that_evicts_unpinned(gk_llm: Any) -> None:
    keep = register(gk_llm, "pins", tokens(12, 100), prefix_id="pin-keep")
    loose = register(gk_llm, "pins", tokens(13, 100), prefix_id="pin-loose", pin=False)
    assert keep["state"] == loose["state"] == "ready" and not loose["pinned"]
    hot = control(gk_llm, "stats")
    run = hot["hot"]["largest_free_run"]
    big = register(gk_llm, "pins", tokens(14, run + 50), prefix_id="pin-big")
    after = control(gk_llm, "stats")
    assert big["state"] == "ready"
    assert control(gk_llm, "get", prefix_id="pin-keep", team="pins")["state"] == "ready"
    assert control(gk_llm, "get", prefix_id="pin-loose", team="pins")["state"] == "cold"
    assert after["evictions"] == hot["evictions"] + 1
    for pid in ("pin-keep", "pin-loose", "pin-big"):
        control(gk_llm, "unregister", prefix_id=pid, team="pins")


def test_unregister_while_in_use_defers_the_free(stock_llm: Any, gk_llm: Any) -> None:
    prefix = tokens(15, 150)
    register(gk_llm, "defer", prefix, prefix_id="defer-ctx")
    used0 = control(gk_llm, "stats")["hot"]["used"]
    prompt = prefix + tokens(16, 20)
    engine = gk_llm.llm_engine
    engine.add_request("defer-1", TokensPrompt(prompt_token_ids=prompt),
                       params(30, bind_args("defer", "defer-ctx")))
    outputs = []
    while not outputs or len(outputs[-1].outputs[0].token_ids) < 5:
        outputs = [o for o in engine.step() if o.request_id == "defer-1"] or outputs
    reply = control(gk_llm, "unregister", prefix_id="defer-ctx", team="defer")
    assert reply["freed_now"] is False
    with pytest.raises(PrefixNotFound):
        control(gk_llm, "get", prefix_id="defer-ctx", team="defer")
    mid = control(gk_llm, "stats")["hot"]
    assert mid["used"] == used0  # the slots stay while the request reads them
    # A registration that would need the doomed slots cannot take them while in use.
    engine.add_request("defer-squeeze", TokensPrompt(
        prompt_token_ids=tokens(17, mid["largest_free_run"] + 1)),
        register_params("defer", "defer-squeeze"))
    final = None
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.request_id == "defer-1" and o.finished:
                final = o
    squeeze = control(gk_llm, "get", prefix_id="defer-squeeze", team="defer")
    assert squeeze["state"] == "cold"  # a referenced prefix is never evicted
    assert final is not None
    got = [(list(final.outputs[0].token_ids), [lp[t].logprob for t, lp in zip(
        final.outputs[0].token_ids, final.outputs[0].logprobs or [])])]
    assert_same(generate(stock_llm, [prompt], params(30)), got)
    assert control(gk_llm, "stats")["hot"]["used"] == used0 - 150
    control(gk_llm, "unregister", prefix_id="defer-squeeze", team="defer")


def test_control_errors_are_typed(gk_llm: Any) -> None:
    register(gk_llm, "alpha", tokens(18, 40), prefix_id="alpha-ctx")
    with pytest.raises(PrefixNotFound):
        control(gk_llm, "get", prefix_id="nope", team="alpha")
    from granikv_engine.prefix_registry import PrefixAccessDenied

    with pytest.raises(PrefixAccessDenied):
        control(gk_llm, "unregister", prefix_id="alpha-ctx", team="beta")
    listed = control(gk_llm, "list", team="alpha")["prefixes"]
    assert [p["prefix_id"] for p in listed] == ["alpha-ctx"]
