"""Pure-torch attention references (CPU or GPU). Every fast kernel is checked against these.

Conventions, shared with vLLM's ``merge_attn_states``:
- queries ``q``: ``[T, H, D]``; keys/values: ``[S, Hkv, D]`` with ``H % Hkv == 0`` (GQA);
- outputs ``[T, H, D]`` in the query dtype; log-sum-exp ``[H, T]``, float32, natural log;
- an empty key set gives output 0 and LSE -inf, which the merge treats as "no part".
Math runs in float32 (float64 if the inputs are float64).
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def _acc_dtype(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _attend(q: Tensor, k: Tensor, v: Tensor, scale: float,
            mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """q [T,H,D], k/v [S,Hkv,D], mask [T,S] bool (True = visible) -> out [T,H,D], lse [H,T]."""
    t, h, d = q.shape
    hkv = k.shape[1]
    acc = _acc_dtype(q)
    if k.shape[0] == 0:
        out = torch.zeros(t, h, v.shape[-1], dtype=q.dtype, device=q.device)
        return out, torch.full((h, t), float("-inf"), dtype=acc, device=q.device)
    g = h // hkv
    qf = q.to(acc).view(t, hkv, g, d)
    s = torch.einsum("tkgd,skd->kgts", qf, k.to(acc)) * scale  # [Hkv, G, T, S]
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [Hkv, G, T]
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    out = torch.einsum("kgts,skd->tkgd", p, v.to(acc)).reshape(t, h, -1)
    return out.to(q.dtype), lse.reshape(h, t)


def _check_gqa(q: Tensor, k: Tensor) -> None:
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"{q.shape[1]} query heads are not a multiple of {k.shape[1]}")


def hot_prefix_attention(q: Tensor, k: Tensor, v: Tensor,
                         scale: float) -> tuple[Tensor, Tensor]:
    """All queries of a group against one contiguous prefix slab, non-causal.

    Every query sits after the whole prefix, so no mask is needed."""
    _check_gqa(q, k)
    return _attend(q, k, v, scale, None)


def causal_mask(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """[T, S] bool: key at absolute position p is visible to a query at t iff p <= t."""
    return k_pos.unsqueeze(0) <= q_pos.unsqueeze(1)


def paged_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, query_start_loc: Tensor,
                    kv_indptr: Tensor, kv_indices: Tensor, kv_pos_start: Tensor,
                    seq_lens: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """Causal attention over token-granularity slots (page size 1).

    Row ``i`` owns queries ``q[query_start_loc[i]:query_start_loc[i+1]]`` at the last
    positions of a sequence of ``seq_lens[i]`` tokens, and the keys in slots
    ``kv_indices[kv_indptr[i]:kv_indptr[i+1]]``, which hold absolute positions
    ``kv_pos_start[i]`` onwards (0 for the whole sequence; the HOT length for a COLD part).
    ``k_cache``/``v_cache``: ``[num_slots, Hkv, D]``.
    """
    _check_gqa(q, k_cache)
    h = q.shape[1]
    out = torch.empty(q.shape[0], h, v_cache.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(h, q.shape[0], dtype=_acc_dtype(q), device=q.device)
    qsl, ind, ptr = query_start_loc.tolist(), kv_indices.to(torch.long), kv_indptr.tolist()
    for i, (seq_len, p0) in enumerate(zip(seq_lens.tolist(), kv_pos_start.tolist())):
        qa, qb = qsl[i], qsl[i + 1]
        if qb == qa:
            continue
        slots = ind[ptr[i]:ptr[i + 1]]
        q_pos = torch.arange(seq_len - (qb - qa), seq_len, device=q.device)
        k_pos = torch.arange(p0, p0 + slots.numel(), device=q.device)
        o, s = _attend(q[qa:qb], k_cache[slots], v_cache[slots], scale,
                       causal_mask(q_pos, k_pos))
        out[qa:qb], lse[:, qa:qb] = o, s
    return out, lse


def merge_attn_states(out_a: Tensor, lse_a: Tensor, out_b: Tensor,
                      lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Combine two partial attentions over disjoint key sets by log-sum-exp."""
    acc = _acc_dtype(out_a)
    la, lb = lse_a.to(acc), lse_b.to(acc)
    m = torch.maximum(la, lb)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # both empty: avoid inf-inf
    wa, wb = torch.exp(la - m), torch.exp(lb - m)
    tot = wa + wb
    lse = torch.log(tot) + m
    tot = torch.where(tot == 0, torch.ones_like(tot), tot)
    wa, wb = (wa / tot).T.unsqueeze(-1), (wb / tot).T.unsqueeze(-1)  # [T, H, 1]
    out = out_a.to(acc) * wa + out_b.to(acc) * wb
    return out.to(out_a.dtype), lse


def full_attention(q: Tensor, k_seq: Tensor, v_seq: Tensor,
                   scale: float) -> tuple[Tensor, Tensor]:
    """Causal attention of the last ``T`` positions of one sequence over all its
    ``S`` keys (``k_seq`` ``[S, Hkv, D]`` in position order)."""
    _check_gqa(q, k_seq)
    s, t = k_seq.shape[0], q.shape[0]
    q_pos = torch.arange(s - t, s, device=q.device)
    k_pos = torch.arange(s, device=q.device)
    return _attend(q, k_seq, v_seq, scale, causal_mask(q_pos, k_pos))
