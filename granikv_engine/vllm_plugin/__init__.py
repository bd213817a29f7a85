"""GraniKV as a vLLM plugin (entry point ``vllm.general_plugins: granikv``).

``register()`` runs in every vLLM process (front end, engine core, workers) and changes
nothing until a config asks for GraniKV:

    LLM(model, additional_config={"granikv": {"enabled": True}})
    vllm serve MODEL --additional-config '{"granikv": {"enabled": true}}'

With it, the config gets block size 1 and the GraniKV scheduler (``enable.py``), decoder
attention layers get the GraniKV backend (``backend.py``, its per-step builder in
``metadata_builder.py``), and the engine core gets the seeded block hasher and the
``granikv_control`` utility (``engine_hooks.py``). The
backend is also registered as ``AttentionBackendEnum.CUSTOM``.
"""

from __future__ import annotations

import functools
from typing import Any


def register() -> None:
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from granikv_engine.vllm_plugin import enable, engine_hooks

    register_backend(AttentionBackendEnum.CUSTOM, enable.BACKEND)
    engine_hooks.install()
    _hook_platform(type(current_platform))
    _hook_model_runner()


def _hook_model_runner() -> None:
    """After the (V1) model runner builds its attention builders and input batch, give
    the GraniKV builders the host block table, so building a step never syncs the GPU,
    and let decode steps that need no cascade replay FULL CUDA graphs (cuda_graphs.py)."""
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except Exception as e:  # the builder falls back to the call stack
        from vllm.logger import init_logger

        init_logger(__name__).warning("GraniKV: model-runner hook not installed (%s: %s)",
                                      type(e).__name__, e)
        return
    if getattr(GPUModelRunner, "_granikv_hooked", False):
        return
    from granikv_engine.vllm_plugin import cuda_graphs

    stock = GPUModelRunner.initialize_kv_cache

    @functools.wraps(stock)
    def initialize_kv_cache(self: Any, *args: Any, **kwargs: Any) -> None:
        stock(self, *args, **kwargs)
        from granikv_engine.vllm_plugin.runner_binding import bind_host_block_tables

        if bind_host_block_tables(self):
            cuda_graphs.enable(self)

    cuda_graphs.install(GPUModelRunner)

    GPUModelRunner.initialize_kv_cache = initialize_kv_cache  # type: ignore[method-assign]
    GPUModelRunner._granikv_hooked = True  # type: ignore[attr-defined]


def _hook_platform(platform_cls: Any) -> None:
    """Wrap two classmethods of the detected platform (CpuPlatform, CudaPlatform)."""
    if getattr(platform_cls, "_granikv_hooked", False):
        return
    from vllm.config import get_current_vllm_config

    from granikv_engine.vllm_plugin import enable

    stock_select = platform_cls.get_attn_backend_cls.__func__
    stock_check = platform_cls.check_and_update_config.__func__

    @functools.wraps(stock_select)
    def get_attn_backend_cls(cls: Any, selected_backend: Any, attn_selector_config: Any,
                             *args: Any, **kwargs: Any) -> str:
        path = enable.backend_path_for(get_current_vllm_config(), attn_selector_config)
        if path is not None:
            return path
        return stock_select(cls, selected_backend, attn_selector_config, *args, **kwargs)

    @functools.wraps(stock_check)
    def check_and_update_config(cls: Any, vllm_config: Any) -> None:
        stock_check(cls, vllm_config)
        enable.apply_to_vllm_config(vllm_config)

    platform_cls.get_attn_backend_cls = classmethod(get_attn_backend_cls)
    platform_cls.check_and_update_config = classmethod(check_and_update_config)
    platform_cls._granikv_hooked = True
