"""HOT + COLD + merge equals full attention, on fresh random inputs."""

import pytest
import torch

from granikv_engine.attention.reference import (
    full_attention,
    hot_prefix_attention,
    merge_attn_states,
    paged_attention,
)
from granikv_engine.dispatcher import Backend
from granikv_engine.step_plan import StepPlan


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def build_cache(n_slots: int, hkv: int, d: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    k = torch.randn(n_slots, hkv, d, generator=gen)
    v = torch.randn(n_slots, hkv, d, generator=gen)
    return k, v


@pytest.mark.parametrize("group", [1, 4, 5, 7, 8])
@pytest.mark.parametrize(("lp", "suffix", "q_len"), [(37, 5, 1), (64, 20, 20), (1, 9, 4),
                                                     (200, 1, 1)])
def test_hot_cold_merge_equals_full(group: int, lp: int, suffix: int, q_len: int) -> None:
    gen = torch.Generator().manual_seed(hash((group, lp, suffix, q_len)) % 2**31)
    hkv, d = 2, 16
    h = hkv * group
    q_len = min(q_len, suffix)
    k_seq, v_seq = build_cache(lp + suffix, hkv, d, gen)
    q = torch.randn(q_len, h, d, generator=gen)
    scale = d ** -0.5
    ref, ref_lse = full_attention(q, k_seq, v_seq, scale)
    o_hot, l_hot = hot_prefix_attention(q, k_seq[:lp], v_seq[:lp], scale)
    # the COLD part in scattered slots (page size 1), at positions lp..lp+suffix-1
    perm = torch.randperm(suffix + 50, generator=gen)[:suffix] + 1000
    kc, vc = build_cache(2000, hkv, d, gen)
    kc[perm], vc[perm] = k_seq[lp:], v_seq[lp:]
    o_cold, l_cold = paged_attention(
        q, kc, vc, torch.tensor([0, q_len]), torch.tensor([0, suffix]), perm,
        torch.tensor([lp]), torch.tensor([lp + suffix]), scale)
    out, lse = merge_attn_states(o_cold, l_cold, o_hot, l_hot)
    assert rel(out, ref) < 1e-5
    assert torch.allclose(lse, ref_lse, atol=1e-5)


def test_merge_with_an_empty_part_is_the_other_part() -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, 8, generator=gen)
    la = torch.randn(4, 3, generator=gen)
    empty_lse = torch.full((4, 3), float("-inf"))
    out, lse = merge_attn_states(a, la, torch.zeros_like(a), empty_lse)
    assert torch.equal(out, a) and torch.allclose(lse, la)
    out, lse = merge_attn_states(torch.zeros_like(a), empty_lse, torch.zeros_like(a), empty_lse)
    assert not out.isnan().any() and torch.isinf(lse).all()


@pytest.mark.parametrize("group", [4, 5])
def test_a_whole_step_through_the_plan(group: int) -> None:
    """Two teams, a prefill row and decode rows, one row without prefix: the lowered
    cascade plan (dense HOT per group + paged suffix + merge) equals per-row full
    attention, and so does the all-paged plan."""
    gen = torch.Generator().manual_seed(7 + group)
    hkv, d = 2, 32
    h = hkv * group
    scale = d ** -0.5
    kc, vc = build_cache(600, hkv, d, gen)
    prefixes = {"A": (10, 64), "B": (100, 130)}  # (start slot, length) in the HOT arena
    rows = [("A", 1, 9), ("A", 7, 7), ("B", 1, 3), (None, 4, 12), ("A", 1, 20)]
    free = iter(range(300, 600))
    tables, seq_lens, q_lens = [], [], []
    for team, q_len, own in rows:
        hot = list(range(prefixes[team][0], sum(prefixes[team]))) if team else []
        tables.append(hot + [next(free) for _ in range(own)])
        seq_lens.append(len(tables[-1]))
        q_lens.append(q_len)
    width = max(seq_lens) + 3
    bt = torch.full((len(rows), width), 7, dtype=torch.int32)  # stale entries point at 7
    for i, t in enumerate(tables):
        bt[i, : len(t)] = torch.tensor(t, dtype=torch.int32)
    qsl = torch.tensor([0] + q_lens).cumsum(0).to(torch.int32)
    q = torch.randn(int(qsl[-1]), h, d, generator=gen)
    ref = torch.cat([full_attention(q[qsl[i]:qsl[i + 1]], kc[torch.tensor(t)], vc[torch.tensor(t)],
                                    scale)[0] for i, t in enumerate(tables)])
    plan = StepPlan.build(qsl, torch.tensor(seq_lens, dtype=torch.int32), bt, (1, 300))
    assert [g.rows for g in plan.groups] == [(0, 1, 4), (2,)]
    for choice in (Backend.CASCADE, Backend.PAGED):
        kp = plan.lower([choice] * len(plan.groups))
        out = run_plan(q, kc, vc, kp, scale)
        assert rel(out, ref) < 1e-5, choice


def run_plan(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, kp, scale: float) -> torch.Tensor:  # type: ignore[no-untyped-def]
    indptr, indices = kp.kv_csr()
    seq_lens = kp.kv_seq_lens + kp.kv_pos_start
    out, lse = paged_attention(q, kc, vc, kp.query_start_loc, indptr, indices, kp.kv_pos_start,
                               seq_lens, scale)
    for g in kp.cascade:
        idx = kp.cascade_q_index[g.q_begin:g.q_end]
        slab = slice(g.hot_start, g.hot_start + g.hot_len)
        o_hot, l_hot = hot_prefix_attention(q[idx], kc[slab], vc[slab], scale)
        out[idx], _ = merge_attn_states(out[idx], lse[:, idx], o_hot, l_hot)
    return out
