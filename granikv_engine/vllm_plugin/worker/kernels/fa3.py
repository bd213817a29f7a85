"""Launchers for vLLM's FA3 (``vllm.vllm_flash_attn``), checking shapes and strides.

- ``paged``: causal attention over page-size-1 block tables (the COLD suffix, or whole
  sequences for the unified backend). FA3 reads page size 1 through its gather path.
All LSEs are float32, natural log, ``[H, T]``.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def _check_kv(k: Tensor, v: Tensor) -> None:
    assert k.shape == v.shape and k.stride(-1) == 1 and v.stride(-1) == 1, (k.shape, v.shape)
    assert k.dtype == v.dtype and k.dtype in (torch.float16, torch.bfloat16), k.dtype


def paged(q: Tensor, k_pages: Tensor, v_pages: Tensor, cu_q: Tensor, seqused_k: Tensor,
          block_table: Tensor, max_q: int, max_k: int, scale: float, out: Tensor,
          want_lse: bool) -> Tensor | None:
    """q [T, H, D]; k/v pages [num_blocks, page, Hkv, D] (page 1 for GraniKV, 16 for the
    stock baseline); block_table [B, W] int32; writes ``out`` [T, H, D]; returns lse
    [H, T] when asked."""
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    _check_kv(k_pages, v_pages)
    assert k_pages.dim() == 4, k_pages.shape
    assert block_table.dtype == torch.int32 and block_table.dim() == 2, block_table.dtype
    assert seqused_k.dtype == torch.int32 and cu_q.dtype == torch.int32
    res = flash_attn_varlen_func(
        q=q, k=k_pages, v=v_pages, max_seqlen_q=max_q, cu_seqlens_q=cu_q,
        max_seqlen_k=max_k, seqused_k=seqused_k, softmax_scale=scale, causal=True,
        block_table=block_table, return_softmax_lse=want_lse, out=out, fa_version=3)
    return res[1] if want_lse else None
