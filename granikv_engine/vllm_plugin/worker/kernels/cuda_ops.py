"""GPU execution of a ``KernelPlan``: FA3 for the HOT slabs and the page-size-1 suffix,
vLLM's CUDA merge (or our Triton indexed merge when the cascade queries are not the whole
step in order), vLLM's CUDA op for K/V writes.

This runs eagerly once per layer between CUDA-graph pieces, so it keeps Python work
small: kernel ops are called directly, shapes were checked when the plan was built
(and by the launchers in ``fa3.py`` in tests).
"""

from __future__ import annotations

import torch

from granikv_engine.attention.triton_merge import merge_indexed_
from granikv_engine.step_plan import KernelPlan

Tensor = torch.Tensor


class CudaOps:
    name = "fa3"

    def __init__(self) -> None:
        import vllm.vllm_flash_attn  # noqa: F401  (registers torch.ops._vllm_fa3_C)
        from vllm._custom_ops import reshape_and_cache_flash
        from vllm.v1.attention.ops.merge_attn_states import merge_attn_states

        self._fwd = torch.ops._vllm_fa3_C.fwd
        self._write = reshape_and_cache_flash
        self._merge = merge_attn_states
        self._one: Tensor | None = None

    def schedule_paged(self, cu_q: Tensor, seq_lens: Tensor, max_q: int, max_k: int,
                       num_q_heads: int, num_kv_heads: int, head_dim: int,
                       dtype: torch.dtype, num_splits: int) -> Tensor:
        """FA3's ahead-of-time schedule for ``forward``'s paged pass over page-size-1
        blocks (as vLLM's FlashAttention backend makes it for FULL CUDA graphs)."""
        return _schedule(cu_q, seq_lens, max_q, max_k, num_q_heads, num_kv_heads,
                         head_dim, dtype, num_splits, page_size=1, causal=True)

    def schedule_dense(self, cu_q: Tensor, seqused_k: Tensor, max_q: int, max_k: int,
                       num_q_heads: int, num_kv_heads: int, head_dim: int,
                       dtype: torch.dtype, num_splits: int) -> Tensor:
        """FA3's ahead-of-time schedule for ``forward``'s dense HOT pass (varlen
        queries, each group's keys a contiguous slab of ``seqused_k`` slots,
        non-causal), for the graph form of a plan (graph_plan.py)."""
        return _schedule(cu_q, seqused_k, max_q, max_k, num_q_heads, num_kv_heads,
                         head_dim, dtype, num_splits, page_size=None, causal=False)

    def warm_up_merge(self, num_heads: int, head_dim: int, dtype: torch.dtype,
                      device: torch.device) -> None:
        """Compile the Triton merge for these shapes now: a FULL graph captures it, and
        a kernel compiled during stream capture would break the capture."""
        out = torch.zeros(1, num_heads, head_dim, dtype=dtype, device=device)
        lse = torch.zeros(num_heads, 1, dtype=torch.float32, device=device)
        merge_indexed_(out, lse, out.clone(), lse.clone(),
                       torch.full((1,), -1, dtype=torch.int32, device=device))

    def write_kv(self, key: Tensor, value: Tensor, k_cache: Tensor, v_cache: Tensor,
                 slot_mapping: Tensor, k_scale: Tensor | None = None,
                 v_scale: Tensor | None = None) -> None:
        if k_scale is None or v_scale is None:
            if self._one is None:
                self._one = torch.ones((), dtype=torch.float32, device=key.device)
            k_scale = v_scale = self._one
        # [num_slots, Hkv, D] -> [num_blocks, 1, Hkv, D] pages, as the op expects
        self._write(key, value, k_cache.unsqueeze(1), v_cache.unsqueeze(1), slot_mapping,
                    "auto", k_scale, v_scale)

    def forward(self, q: Tensor, k_cache: Tensor, v_cache: Tensor, plan: KernelPlan,
                scale: float, out: Tensor) -> None:
        kp, vp = k_cache.unsqueeze(1), v_cache.unsqueeze(1)
        # Causal paged attention, page size 1: the COLD suffix of cascade rows, the whole
        # sequence of the others.
        _, lse = self._fa3(q, kp, vp, out=out, cu_q=plan.query_start_loc, cu_k=None,
                           seqused_k=plan.kv_seq_lens, max_q=plan.max_q, max_k=plan.max_kv,
                           page_table=plan.block_table, scale=scale, causal=True,
                           scheduler_metadata=plan.scheduler_metadata,
                           num_splits=plan.num_splits)
        d = plan.cascade_dev
        if d is None:
            return
        q_c = q if d.identity else q.index_select(
            0, plan.cascade_q_index if d.gather is None else d.gather)
        # Dense, non-causal: every group's queries against its contiguous HOT slab.
        o_hot, lse_hot = self._fa3(q_c, k_cache, v_cache, out=None, cu_q=d.cu_q, cu_k=d.cu_k,
                                   seqused_k=d.seqused_k, max_q=d.max_q, max_k=d.max_k,
                                   page_table=None, scale=scale, causal=False,
                                   scheduler_metadata=d.scheduler_metadata,
                                   num_splits=d.num_splits)
        if d.identity:
            self._merge(out, o_hot, lse_hot, out, lse)
        else:
            merge_indexed_(out, lse, o_hot, lse_hot, plan.cascade_q_index)


    def _fa3(self, q: Tensor, k: Tensor, v: Tensor, *, out: Tensor | None,
             cu_q: Tensor, cu_k: Tensor | None, seqused_k: Tensor, max_q: int, max_k: int,
             page_table: Tensor | None, scale: float, causal: bool,
             scheduler_metadata: Tensor | None, num_splits: int) -> tuple[Tensor, Tensor]:
        """FA3's varlen forward (``torch.ops._vllm_fa3_C.fwd``: 37 positional arguments,
        in vLLM 0.26's order) with what GraniKV sets named: no new K/V, no sliding window,
        no softcap, no scales, LSE returned. Returns (out, lse)."""
        o, lse, _, _ = self._fwd(
            q, k, v, None, None, None, out, cu_q, cu_k, None, None, seqused_k, max_q, max_k,
            page_table, None, None, None, None, None, None, None, None, scale, causal, -1, -1,
            0.0, True, scheduler_metadata, num_splits, None, 0, None, 1, 0, None)
        return o, lse


def _schedule(cu_q: Tensor, k_lens: Tensor, max_q: int, max_k: int, num_q_heads: int,
              num_kv_heads: int, head_dim: int, dtype: torch.dtype, num_splits: int,
              page_size: int | None, causal: bool) -> Tensor:
    from vllm.vllm_flash_attn import get_scheduler_metadata

    meta: Tensor = get_scheduler_metadata(
        batch_size=k_lens.shape[0], max_seqlen_q=max_q, max_seqlen_k=max_k,
        num_heads_q=num_q_heads, num_heads_kv=num_kv_heads, headdim=head_dim,
        cache_seqlens=k_lens, qkv_dtype=dtype, cu_seqlens_q=cu_q, page_size=page_size,
        causal=causal, window_size=(-1, -1), num_splits=num_splits)
    return meta
