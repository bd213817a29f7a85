"""The GraniKV attention backend for vLLM: metadata builder (once per step) and impl
(once per layer).

KV cache layout: ``[num_blocks, block_size, Hkv, 2*D]`` with ``block_size=1``, so a run
of consecutive block ids is a contiguous ``[L, Hkv, D]`` slab (K in the first ``D`` of the
last dim, V in the second). ``num_blocks`` comes first, as vLLM's CPU runner zeroes whole
blocks with ``kv[block_id]``.
"""

from __future__ import annotations

import bisect
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import FrameType
from typing import Any, ClassVar

import numpy as np
import torch
from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionLayer,
    AttentionMetadata,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)

from granikv_engine.config import GraniKVConfig
from granikv_engine.dispatcher import AttnShape, Backend, CalibrationTable, Choice, Dispatcher
from granikv_engine.graph_plan import GraphBuffers, GraphLimits
from granikv_engine.stats import DispatchCounters
from granikv_engine.step_plan import HotGroup, KernelPlan, StepPlan, group_rows
from granikv_engine.vllm_plugin.attn_ops import ops_for
from granikv_engine.vllm_plugin.enable import granikv_config

logger = init_logger(__name__)


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


@dataclass
class GraniKVMetadata(AttentionMetadata):
    num_actual_tokens: int
    slot_mapping: torch.Tensor  # [num_actual_tokens] int64 slot ids (-1 = padding)
    plan: KernelPlan
    choices: tuple[Choice, ...]


class GraniKVMetadataBuilder(AttentionMetadataBuilder[GraniKVMetadata]):
    """Once per step: group the rows by HOT prefix, let the dispatcher choose per group,
    lower to one ``KernelPlan`` for every layer.

    CUDA graphs: decode steps replay FULL graphs. A graph of fewer than
    ``cascade_graph_min_rows`` rows runs the paged kernel only: the same FA3 call vLLM's
    own backend makes, over the model runner's persistent buffers plus an ahead-of-time
    FA3 schedule kept in a buffer of this builder. A larger one runs the graph form of a
    plan (``graph_plan.py``): up to ``cascade_graph_groups`` cascade groups, the rest
    padding, in fixed buffers, with ahead-of-time schedules for both passes. Steps that
    fit neither (prefill rows, more cascade groups, small batches with a cascade group)
    run PIECEWISE, attention eager. The model runner hook (``cuda_graphs.py``) asks
    ``prepare_step`` before the runner picks the step's graph mode; ``build`` then
    honours that answer.
    """

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.NEVER

    @classmethod
    def get_cudagraph_support(cls, vllm_config: VllmConfig,
                              kv_cache_spec: Any) -> AttentionCGSupport:
        cfg = granikv_config(vllm_config)
        if cfg is not None and cfg.full_cudagraphs and _on_cuda() and _runner_hooked():
            return AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
        return AttentionCGSupport.NEVER

    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: VllmConfig,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.cfg: GraniKVConfig = granikv_config(vllm_config) or GraniKVConfig(enabled=True)
        num_blocks = vllm_config.cache_config.num_gpu_blocks
        cap = self.cfg.hot_capacity(num_blocks) if num_blocks else 0
        # The scheduler reserves block ids 1..cap (0 is vLLM's null block).
        self.arena = (1, 1 + cap) if cap else (1, 1 << 62)
        table = _dispatch_table(vllm_config, kv_cache_spec, device, self.cfg)
        self.dispatcher = Dispatcher(
            _attn_shape(vllm_config, kv_cache_spec),
            table=table,
            force=None if self.cfg.backend == "auto" else Backend(self.cfg.backend),
            margin=self.cfg.dispatch_margin)
        self.counters = DispatchCounters()
        self.stage = Stager(device, vllm_config.scheduler_config.max_num_batched_tokens
                            + 4 * vllm_config.scheduler_config.max_num_seqs + 64)
        # The model runner's host copy of the block table (bound after KV-cache init,
        # see bind_host_block_tables); without it each step copies the device table.
        self.host_block_table: Callable[[], torch.Tensor] | None = None
        self._searched_runner = False
        # FULL graphs (see the class docstring)
        self._graph_step: bool | None = None  # prepare_step's answer for the next build
        self._prepared: Prepared | None = None  # prepare_step's analysis, for build
        self._ops: Any = None
        self._sched_buf: torch.Tensor | None = None
        self._graph_bufs: GraphBuffers | None = None  # graph-form plans (cascade graphs)
        self._dense_sched: torch.Tensor | None = None
        self.max_splits = int(getattr(vllm_config.attention_config,
                                      "flash_attn_max_num_splits_for_cuda_graph", 32) or 32)
        self._num_q_heads = vllm_config.model_config.get_num_attention_heads(
            vllm_config.parallel_config)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> GraniKVMetadata:
        cam = common_attn_metadata
        b = cam.num_reqs
        graph_step, self._graph_step = self._graph_step, None
        prepared, self._prepared = self._prepared, None
        if graph_step is None:  # no prepare_step this step (a dummy run): be safe
            graph_step = self._graphs_on(cam.num_actual_tokens)
        host = self._host_inputs(cam)
        same = _same_step(prepared, host)
        plan = StepPlan.build(cam.query_start_loc[: b + 1], cam.seq_lens[:b],
                              cam.block_table_tensor[:b], self.arena, self.cfg.min_hot_len,
                              host=host, analysed=same[:2] if same else None)
        choices = same[2] if same else tuple(
            self.dispatcher.choose_all(g.stats() for g in plan.groups))
        bufs = self._graph_buffers(cam) if graph_step and self._cascade_graph_rows(b) else None
        if bufs is not None and bufs.fits(plan):
            # the runner may replay a FULL graph of the graph form: the cascade groups
            # it can carry keep the cascade, any others run the paged kernel
            choices = _paged_past(choices, bufs.limits.groups)
            self.counters.graph_steps += 1
            self.counters.graph_cascade_steps += any(
                c.backend is Backend.CASCADE for c in choices)
            self.counters.record(choices, (len(g.rows) for g in plan.groups), b)
            kplan = self._with_schedule(bufs.lower(plan, [c.backend for c in choices]), cam)
            return GraniKVMetadata(cam.num_actual_tokens, cam.slot_mapping,
                                   self._with_dense_schedule(kplan), choices)
        if graph_step:  # the runner may replay a FULL graph: the paged kernel only
            choices = _paged_past(choices, 0)
            self.counters.graph_steps += 1
        self.counters.record(choices, (len(g.rows) for g in plan.groups), b)
        kplan = plan.lower([c.backend for c in choices], self.stage)
        if kplan.cascade_dev is None and self._graphs_on(cam.num_actual_tokens):
            kplan = self._with_schedule(kplan, cam)
        return GraniKVMetadata(cam.num_actual_tokens, cam.slot_mapping, kplan, choices)

    def build_for_cudagraph_capture(self, common_attn_metadata: CommonAttentionMetadata
                                    ) -> GraniKVMetadata:
        self._graph_step = True
        return self.build(0, common_attn_metadata)

    def prepare_step(self, num_scheduled: np.ndarray, num_computed: np.ndarray) -> bool:
        """Before the runner picks this step's graph mode: True when some group will run
        the cascade (the step must not replay a FULL graph). The same host analysis and
        dispatcher as ``build``; without the host block table, True (stay PIECEWISE)."""
        table = self.host_block_table
        b = num_scheduled.shape[0]
        self._prepared = None
        if table is None:
            self._graph_step = False
            return True
        if b == 0:
            self._graph_step = None
            return False
        qsl = np.zeros(b + 1, dtype=np.int64)
        np.cumsum(num_scheduled, out=qsl[1:])
        seqs = num_computed.astype(np.int64) + num_scheduled
        hot, groups = group_rows(qsl, seqs, table()[:b].numpy(), self.arena,
                                 self.cfg.min_hot_len)
        choices = tuple(self.dispatcher.choose_all(g.stats() for g in groups))
        self._prepared = (qsl, seqs, hot, groups, choices)  # build reuses it if it agrees
        cascade = sum(c.backend is Backend.CASCADE for c in choices)
        eager = cascade > 0 and not (  # the graph form carries a decode step's cascade
            self._cascade_graph_rows(self._graph_size(b))
            and cascade <= self.cfg.cascade_graph_groups
            and bool((num_scheduled == 1).all()))
        self._graph_step = not eager
        return eager

    def set_graph_step(self, flag: bool | None) -> None:
        self._graph_step = flag

    def _graphs_on(self, num_tokens: int) -> bool:
        cc = self.vllm_config.compilation_config
        return (self.cfg.full_cudagraphs and cc.cudagraph_mode is not None
                and cc.cudagraph_mode.has_full_cudagraphs()
                and num_tokens <= (cc.max_cudagraph_capture_size or 0))

    def _graph_size(self, rows: int) -> int:
        """The rows of the FULL graph a decode step of ``rows`` rows replays: the
        smallest capture size that holds it, as the runner pads it."""
        sizes = sorted(self.vllm_config.compilation_config.cudagraph_capture_sizes or ())
        at = bisect.bisect_left(sizes, rows)
        return sizes[at] if at < len(sizes) else rows

    def _cascade_graph_rows(self, rows: int) -> bool:
        """Whether a FULL graph of this many rows is captured in the graph form (with
        the cascade): large enough, and a HOT arena of known size."""
        least = self.cfg.cascade_graph_min_rows
        return (least > 0 and rows >= least and self.arena[1] - self.arena[0] < 1 << 31
                and rows <= (self.vllm_config.compilation_config.max_cudagraph_capture_size
                             or 0))

    def _graph_buffers(self, cam: CommonAttentionMetadata) -> GraphBuffers:
        if self._graph_bufs is None:
            sc = self.vllm_config.scheduler_config
            rows = max(sc.max_num_seqs,
                       self.vllm_config.compilation_config.max_cudagraph_capture_size or 0)
            self._graph_bufs = GraphBuffers(
                GraphLimits(rows=rows, width=int(cam.block_table_tensor.shape[1]),
                            groups=self.cfg.cascade_graph_groups,
                            hot_len=self.arena[1] - self.arena[0]), self.device)
        return self._graph_bufs

    def _with_dense_schedule(self, kplan: KernelPlan) -> KernelPlan:
        """The graph form's dense pass with FA3's ahead-of-time schedule, in a buffer
        of this builder (its size depends on the fixed group count only)."""
        d = kplan.cascade_dev
        if d is None or not hasattr(self._ops, "schedule_dense"):
            return kplan
        meta = self._ops.schedule_dense(
            d.cu_q, d.seqused_k, d.max_q, d.max_k, self._num_q_heads,
            self.kv_cache_spec.num_kv_heads, self.kv_cache_spec.head_size,
            self.kv_cache_spec.dtype, self.max_splits)
        if self._dense_sched is None:  # the first graph-form step: the first capture
            self._dense_sched = torch.zeros_like(meta)
            self._ops.warm_up_merge(self._num_q_heads, self.kv_cache_spec.head_size,
                                    self.kv_cache_spec.dtype, self.device)
        self._dense_sched.copy_(meta)
        return replace(kplan, cascade_dev=replace(d, scheduler_metadata=self._dense_sched,
                                                  num_splits=self.max_splits))

    def _with_schedule(self, kplan: KernelPlan, cam: CommonAttentionMetadata) -> KernelPlan:
        """The paged pass with FA3's ahead-of-time schedule in this builder's buffer (the
        address a FULL graph captured) and a fixed split bound, as vLLM's FA backend does;
        ``max_seq_len`` is the runner's upper bound (``max_model_len`` at capture)."""
        if self._ops is None:
            self._ops = ops_for(self.device)
        if not hasattr(self._ops, "schedule_paged"):
            return kplan
        max_k = max(int(cam.max_seq_len), kplan.max_kv)
        meta = self._ops.schedule_paged(
            kplan.query_start_loc, kplan.kv_seq_lens, kplan.max_q, max_k, self._num_q_heads,
            self.kv_cache_spec.num_kv_heads, self.kv_cache_spec.head_size,
            self.kv_cache_spec.dtype, self.max_splits)
        n = meta.shape[0]
        if self._sched_buf is None:  # FA3's size for the most rows a step can have
            rows = max(self.vllm_config.scheduler_config.max_num_seqs,
                       self.vllm_config.compilation_config.max_cudagraph_capture_size or 0)
            self._sched_buf = torch.zeros(1 + 4 * (-(-rows // 4) * 4), dtype=torch.int32,
                                          device=self.device)
        buf = self._sched_buf
        buf[:n] = meta
        buf[n:] = 0  # stale entries past this batch must not schedule work
        return replace(kplan, max_kv=max_k, scheduler_metadata=buf[:n],
                       num_splits=self.max_splits)

    def _host_inputs(self, cam: CommonAttentionMetadata
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        seq = cam._seq_lens_cpu if cam._seq_lens_cpu is not None else cam.seq_lens_cpu_upper_bound
        if self.host_block_table is None and not self._searched_runner:
            self._searched_runner = True
            bind_from_caller(self)
        if self.host_block_table is None or seq is None:
            return None
        b = cam.num_reqs
        return cam.query_start_loc_cpu[: b + 1], seq[:b], self.host_block_table()[:b]


class Stager:
    """Host int32 arrays to the device in one non-blocking copy through a pinned buffer.

    Reusing the pinned buffer is safe: the V1 model runner records an event after a
    step's input preparation (metadata builds included) and waits for it before
    preparing the next step."""

    def __init__(self, device: torch.device, size: int) -> None:
        self.device = device
        self._alloc(size)

    def _alloc(self, size: int) -> None:
        pin = self.device.type == "cuda"
        self.host = torch.empty(size, dtype=torch.int32, pin_memory=pin)
        self.dev = torch.empty(size, dtype=torch.int32, device=self.device)

    def __call__(self, a: np.ndarray) -> torch.Tensor:
        n = a.shape[0]
        if n > self.host.shape[0]:
            self._alloc(2 * n)
        self.host[:n].numpy()[:] = a
        self.dev[:n].copy_(self.host[:n], non_blocking=True)
        return self.dev[:n]


def runner_builders(runner: Any) -> list[tuple[int, GraniKVMetadataBuilder]]:
    """(KV-cache group id, builder) for every GraniKV builder of a model runner."""
    return [(gid, b) for gid, groups in enumerate(getattr(runner, "attn_groups", []) or [])
            for group in groups for b in getattr(group, "metadata_builders", [])
            if isinstance(b, GraniKVMetadataBuilder)]


def bind_host_block_tables(runner: Any) -> int:
    """Give every GraniKV builder of a (V1) model runner its host block table."""
    ref = weakref.ref(runner)
    found = runner_builders(runner)
    for gid, b in found:
        b.host_block_table = _host_table(ref, gid)
    return len(found)


def bind_from_caller(builder: GraniKVMetadataBuilder, depth: int = 12) -> bool:
    """Fallback when the model-runner hook could not be installed: the runner that calls
    ``build`` is on the stack; bind its host block tables (once, at the first step)."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            break
        cand = frame.f_locals.get("self")
        if hasattr(cand, "attn_groups") and hasattr(cand, "input_batch"):
            found = bind_host_block_tables(cand)
            logger.info("GraniKV: bound %d builders to the model runner's host block table "
                        "(from the call stack)", found)
            return builder.host_block_table is not None
        frame = frame.f_back
    logger.warning("GraniKV: no host block table; each step copies the device block table")
    return False


def _host_table(ref: weakref.ReferenceType[Any], gid: int) -> Callable[[], torch.Tensor]:
    def get() -> torch.Tensor:
        runner = ref()
        if runner is None:
            raise RuntimeError("the model runner is gone")
        table: torch.Tensor = runner.input_batch.block_table.block_tables[gid].get_cpu_tensor()
        return table

    return get


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


Analysis = tuple[np.ndarray, tuple[HotGroup, ...], tuple[Choice, ...]]
Prepared = tuple[np.ndarray, np.ndarray, np.ndarray, tuple[HotGroup, ...], tuple[Choice, ...]]


def _same_step(prepared: Prepared | None,
               host: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None
               ) -> Analysis | None:
    """prepare_step's (hot lengths, groups, choices) when ``build`` sees the same step:
    the same query starts and sequence lengths (the runner's optimistic lengths are
    computed and scheduled tokens, as prepare_step adds them) over the same host block
    table."""
    if prepared is None or host is None:
        return None
    qsl, seqs, hot, groups, choices = prepared
    qh, sh = host[0].numpy(), host[1].numpy()
    n = qsl.shape[0]
    if qh.shape[0] < n or not (np.array_equal(qh[:n], qsl) and np.array_equal(sh[:n - 1], seqs)):
        return None
    if qh.shape[0] > n:  # rows the runner padded for a FULL graph: no queries, no keys
        if (qh[n:] != qsl[-1]).any() or sh[n - 1:].any():
            return None
        hot = np.concatenate([hot, np.zeros(qh.shape[0] - n, dtype=hot.dtype)])
    return hot, groups, choices


def _paged_past(choices: tuple[Choice, ...], keep: int) -> tuple[Choice, ...]:
    """The first ``keep`` cascade groups keep the cascade; the others run the paged
    kernel (source "graph": a FULL graph may replay the step)."""
    out = []
    for c in choices:
        if c.backend is Backend.CASCADE:
            if keep > 0:
                keep -= 1
            else:
                c = c._replace(backend=Backend.PAGED, source="graph")
        out.append(c)
    return tuple(out)


def _runner_hooked() -> bool:
    """Whether the V1 model runner carries the FULL-graph hook (cuda_graphs.install)."""
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except Exception:  # no runner, no FULL graphs
        return False
    return bool(getattr(GPUModelRunner, "_granikv_graphs_hooked", False))


def _on_cuda() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cuda())


def _attn_shape(vllm_config: VllmConfig, kv_cache_spec: Any) -> AttnShape:
    par = vllm_config.parallel_config
    model = vllm_config.model_config
    tp = par.tensor_parallel_size
    q_per_rank = model.get_num_attention_heads(par)
    return AttnShape(num_q_heads=q_per_rank * tp, num_kv_heads=kv_cache_spec.num_kv_heads * tp,
                     head_dim=kv_cache_spec.head_size,
                     dtype_bytes=torch.tensor([], dtype=kv_cache_spec.dtype).element_size(),
                     hidden_size=model.get_hidden_size(), tp=tp)


_TABLES: dict[tuple[Any, ...], CalibrationTable | None] = {}  # per process, per shape


def _dispatch_table(vllm_config: VllmConfig, spec: Any, device: torch.device,
                    cfg: GraniKVConfig) -> CalibrationTable | None:
    """The dispatcher's table, the same on every tensor-parallel rank: rank 0 loads it
    from ``calibration_path`` or, on CUDA with the ``auto`` backend, measures it; then
    it is broadcast. (Ranks never read the file on their own: one that found the file
    rank 0 had just written would skip the broadcast rank 0 waits in.) Once per
    process and shape; every rank builds its builders at the same point, so every rank
    takes part in the broadcast."""
    from granikv_engine.vllm_plugin.kernels.calibrate import broadcast, calibrate

    heads = vllm_config.model_config.get_num_attention_heads(vllm_config.parallel_config)
    key = (heads, spec.num_kv_heads, spec.head_size, spec.dtype, cfg.calibration_path,
           cfg.backend)
    if key in _TABLES:
        return _TABLES[key]
    table = None
    if _tp_rank() == 0:
        table = _load_table(cfg)
        if table is None and device.type == "cuda" and cfg.calibrate and cfg.backend == "auto":
            from granikv_engine.vllm_plugin.kernels.cuda_ops import CudaOps

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
