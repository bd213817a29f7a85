"""Turning GraniKV on inside vLLM, from one switch: ``additional_config["granikv"]``.

``apply_to_vllm_config`` runs right after the platform's own ``check_and_update_config``
(process 0, while the config is built) and sets what GraniKV needs: block size 1, the
GraniKV scheduler, prefix caching on, vLLM's batch-global cascade off. The attention
backend is chosen per layer in every process from the same config (``backend_path_for``).
"""

from __future__ import annotations

import os
from typing import Any

from granikv_engine.config import GraniKVConfig

SCHEDULER = "granikv_engine.vllm_plugin.core.scheduler.GraniKVScheduler"
ASYNC_SCHEDULER = "granikv_engine.vllm_plugin.core.scheduler.GraniKVAsyncScheduler"
BACKEND = "granikv_engine.vllm_plugin.worker.backend.GraniKVAttentionBackend"
EXTENSION = "granikv_engine.vllm_plugin.worker.worker_ext.GraniKVWorkerExtension"


def granikv_config(vllm_config: Any) -> GraniKVConfig | None:
    """The GraniKV config of a VllmConfig, or None when GraniKV is off."""
    extra = getattr(vllm_config, "additional_config", None) or {}
    if not isinstance(extra, dict) or "granikv" not in extra:
        return None
    cfg = GraniKVConfig.from_dict(extra["granikv"])
    return cfg if cfg.enabled else None


def apply_to_vllm_config(vllm_config: Any) -> None:
    cfg = granikv_config(vllm_config)
    if cfg is None:
        return
    _check_supported(vllm_config)
    cache = vllm_config.cache_config
    cache.block_size = 1
    cache.user_specified_block_size = True
    cache.enable_prefix_caching = True
    sched = vllm_config.scheduler_config
    mine = ASYNC_SCHEDULER if sched.async_scheduling else SCHEDULER
    if sched.scheduler_cls not in (None, SCHEDULER, ASYNC_SCHEDULER):
        raise ValueError(f"GraniKV needs its own scheduler; got scheduler_cls="
                         f"{sched.scheduler_cls!r}")
    sched.scheduler_cls = mine
    if vllm_config.model_config is not None:
        vllm_config.model_config.disable_cascade_attn = True
    par = vllm_config.parallel_config
    if par.worker_extension_cls in (None, "", EXTENSION):
        par.worker_extension_cls = EXTENSION
    _use_v1_model_runner()


def _use_v1_model_runner() -> None:
    """GraniKV's builder reads the V1 model runner's host block table (the V2 runner
    keeps block tables on the GPU only). vLLM picks the runner from this variable in
    every process; processes started from here inherit it."""
    v2 = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    if v2 is not None and v2.lower() in ("1", "true"):
        raise ValueError("GraniKV needs vLLM's V1 model runner; unset "
                         "VLLM_USE_V2_MODEL_RUNNER or set it to 0")
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"


def _check_supported(vllm_config: Any) -> None:
    why: list[str] = []
    model = vllm_config.model_config
    if model is not None:
        if getattr(model, "use_mla", False):
            why.append("MLA models")
        if getattr(model, "is_hybrid", False):
            why.append("hybrid (Mamba) models")
        if model.get_sliding_window() is not None:
            why.append("sliding-window attention")
    if vllm_config.speculative_config is not None:
        why.append("speculative decoding")
    par = vllm_config.parallel_config
    if getattr(par, "decode_context_parallel_size", 1) > 1 or getattr(
            par, "prefill_context_parallel_size", 1) > 1:
        why.append("context parallelism")
    if vllm_config.kv_transfer_config is not None:
        why.append("KV connectors")
    if why:
        raise ValueError("GraniKV does not support " + ", ".join(why)
                         + "; disable additional_config.granikv or change the model")


def backend_path_for(vllm_config: Any, selector: Any) -> str | None:
    """Our backend's class path for a decoder layer when GraniKV is on, else None."""
    if granikv_config(vllm_config) is None:
        return None
    if getattr(selector, "use_mla", False) or getattr(selector, "use_sparse", False):
        return None
    attn_type = getattr(selector, "attn_type", "decoder")
    if getattr(attn_type, "value", attn_type) != "decoder":
        return None
    return BACKEND
