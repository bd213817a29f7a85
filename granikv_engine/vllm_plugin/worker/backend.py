"""The GraniKV attention backend for vLLM: the backend class vLLM selects, and the impl
that runs once per layer (the metadata builder, once per step, is in
``metadata_builder.py``).

KV cache layout: ``[num_blocks, block_size, Hkv, 2*D]`` with ``block_size=1``, so a run
of consecutive block ids is a contiguous ``[L, Hkv, D]`` slab (K in the first ``D`` of the
last dim, V in the second). ``num_blocks`` comes first, as vLLM's CPU runner zeroes whole
blocks with ``kv[block_id]``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionLayer,
    AttentionType,
)

from granikv_engine.vllm_plugin.worker.attn_ops import ops_for
from granikv_engine.vllm_plugin.worker.metadata_builder import (
    GraniKVMetadata,
    GraniKVMetadataBuilder,
)


class GraniKVAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16,
                                                     torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[Any]] = ["auto", "float16", "bfloat16"]

    @staticmethod
    def get_name() -> str:
        # A real AttentionBackendEnum member: the attention layer indexes the enum by it.
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type[GraniKVAttentionImpl]:
        return GraniKVAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[GraniKVMetadataBuilder]:
        return GraniKVMetadataBuilder

    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int,
                           head_size: int, cache_dtype_str: str = "auto") -> tuple[int, ...]:
        return (num_blocks, block_size, num_kv_heads, 2 * head_size)

    @classmethod
    def get_preferred_block_size(cls, default_block_size: int) -> int:
        return 1

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER



class GraniKVAttentionImpl(AttentionImpl[GraniKVMetadata]):
    def __init__(self, num_heads: int, head_size: int, scale: float,
                 num_kv_heads: int | None = None, alibi_slopes: list[float] | None = None,
                 sliding_window: int | None = None, kv_cache_dtype: str = "auto",
                 logits_soft_cap: float | None = None, attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: str | None = None, **unsupported: Any) -> None:
        if alibi_slopes is not None or sliding_window is not None or logits_soft_cap:
            raise NotImplementedError("GraniKV supports plain softmax attention only "
                                      "(no ALiBi, sliding window or soft cap)")
        if unsupported.get("sinks") is not None:
            raise NotImplementedError("GraniKV does not support attention sinks")
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self._ops: Any = None

    def forward(self, layer: AttentionLayer, query: torch.Tensor, key: torch.Tensor,
                value: torch.Tensor, kv_cache: torch.Tensor,
                attn_metadata: GraniKVMetadata | None, output: torch.Tensor,
                output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported")
        if attn_metadata is None:  # profiling / warm-up run
            return output
        if self._ops is None:
            self._ops = ops_for(query.device)
        n, d = attn_metadata.num_actual_tokens, self.head_size
        # [num_slots, Hkv, D] strided views into [num_blocks, 1, Hkv, 2D]
        k_cache = kv_cache[..., :d].flatten(0, 1)
        v_cache = kv_cache[..., d:].flatten(0, 1)
        if self.kv_sharing_target_layer_name is None and key is not None:
            self._ops.write_kv(key.view(-1, self.num_kv_heads, d),
                               value.view(-1, self.num_kv_heads, d), k_cache, v_cache,
                               attn_metadata.slot_mapping[:n],
                               getattr(layer, "_k_scale", None), getattr(layer, "_v_scale", None))
        q = query[:n].view(n, self.num_heads, d)
        out = output[:n].view(n, self.num_heads, d)
        self._ops.forward(q, k_cache, v_cache, attn_metadata.plan, self.scale, out)
        return output

