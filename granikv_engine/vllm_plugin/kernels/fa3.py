"""Launchers for vLLM's FA3 (``vllm.vllm_flash_attn``), checking shapes and strides.

- ``dense_prefix``: all cascade queries against their groups' contiguous HOT slabs,
  non-causal, in one launch: the K/V "varlen" layout starts each group at its slab
  (``cu_seqlens_k[g] = hot_start``) and ``seqused_k`` gives its length. The Python
  wrapper refuses both arguments together; the kernel op takes them.
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


def dense_prefix(q: Tensor, k_flat: Tensor, v_flat: Tensor, cu_q: Tensor, cu_k: Tensor,
                 seqused_k: Tensor, max_q: int, max_k: int, scale: float,
                 out: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """q [Qc, H, D] group-major; k/v [num_slots, Hkv, D]; cu_q [G+1], cu_k [G+1],
    seqused_k [G] int32 on the GPU. Returns (out [Qc, H, D], lse [H, Qc])."""
    import vllm.vllm_flash_attn  # noqa: F401  (registers torch.ops._vllm_fa3_C)

    _check_kv(k_flat, v_flat)
    assert q.dim() == 3 and q.stride(-1) == 1 and q.shape[2] == k_flat.shape[2], q.shape
    assert q.shape[1] % k_flat.shape[1] == 0, (q.shape, k_flat.shape)
    g = seqused_k.shape[0]
    assert cu_q.shape == (g + 1,) and cu_k.shape == (g + 1,), (cu_q.shape, cu_k.shape, g)
    assert cu_q.dtype == cu_k.dtype == seqused_k.dtype == torch.int32
    o, lse, _, _ = torch.ops._vllm_fa3_C.fwd(
        q, k_flat, v_flat, None, None, None, out, cu_q, cu_k, None, None, seqused_k,
        max_q, max_k, None, None, None, None, None, None, None, None, None, scale,
        False, -1, -1, 0.0, True, None, 0, None, 0, None, 1, 0, None)
    return o, lse


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
