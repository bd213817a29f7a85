"""Implicit HOT on an engine of its own (``implicit_hot`` on, heads of 64+ tokens
promoted on their second COLD hit): prompts that share a head, sent with nothing
registered and no arguments, are promoted, bound and served from HOT with stock vLLM's
greedy tokens; a registration of the same tokens adopts the entry; the implicit budget
holds, and explicit prefixes are never evicted by implicit ones."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from granikv_engine.vllm_plugin.client import control, register
from tests.vllm_plugin.conftest import HOT_SLOTS, _calibration, _start
from tests.vllm_plugin.helpers import assert_same, generate, params, tokens

pytestmark = pytest.mark.vllm

BUDGET = HOT_SLOTS // 4


@pytest.fixture(scope="module")
def implicit_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    cal = _calibration(tmp_path_factory.mktemp("implicit"))  # groups of 3+: the cascade
    llm = _start(additional_config={"granikv": {
        "enabled": True, "hot_slots": HOT_SLOTS, "calibration_path": cal,
        "min_hot_len": 16, "implicit_hot": True,
        "implicit_fraction": 0.25, "implicit_min_len": 64, "implicit_min_hits": 2}})
    yield llm
    llm.llm_engine.engine_core.shutdown()


def _stats(llm: Any) -> dict[str, Any]:
    return control(llm, "stats", workers=False)


def test_a_shared_head_is_promoted_bound_and_served_from_hot(stock_llm: Any,
                                                             implicit_llm: Any) -> None:
    head = tokens(70, 200)  # 12 whole chunks: 192 tokens promoted
    first = [head + tokens(710 + j, 6 + j) for j in range(6)]
    assert_same(generate(stock_llm, first, params(5)), generate(implicit_llm, first, params(5)))
    st = _stats(implicit_llm)
    assert st["implicit"]["promotions"] == 1 and st["implicit"]["entries"] == 1
    (entry,) = [p for p in control(implicit_llm, "list")["prefixes"] if p["implicit"]]
    assert entry["length"] == 192 and entry["state"] == "ready" and entry["team"] == "default"
    assert st["implicit"]["used"] == 192 <= st["implicit"]["budget"] == BUDGET
    # sent the ordinary way again: bound to the head by prompt matching, read from HOT
    later = [head + tokens(720 + j, 4 + j) for j in range(5)]
    assert_same(generate(stock_llm, later, params(6)), generate(implicit_llm, later, params(6)))
    after = _stats(implicit_llm)
    assert after["hits"]["implicit_hits"] - st["hits"]["implicit_hits"] == 5
    assert after["hits"]["hit_tokens"] - st["hits"]["hit_tokens"] == 5 * 192
    assert after["implicit"]["hits"] == after["hits"]["implicit_hits"]
    assert control(implicit_llm, "stats")["dispatch"]["groups"].get("cascade", 0) > 0
    # the entry holds the head's K/V: what a fill of the same tokens writes (another
    # team registers them, so its prefix is its own)
    fill = register(implicit_llm, "other", head[:192], prefix_id="other-ctx")
    assert fill["state"] == "ready" and fill["hot_start"] != entry["hot_start"]
    (got,) = {tuple(map(tuple, r)) for r in implicit_llm.collective_rpc(
        "granikv_slot_kv", args=(entry["hot_start"], 192))}
    (want,) = {tuple(map(tuple, r)) for r in implicit_llm.collective_rpc(
        "granikv_slot_kv", args=(fill["hot_start"], 192))}
    assert len(got) == len(want) > 0 and any(v != 0 for v in want[0])
    for layer_got, layer_want in zip(got, want, strict=True):
        assert layer_got == pytest.approx(layer_want, rel=1e-4, abs=1e-4)
    control(implicit_llm, "unregister", prefix_id="other-ctx", team="other")
    # registering the same tokens adopts the entry: no second copy, no refill
    used = after["hot"]["used"]
    rec = register(implicit_llm, "default", head[:192], prefix_id="adopted-ctx")
    assert rec["state"] == "ready" and rec["pinned"] and not rec["implicit"]
    adopted = _stats(implicit_llm)
    assert adopted["implicit"]["adoptions"] == 1 and adopted["implicit"]["entries"] == 0
    assert adopted["hot"]["used"] == used
    control(implicit_llm, "unregister", prefix_id="adopted-ctx", team="default")


def test_implicit_heads_stay_in_their_budget(stock_llm: Any, implicit_llm: Any) -> None:
    kept = register(implicit_llm, "default", tokens(80, 300), prefix_id="kept-ctx",
                    pin=False)  # explicit, unpinned: still never evicted by implicit ones
    assert kept["state"] == "ready"
    before = _stats(implicit_llm)["implicit"]
    for h in range(4):  # four heads of 192 tokens; the budget holds two
        head = tokens(90 + h, 192 + 5)
        prompts = [head + tokens(900 + 10 * h + j, 3) for j in range(4)]
        assert_same(generate(stock_llm, prompts, params(3)),
                    generate(implicit_llm, prompts, params(3)))
    st = _stats(implicit_llm)["implicit"]
    assert st["promotions"] - before["promotions"] == 4
    assert st["evictions"] - before["evictions"] >= 2
    assert st["used"] <= BUDGET
    assert control(implicit_llm, "get", prefix_id="kept-ctx", team="default")["state"] == "ready"
    control(implicit_llm, "unregister", prefix_id="kept-ctx", team="default")


def test_the_request_that_makes_a_head_due_reads_it_from_hot_in_the_same_step(
        stock_llm: Any, implicit_llm: Any) -> None:
    """A head cached by an earlier step is promoted by the second request that hits it,
    while the step is scheduled: that request and the rest of its batch are bound to it
    at once (only the first reads it from COLD), and the K/V copied in that step, before
    its forward pass, is the head's."""
    head = tokens(60, 170)  # 10 whole chunks: 160 tokens promoted
    generate(implicit_llm, [head + tokens(600, 3)], params(1))  # cached: an earlier step
    generate(stock_llm, [head + tokens(600, 3)], params(1))
    before = _stats(implicit_llm)
    batch = [head + tokens(610 + j, 5 + j) for j in range(6)]  # one step: 6 admissions
    assert_same(generate(stock_llm, batch, params(4)), generate(implicit_llm, batch, params(4)))
    after = _stats(implicit_llm)
    assert after["implicit"]["promotions"] - before["implicit"]["promotions"] == 1
    assert after["hits"]["implicit_hits"] - before["hits"]["implicit_hits"] == 5
    (entry,) = [p for p in control(implicit_llm, "list")["prefixes"]
                if p["implicit"] and p["length"] == 160]
    fill = register(implicit_llm, "other2", head[:160], prefix_id="other2-ctx")
    (got,) = {tuple(map(tuple, r)) for r in implicit_llm.collective_rpc(
        "granikv_slot_kv", args=(entry["hot_start"], 160))}
    (want,) = {tuple(map(tuple, r)) for r in implicit_llm.collective_rpc(
        "granikv_slot_kv", args=(fill["hot_start"], 160))}
    assert any(v != 0 for v in want[0])
    for layer_got, layer_want in zip(got, want, strict=True):
        assert layer_got == pytest.approx(layer_want, rel=1e-4, abs=1e-4)
    control(implicit_llm, "unregister", prefix_id="other2-ctx", team="other2")
