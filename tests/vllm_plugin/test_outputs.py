"""GraniKV-enabled vLLM gives stock vLLM's greedy tokens (float32, CPU)."""

from __future__ import annotations

from typing import Any

import pytest

from granikv_engine.vllm_plugin.client import bind_args, control, register
from tests.vllm_plugin.helpers import LOGPROB_TOL, assert_same, generate, params, tokens

pytestmark = pytest.mark.vllm


def test_one_team_many_agents(stock_llm: Any, gk_llm: Any) -> None:
    prefix = tokens(1, 300)
    rec = register(gk_llm, "red", prefix, prefix_id="red-ctx")
    assert rec["state"] == "ready" and rec["length"] == 300 and rec["pinned"]
    st = control(gk_llm, "stats")
    agents = [prefix + tokens(100 + j, 5 + 3 * j) for j in range(12)]
    sp = params(16, bind_args("red", "red-ctx"))
    assert_same(generate(stock_llm, agents, params(16)), generate(gk_llm, agents, sp))
    stats = control(gk_llm, "stats")
    assert stats["hits"]["hits"] - st["hits"]["hits"] == 12
    # the prefix's whole 16-token chunks were never re-hashed: their chain was copied
    seeded = stats["seeded_hash_tokens"] - st["seeded_hash_tokens"]
    assert seeded == 12 * (300 // 16 * 16), seeded


def test_several_teams_prefill_decode_and_plain_requests_in_one_batch(
        stock_llm: Any, gk_llm: Any) -> None:
    teams = {"a": tokens(2, 120), "b": tokens(3, 260), "c": tokens(4, 400)}
    for team, toks in teams.items():  # 400 tokens: a chunked (two-step) registration
        assert register(gk_llm, team, toks, prefix_id=f"{team}-ctx")["state"] == "ready"
    prompts, sps_gk = [], []
    for j in range(15):
        team = "abc"[j % 3]
        prompts.append(teams[team] + tokens(200 + j, 3 + (j * 5) % 40))
        sps_gk.append(params(12 + j % 5, bind_args(team, f"{team}-ctx")))
    for j in range(2):  # no prefix at all, same batch
        prompts.append(tokens(300 + j, 50))
        sps_gk.append(params(12))
    sps_stock = [params(sp.max_tokens) for sp in sps_gk]
    assert_same(generate(stock_llm, prompts, sps_stock), generate(gk_llm, prompts, sps_gk))
    dispatch = control(gk_llm, "stats")["dispatch"]
    assert dispatch["groups"].get("cascade", 0) > 0 and dispatch["groups"].get("paged", 0) > 0
    assert dispatch["host_block_table"] >= 1  # steps were planned without a device sync
    # every group counted by its size, every step by its kind; this batch had prefill
    assert sum(dispatch["group_sizes"].values()) == sum(dispatch["groups"].values())
    assert sum(dispatch["step_kinds"].values()) == dispatch["steps"]
    assert any(k.startswith("mixed/") for k in dispatch["step_kinds"])
    assert any(k.startswith("decode/") for k in dispatch["step_kinds"])
    # without the workers (a replica's frequent reports): the engine core's part alone
    core_only = control(gk_llm, "stats", workers=False)
    assert "dispatch" not in core_only and "dispatch_ranks_agree" not in core_only
    assert core_only["hits"] == control(gk_llm, "stats")["hits"]


def test_prompt_match_binds_without_an_id(stock_llm: Any, gk_llm: Any) -> None:
    prefix = tokens(5, 200)
    register(gk_llm, "green", prefix, prefix_id="green-ctx")
    hits = control(gk_llm, "stats")["hits"]["hits"]
    prompts = [prefix + tokens(400 + j, 9) for j in range(4)]
    gk = generate(gk_llm, prompts, params(8, bind_args("green")))
    assert_same(generate(stock_llm, prompts, params(8)), gk)
    assert control(gk_llm, "stats")["hits"]["hits"] - hits == 4


def test_wrong_prompt_or_wrong_team_is_served_without_hot(stock_llm: Any, gk_llm: Any) -> None:
    prefix = tokens(6, 100)
    register(gk_llm, "owner", prefix, prefix_id="owner-ctx")
    st = control(gk_llm, "stats")
    prompts = [tokens(7, 120), prefix + tokens(8, 10)]
    sps = [params(6, bind_args("owner", "owner-ctx")),  # prompt does not start with it
           params(6, bind_args("intruder", "owner-ctx"))]  # another team's prefix
    assert_same(generate(stock_llm, prompts, params(6)), generate(gk_llm, prompts, sps))
    after = control(gk_llm, "stats")
    assert after["events"]["bind_errors"] - st["events"]["bind_errors"] == 2
    assert after["hits"]["hits"] == st["hits"]["hits"]


def test_prefix_larger_than_the_arena_is_served_from_cold(stock_llm: Any, gk_llm: Any) -> None:
    big = tokens(9, 2100)  # the arena holds 2048 slots
    rec = register(gk_llm, "huge", big, prefix_id="huge-ctx")
    assert rec["state"] == "cold" and rec["hot_start"] is None
    st = control(gk_llm, "stats")
    prompts = [big + tokens(500 + j, 7) for j in range(3)]
    assert_same(generate(stock_llm, prompts, params(6)),
                generate(gk_llm, prompts, params(6, bind_args("huge", "huge-ctx"))))
    after = control(gk_llm, "stats")
    assert after["cold_registrations"] >= 1
    assert after["hits"]["cold_fallbacks"] - st["hits"]["cold_fallbacks"] == 3


def test_backends_are_granikv_only_when_enabled(stock_llm: Any, gk_llm: Any) -> None:
    assert stock_llm.collective_rpc("granikv_backend_names") == [["CPU_ATTN"]]
    assert gk_llm.collective_rpc("granikv_backend_names") == [["CUSTOM"]]
    assert stock_llm.llm_engine.vllm_config.cache_config.block_size == 16
    assert gk_llm.llm_engine.vllm_config.cache_config.block_size == 1


def test_prompt_logprobs_of_a_bound_request_cover_the_whole_prompt(
        stock_llm: Any, gk_llm: Any) -> None:
    """A request that asks for prompt logprobs needs every prompt position computed
    (stock vLLM skips its prefix cache for it: ``skip_reading_prefix_cache``), so it
    must not read the HOT prefix either. Found by the API fuzzer: such a request to a
    team route got prompt logprobs with invalid token ids for the HOT positions, and the
    detokenizer's OverflowError killed the engine (EngineDeadError, HTTP 500)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prefix = tokens(11, 150)
    register(gk_llm, "logp", prefix, prefix_id="logp-ctx")
    st = control(gk_llm, "stats")
    prompts = [prefix + tokens(600 + j, 6) for j in range(2)]

    def run(llm: Any, extra: dict[str, Any] | None) -> list[Any]:
        sp = SamplingParams(max_tokens=4, temperature=0.0, prompt_logprobs=2,
                            detokenize=True, extra_args=extra)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp,
                            use_tqdm=False)
        return [(o.outputs[0].token_ids, o.prompt_logprobs) for o in outs]

    stock, gk = run(stock_llm, None), run(gk_llm, bind_args("logp", "logp-ctx"))
    for (ts, ps), (tg, pg), p in zip(stock, gk, prompts, strict=True):
        assert list(ts) == list(tg)
        assert len(pg) == len(ps) == len(p) and pg[0] is None
        for i, (a, b) in enumerate(zip(ps[1:], pg[1:]), start=1):
            assert p[i] in b and set(a) == set(b), (i, a, b)  # same top-2 + the token
            assert abs(a[p[i]].logprob - b[p[i]].logprob) < LOGPROB_TOL, i
    after = control(gk_llm, "stats")
    assert after["hits"]["hits"] == st["hits"]["hits"]  # served without the HOT prefix
    assert after["events"]["prefix_reads_skipped"] - st["events"]["prefix_reads_skipped"] == 2


def test_an_agents_next_turn_hits_its_last_turn_as_stock_does(stock_llm: Any,
                                                              gk_llm: Any) -> None:
    """An agent's next turn resends its whole history (the team prefix, its own tokens,
    its sampled tokens). GraniKV finds the computed tokens of the last turn (all but the
    last sampled token, which was never computed) in whole 16-token hash chunks after
    the HOT prefix's whole chunks: the hit stock vLLM finds at block 16."""
    from vllm.inputs import TokensPrompt

    prefix = tokens(21, 160)
    register(gk_llm, "talk", prefix, prefix_id="talk-ctx")
    first = [prefix + tokens(700 + j, 7 + j) for j in range(3)]
    m = 21
    turn1 = generate(gk_llm, first, params(m, bind_args("talk", "talk-ctx")))
    assert_same(generate(stock_llm, first, params(m)), turn1)
    second = [p + out + tokens(800 + j, 5) for j, (p, (out, _)) in enumerate(zip(first, turn1))]
    outs = {}
    for name, llm, sp in (("gk", gk_llm, params(4, bind_args("talk", "talk-ctx"))),
                          ("stock", stock_llm, params(4))):
        outs[name] = llm.generate([TokensPrompt(prompt_token_ids=p) for p in second], sp,
                                  use_tqdm=False)
    for j, p in enumerate(first):
        assert outs["stock"][j].num_cached_tokens == (len(p) + m - 1) // 16 * 16
        assert outs["gk"][j].num_cached_tokens == outs["stock"][j].num_cached_tokens
        assert outs["gk"][j].outputs[0].token_ids == outs["stock"][j].outputs[0].token_ids
