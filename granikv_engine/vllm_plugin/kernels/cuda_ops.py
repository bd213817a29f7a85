"""GPU execution of a ``KernelPlan``: FA3 for the HOT slabs and the page-size-1 suffix,
our Triton kernel for the in-place merge, vLLM's CUDA op for K/V writes."""

from __future__ import annotations

import torch

from granikv_engine.attention.triton_merge import merge_indexed_
from granikv_engine.step_plan import KernelPlan
from granikv_engine.vllm_plugin.kernels import fa3

Tensor = torch.Tensor


class CudaOps:
    name = "fa3"

    def write_kv(self, key: Tensor, value: Tensor, k_cache: Tensor, v_cache: Tensor,
                 slot_mapping: Tensor, k_scale: Tensor | None = None,
                 v_scale: Tensor | None = None) -> None:
        from vllm._custom_ops import reshape_and_cache_flash

        one = torch.ones((), dtype=torch.float32, device=key.device)
        # [num_slots, Hkv, D] -> [num_blocks, 1, Hkv, D] pages, as the op expects
        reshape_and_cache_flash(key, value, k_cache.unsqueeze(1), v_cache.unsqueeze(1),
                                slot_mapping, "auto", one if k_scale is None else k_scale,
                                one if v_scale is None else v_scale)

    def forward(self, q: Tensor, k_cache: Tensor, v_cache: Tensor, plan: KernelPlan,
                scale: float, out: Tensor) -> None:
        kp, vp = k_cache.unsqueeze(1), v_cache.unsqueeze(1)
        lse = fa3.paged(q, kp, vp, plan.query_start_loc, plan.kv_seq_lens, plan.block_table,
                        plan.max_q, plan.max_kv, scale, out, want_lse=bool(plan.cascade))
        if not plan.cascade:
            return
        assert lse is not None and plan.cascade_dev is not None
        d = plan.cascade_dev
        idx = plan.cascade_q_index
        q_c = q.index_select(0, idx) if not d.identity else q.contiguous()
        o_hot, lse_hot = fa3.dense_prefix(q_c, k_cache, v_cache, d.cu_q, d.cu_k, d.seqused_k,
                                          d.max_q, d.max_k, scale)
        merge_indexed_(out, lse.contiguous(), o_hot, lse_hot, idx)
