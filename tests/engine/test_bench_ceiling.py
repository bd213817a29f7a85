"""bench/ceiling.py: the priced prefix work of a ceiling, with exact numbers."""

from __future__ import annotations

from granikv_engine.bench.ceiling import (
    CONTEXT_FLOPS,
    Rates,
    Shape,
    Work,
    ceiling,
    context_pass_s,
    decode_groups,
    prefix_work,
)
from granikv_engine.bench.workloads import WORKLOADS, mix

# 2 layers, 4 query heads, 2 KV heads, head_dim 8, 2-byte K/V. At these rates a layer's
# context pass of q queries over c tokens takes c * max(q / 8, 1) s: 128*q*c FLOP at
# 1024 FLOP/s, or 64*c bytes at 64 B/s (memory-bound up to 8 queries).
SHAPE = Shape(layers=2, heads=4, kv_heads=2, head_dim=8, dtype_bytes=2)
RATES = Rates(context_flops=1024.0, hbm_bytes_s=64.0)


def test_a_context_pass_costs_the_slower_of_compute_and_bytes() -> None:
    assert context_pass_s(SHAPE, RATES, 2, 32) == 32.0  # memory-bound: K/V read once
    assert context_pass_s(SHAPE, RATES, 8, 32) == 32.0  # the knee
    assert context_pass_s(SHAPE, RATES, 16, 32) == 64.0  # compute-bound


def test_decode_groups_follow_the_ideal_schedule() -> None:
    # (team, decode steps): two slots; the third request takes the first free slot
    groups = decode_groups([(0, 2), (1, 1), (0, 3)], slots=2)
    assert groups == {(0, 1): 3, (1, 1): 1, (0, 2): 1}
    assert decode_groups([(0, 0), (1, 2)], slots=1) == {(1, 1): 2}  # no decode step: none
    assert decode_groups([(0, 3)] * 4 + [(1, 3)] * 2, slots=8) == {(0, 4): 3, (1, 2): 3}


def test_prefix_work_prices_prefill_and_context_passes() -> None:
    contexts = [16, 32]
    reqs = [(0, 16, 3), (1, 4, 2), (0, 8, 4)]  # (team, fresh tokens, generated tokens)
    work = prefix_work(SHAPE, RATES, contexts, reqs, slots=2)
    # prefill: 16*2 + 32*1 + 16*1 = 80 a layer; decode steps as in the test above:
    # 3 passes of (team 0, 1 row) = 48, (team 1, 1 row) = 32, (team 0, 2 rows) = 16
    assert work == Work(prefill_s=160.0, decode_s=192.0, passes=5)
    c = ceiling(48.0, 9, work)
    assert (c["wall_s"], c["tok_s"], c["no_context_wall_s"]) == (400.0, 9 / 400, 48.0)


def test_the_context_rate_is_the_kernel_benchmark_s_marginal_rate() -> None:
    # the cascade from B=256 (194.9 us) to B=512 (323.6 us) at Lp=16K, S=64, Llama shapes
    assert abs(CONTEXT_FLOPS / 5.36e14 - 1) < 1e-3


def test_w6_prices_every_request_and_more_passes_with_fewer_slots() -> None:
    w = WORKLOADS["W6"]
    llama = Shape(layers=32, heads=32, kv_heads=8, head_dim=128)
    reqs = mix(w)
    wide = prefix_work(llama, Rates(), w.prefix_lens, reqs, slots=384)
    narrow = prefix_work(llama, Rates(), w.prefix_lens, reqs, slots=128)
    assert wide.prefill_s == narrow.prefill_s > 0
    assert wide.passes < narrow.passes and wide.decode_s < narrow.decode_s
    # all 384 at once: every team's longest request decides its passes
    longest = {t: max(o - 1 for tt, _, o in reqs if tt == t) for t in range(6)}
    assert wide.passes == sum(longest.values())
