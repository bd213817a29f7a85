"""The dispatcher's inputs from vLLM's config: the attention shape, and the calibration
table, the same on every tensor-parallel rank."""

from __future__ import annotations

from typing import Any

import torch
from vllm.config import VllmConfig
from vllm.logger import init_logger

from granikv_engine.config import GraniKVConfig
from granikv_engine.dispatcher import AttnShape, CalibrationTable

logger = init_logger(__name__)


def attn_shape(vllm_config: VllmConfig, kv_cache_spec: Any) -> AttnShape:
    par = vllm_config.parallel_config
    model = vllm_config.model_config
    tp = par.tensor_parallel_size
    q_per_rank = model.get_num_attention_heads(par)
    return AttnShape(num_q_heads=q_per_rank * tp, num_kv_heads=kv_cache_spec.num_kv_heads * tp,
                     head_dim=kv_cache_spec.head_size,
                     dtype_bytes=torch.tensor([], dtype=kv_cache_spec.dtype).element_size(),
                     hidden_size=model.get_hidden_size(), tp=tp)


_TABLES: dict[tuple[Any, ...], CalibrationTable | None] = {}  # per process, per shape


def dispatch_table(vllm_config: VllmConfig, spec: Any, device: torch.device,
                    cfg: GraniKVConfig) -> CalibrationTable | None:
    """The dispatcher's table, the same on every tensor-parallel rank: rank 0 loads it
    from ``calibration_path`` or, on CUDA with the ``auto`` backend, measures it; then
    it is broadcast. (Ranks never read the file on their own: one that found the file
    rank 0 had just written would skip the broadcast rank 0 waits in.) Once per
    process and shape; every rank builds its builders at the same point, so every rank
    takes part in the broadcast."""
    from granikv_engine.vllm_plugin.worker.kernels.calibrate import broadcast, calibrate

    heads = vllm_config.model_config.get_num_attention_heads(vllm_config.parallel_config)
    key = (heads, spec.num_kv_heads, spec.head_size, spec.dtype, cfg.calibration_path,
           cfg.backend)
    if key in _TABLES:
        return _TABLES[key]
    table = None
    if _tp_rank() == 0:
        table = _load_table(cfg)
        if table is None and device.type == "cuda" and cfg.calibrate and cfg.backend == "auto":
            from granikv_engine.vllm_plugin.worker.kernels.cuda_ops import CudaOps

            table = calibrate(CudaOps(), heads, spec.num_kv_heads, spec.head_size,
                              spec.dtype, device)
            logger.info("GraniKV calibration: %d points in %ss", len(table.points),
                        table.meta.get("seconds"))
            if cfg.calibration_path:
                from pathlib import Path

                Path(cfg.calibration_path).write_text(table.to_json())
    _TABLES[key] = broadcast(table)
    return _TABLES[key]


def _tp_rank() -> int:
    try:
        from vllm.distributed import get_tp_group

        return int(get_tp_group().rank_in_group)
    except (AssertionError, ImportError):  # no distributed state (unit tests)
        return 0


def _load_table(cfg: GraniKVConfig) -> CalibrationTable | None:
    if cfg.calibration_path:
        try:
            return CalibrationTable.load(cfg.calibration_path)
        except FileNotFoundError:
            return None
    return None
