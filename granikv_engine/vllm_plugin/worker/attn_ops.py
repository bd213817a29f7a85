"""Attention execution for one layer and one step, given a lowered ``KernelPlan``.

``TorchOps`` runs the pure-torch references (CPU, and any device as a fallback);
``kernels/cuda_ops.py`` runs FA3 on the GPU. Both take the KV cache as two views
``[num_slots, Hkv, D]`` (page size 1, so one slot is one block).
"""

from __future__ import annotations

from typing import Protocol

import torch

from granikv_engine.attention.reference import (
    hot_prefix_attention,
    merge_attn_states,
    paged_attention,
)
from granikv_engine.step_plan import KernelPlan

Tensor = torch.Tensor


class AttentionOps(Protocol):
    name: str

    def write_kv(self, key: Tensor, value: Tensor, k_cache: Tensor, v_cache: Tensor,
                 slot_mapping: Tensor, k_scale: Tensor | None = None,
                 v_scale: Tensor | None = None) -> None: ...

    def forward(self, q: Tensor, k_cache: Tensor, v_cache: Tensor, plan: KernelPlan,
                scale: float, out: Tensor) -> None: ...


class TorchOps:
    name = "torch"

    def write_kv(self, key: Tensor, value: Tensor, k_cache: Tensor, v_cache: Tensor,
                 slot_mapping: Tensor, k_scale: Tensor | None = None,
                 v_scale: Tensor | None = None) -> None:
        n = slot_mapping.shape[0]  # key/value may be padded past the real tokens
        slots = slot_mapping.to(torch.int64)
        keep = slots >= 0
        k_cache[slots[keep]] = key[:n][keep].to(k_cache.dtype)
        v_cache[slots[keep]] = value[:n][keep].to(v_cache.dtype)

    def forward(self, q: Tensor, k_cache: Tensor, v_cache: Tensor, plan: KernelPlan,
                scale: float, out: Tensor) -> None:
        indptr, indices = plan.kv_csr()
        seq_lens = plan.kv_seq_lens + plan.kv_pos_start
        o, lse = paged_attention(q, k_cache, v_cache, plan.query_start_loc, indptr, indices,
                                 plan.kv_pos_start, seq_lens, scale)
        for g in plan.cascade:
            idx = plan.cascade_q_index[g.q_begin:g.q_end]
            slab = slice(g.hot_start, g.hot_start + g.hot_len)
            o_hot, l_hot = hot_prefix_attention(q[idx], k_cache[slab], v_cache[slab], scale)
            o[idx], _ = merge_attn_states(o[idx], lse[:, idx], o_hot, l_hot)
        out.copy_(o)


def ops_for(device: torch.device) -> AttentionOps:
    if device.type == "cuda":
        from granikv_engine.vllm_plugin.worker.kernels.cuda_ops import CudaOps

        return CudaOps()
    return TorchOps()
