"""Merge each cascade query's HOT partial attention into the step output, in place.

``out[idx[j]] <- merge(out[idx[j]], lse_s[:, idx[j]]; o_hot[j], lse_hot[:, j])``,
skipping entries with ``idx[j] < 0`` (the padding of a graph-form plan).

The suffix (COLD) pass has already written ``out`` and ``lse_s`` for every token; the
HOT pass wrote ``o_hot`` group-major. One launch, no gather of the suffix partials and no
scatter of the merged result: each program handles one (query, head) pair.
Reference: ``reference.merge_attn_states`` applied row by row (see the tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


# Sizes change every step, and the index and LSE pointers may be views at any offset:
# no specialisation on them (each new variant would JIT mid-run; their loads are scalar).
# The output rows stay specialised: a layer's output and FA3's are 16-byte aligned.
@triton.jit(do_not_specialize=["n_tokens", "n_hot"],
            do_not_specialize_on_alignment=["s_lse_ptr", "h_lse_ptr", "idx_ptr"])
def _merge_indexed(out_ptr, s_lse_ptr, h_out_ptr, h_lse_ptr, idx_ptr,
                   n_tokens, n_hot, stride_ot, stride_oh, stride_ht, stride_hh,
                   HEAD: tl.constexpr, BLOCK_D: tl.constexpr):
    j = tl.program_id(0)
    h = tl.program_id(1)
    t = tl.load(idx_ptr + j).to(tl.int64)
    live = t >= 0  # -1: a padding entry of a graph-form plan, nothing to merge
    t = tl.maximum(t, 0)
    d = tl.arange(0, BLOCK_D)
    m = (d < HEAD) & live
    ls = tl.load(s_lse_ptr + h * n_tokens + t)
    lh = tl.load(h_lse_ptr + h * n_hot + j)
    mx = tl.maximum(ls, lh)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    ws = tl.exp(ls - mx)
    wh = tl.exp(lh - mx)
    tot = ws + wh
    tot = tl.where(tot == 0.0, 1.0, tot)
    o_ptr = out_ptr + t * stride_ot + h * stride_oh + d
    os_ = tl.load(o_ptr, mask=m).to(tl.float32)
    oh = tl.load(h_out_ptr + j * stride_ht + h * stride_hh + d, mask=m).to(tl.float32)
    res = (os_ * ws + oh * wh) / tot
    tl.store(o_ptr, res.to(out_ptr.dtype.element_ty), mask=m)


def merge_indexed_(out: torch.Tensor, lse_s: torch.Tensor, o_hot: torch.Tensor,
                   lse_hot: torch.Tensor, idx: torch.Tensor) -> None:
    """out [T, H, D], lse_s [H, T] f32, o_hot [Qc, H, D], lse_hot [H, Qc] f32, idx [Qc]."""
    t, h, d = out.shape
    qc = idx.shape[0]
    assert o_hot.shape == (qc, h, d), (o_hot.shape, (qc, h, d))
    assert lse_s.shape == (h, t) and lse_hot.shape == (h, qc), (lse_s.shape, lse_hot.shape)
    assert lse_s.is_contiguous() and lse_hot.is_contiguous()
    assert lse_s.dtype == lse_hot.dtype == torch.float32
    assert out.stride(-1) == 1 and o_hot.stride(-1) == 1
    assert idx.dtype in (torch.int32, torch.int64) and idx.device == out.device
    if qc == 0:
        return
    _merge_indexed[(qc, h)](out, lse_s, o_hot, lse_hot, idx, t, qc, out.stride(0),
                            out.stride(1), o_hot.stride(0), o_hot.stride(1),
                            HEAD=d, BLOCK_D=triton.next_power_of_2(d))
