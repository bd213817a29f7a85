"""An id registered again with other tokens names them: requests bound to it read the
new context from HOT, requests already reading the old one finish on it, its slots are
freed with the last of them, and a request that can only be served from COLD is counted.
Every output is compared with stock vLLM's (float32, CPU)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from vllm import SamplingParams
from vllm.inputs import TokensPrompt
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request

from granikv_engine.hot_pool import HotPool
from granikv_engine.prefix_registry import PrefixRegistry
from granikv_engine.vllm_plugin.client import bind_args, control, register, register_params
from granikv_engine.vllm_plugin.core import kv_manager as kvm
from tests.vllm_plugin.conftest import HOT_SLOTS
from tests.vllm_plugin.helpers import assert_same, generate, params, tokens

pytestmark = pytest.mark.vllm

TEAM, PID = "again", "again-ctx"
CHUNK = 16  # a hit reads a prefix's whole hash chunks from HOT


@pytest.fixture
def empty_arena(gk_llm: Any) -> None:
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


@pytest.mark.usefixtures("empty_arena")
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


@pytest.mark.usefixtures("empty_arena")
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


@pytest.mark.usefixtures("empty_arena")
def test_a_request_racing_the_move_is_served_right_and_never_silently(
        stock_llm: Any, gk_llm: Any) -> None:
    """Bound to the old tokens, sent just before the registration that moves the id: the
    engine core may schedule it before the move (it reads the old context from HOT) or
    after (its prompt does not start with the new context: COLD, counted). Either way
    its output is stock's, and which one it was shows in the counters."""
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
    read_old = after["hits"] - before["hits"]
    replaced = after["cold_replaced"] - before["cold_replaced"]
    assert (read_old, replaced) in ((1, 0), (0, 1)), (before, after)
    assert after["cold_fallbacks"] - before["cold_fallbacks"] == replaced
    assert control(gk_llm, "get", prefix_id=PID, team=TEAM)["length"] == len(new)
    control(gk_llm, "unregister", prefix_id=PID, team=TEAM)


def test_a_request_bound_before_the_id_moved_reads_only_what_its_prompt_starts_with() -> None:
    """The KV manager alone (no engine: the order is the test's): a request bound to the
    old tokens is first scheduled after the id moved. It never reads the new context
    unless its prompt starts with it; otherwise it runs from COLD, counted."""
    init_none_hash(sha256)
    spec = FullAttentionSpec(block_size=1, num_kv_heads=1, head_size=8, dtype=torch.float32)
    cfg = KVCacheConfig(num_blocks=2000, kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    base = KVCacheManager(cfg, max_model_len=1000, scheduler_block_size=1, hash_block_size=1,
                          enable_caching=True)
    arena = kvm.reserve_arena(base.block_pool, 500)
    reg = PrefixRegistry(HotPool(arena.start, arena.length))
    kv = kvm.GraniKVCacheManager.adopt(base, reg, arena, hash_chunk=CHUNK)
    hasher = get_request_block_hasher(CHUNK, sha256)
    old, new = tokens(35, 80), tokens(35, 48)  # the new context is the old one's head
    other = tokens(36, 90)
    for i, (ctx, then, reads) in enumerate(((old, other, 0), (old, new, 48))):
        first = reg.register("t", ctx, f"p{i}")
        reg.mark_ready(first)
        req = Request(f"r{i}", old + tokens(50, 7), SamplingParams(max_tokens=4), None,
                      block_hasher=hasher)
        kv.intents[req.request_id] = kvm.Intent(f"p{i}", False, first)
        moved = reg.register("t", then, f"p{i}")  # before the request is scheduled
        reg.mark_ready(moved)
        counters = dict(vars(kv.hot_counters))
        _, n, _ = kv.get_computed_blocks(req)
        assert n == reads
        if reads:  # its prompt starts with the new tokens: it reads them
            assert kv.held[req.request_id].record is moved
            assert kv.hot_counters.hits == counters["hits"] + 1
        else:
            assert req.request_id not in kv.held
            assert kv.hot_counters.cold_replaced == counters["cold_replaced"] + 1
            assert kv.hot_counters.cold_fallbacks == counters["cold_fallbacks"] + 1
        assert first.hot is None and reg.get(f"p{i}", "t") is moved  # nobody read it


@pytest.mark.usefixtures("empty_arena")
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
