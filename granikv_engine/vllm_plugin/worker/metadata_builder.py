"""GraniKV's attention metadata builder: once per step, the rows grouped by HOT prefix,
the dispatcher's choice per group, one ``KernelPlan`` for every layer; and, before the
runner picks the step's CUDA-graph mode, the same analysis for ``cuda_graphs.py``.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, ClassVar

import numpy as np
import torch
from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.v1.attention.backend import (
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)

from granikv_engine.config import GraniKVConfig
from granikv_engine.dispatcher import Backend, Choice, Dispatcher
from granikv_engine.graph_plan import GraphBuffers, GraphLimits
from granikv_engine.stats import DispatchCounters
from granikv_engine.step_plan import HotGroup, KernelPlan, PinnedStager, StepPlan, group_rows
from granikv_engine.vllm_plugin.enable import granikv_config
from granikv_engine.vllm_plugin.worker.attn_ops import ops_for
from granikv_engine.vllm_plugin.worker.dispatch_table import attn_shape, dispatch_table

logger = init_logger(__name__)


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
    run PIECEWISE, attention eager. The model runner hook (``cuda_graphs.py``) has each
    builder analyse the step (``analyse_step``: one ``StepAnalysis``, its mode and host
    analysis) before the runner picks the step's graph mode; ``build`` takes that value
    and honours its mode.
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
        table = dispatch_table(vllm_config, kv_cache_spec, device, self.cfg)
        self.dispatcher = Dispatcher(
            attn_shape(vllm_config, kv_cache_spec),
            table=table,
            force=None if self.cfg.backend == "auto" else Backend(self.cfg.backend),
            margin=self.cfg.dispatch_margin)
        self.counters = DispatchCounters()
        self.stage = PinnedStager(device, vllm_config.scheduler_config.max_num_batched_tokens
                            + 4 * vllm_config.scheduler_config.max_num_seqs + 64)
        # The model runner's host copy of the block table (bound after KV-cache init,
        # see bind_host_block_tables); without it each step copies the device table.
        self.host_block_table: Callable[[], torch.Tensor] | None = None
        self._warned_unbound = False
        # FULL graphs (see the class docstring): the hook's analysis of the next step,
        # taken by its build (None: no analysis, e.g. a dummy run)
        self._step: StepAnalysis | None = None
        self._ops: Any = None
        self._sched_buf: torch.Tensor | None = None
        self._graph_bufs: GraphBuffers | None = None  # graph-form plans (cascade graphs)
        self._dense_sched: torch.Tensor | None = None
        self.max_splits = int(getattr(vllm_config.attention_config,
                                      "flash_attn_max_num_splits_for_cuda_graph", 32) or 32)
        self._num_q_heads = vllm_config.model_config.get_num_attention_heads(
            vllm_config.parallel_config)
        if device.type == "cuda":  # the Triton merge by index (cuda_ops.forward: steps
            # with several HOT groups, and FULL graphs, which capture it) compiled now,
            # not at the first such step while serving, nor during a graph capture
            self._ops = ops_for(device)
            self._ops.warm_up_merge(self._num_q_heads, kv_cache_spec.head_size,
                                    vllm_config.model_config.dtype, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> GraniKVMetadata:
        cam = common_attn_metadata
        b = cam.num_reqs
        step, self._step = self._step, None
        if step is None:  # nobody analysed this step (a dummy run): be safe
            graph_step = self._graphs_on(cam.num_actual_tokens)
        else:
            graph_step = step.mode is not StepMode.PIECEWISE
        host = self._host_inputs(cam)
        same = _same_step(step.host if step is not None else None, host)
        plan = StepPlan.build(cam.query_start_loc[: b + 1], cam.seq_lens[:b],
                              cam.block_table_tensor[:b], self.arena, self.cfg.min_hot_len,
                              host=host, analysed=same[:2] if same else None)
        choices = same[2] if same else tuple(
            self.dispatcher.choose_all(g.stats() for g in plan.groups))
        # A step the runner may replay in a FULL graph: in the graph form when its graph
        # was captured in it (the cascade groups it can carry keep the cascade), else the
        # paged kernel only.
        bufs = self._graph_buffers(cam) if graph_step and self._cascade_graph_rows(b) else None
        graph_form = bufs is not None and bufs.fits(plan)
        if graph_step:
            choices = _paged_past(choices, bufs.limits.groups if bufs and graph_form else 0)
        self.counters.record(choices, (len(g.rows) for g in plan.groups), b,
                             mixed=cam.max_query_len > 1, full_graph=graph_step)
        backends = [c.backend for c in choices]
        if bufs is not None and graph_form:
            kplan = self._with_dense_schedule(self._with_schedule(bufs.lower(plan, backends),
                                                                  cam))
        else:
            kplan = plan.lower(backends, self.stage)
            if kplan.cascade_dev is None and self._graphs_on(cam.num_actual_tokens):
                kplan = self._with_schedule(kplan, cam)
        return GraniKVMetadata(cam.num_actual_tokens, cam.slot_mapping, kplan, choices)

    def build_for_cudagraph_capture(self, common_attn_metadata: CommonAttentionMetadata
                                    ) -> GraniKVMetadata:
        self._step = StepAnalysis(StepMode.FULL)
        return self.build(0, common_attn_metadata)

    def analyse_step(self, num_scheduled: np.ndarray,
                     num_computed: np.ndarray) -> StepAnalysis | None:
        """Before the runner picks this step's graph mode: the step's ``StepAnalysis``,
        kept for its ``build``. PIECEWISE when some group will run the cascade and the
        graph form cannot carry it, or without the host block table; None for a step
        without rows. The same host analysis and dispatcher as ``build``."""
        table = self.host_block_table
        b = num_scheduled.shape[0]
        if table is None:
            self._step = StepAnalysis(StepMode.PIECEWISE)
        elif b == 0:
            self._step = None
        else:
            qsl = np.zeros(b + 1, dtype=np.int64)
            np.cumsum(num_scheduled, out=qsl[1:])
            seqs = num_computed.astype(np.int64) + num_scheduled
            hot, groups = group_rows(qsl, seqs, table()[:b].numpy(), self.arena,
                                     self.cfg.min_hot_len)
            choices = tuple(self.dispatcher.choose_all(g.stats() for g in groups))
            cascade = sum(c.backend is Backend.CASCADE for c in choices)
            carried = (  # the graph form carries a decode step's cascade groups
                self._cascade_graph_rows(self._graph_size(b))
                and cascade <= self.cfg.cascade_graph_groups
                and bool((num_scheduled == 1).all()))
            mode = (StepMode.FULL if cascade == 0 else
                    StepMode.FULL_CASCADE if carried else StepMode.PIECEWISE)
            self._step = StepAnalysis(mode, (qsl, seqs, hot, groups, choices))
        return self._step

    def run_piecewise(self) -> None:
        """The runner runs this step PIECEWISE (another builder's step needs it): the
        analysis stays, for ``build`` to reuse."""
        step = self._step
        self._step = (StepAnalysis(StepMode.PIECEWISE) if step is None
                      else replace(step, mode=StepMode.PIECEWISE))

    def _graphs_on(self, num_tokens: int) -> bool:
        cc = self.vllm_config.compilation_config
        return (self.cfg.full_cudagraphs and cc.cudagraph_mode is not None
                and cc.cudagraph_mode.has_full_cudagraphs()
                and num_tokens <= (cc.max_cudagraph_capture_size or 0))

    def _graph_size(self, rows: int) -> int:
        """The rows of the FULL graph a decode step of ``rows`` rows replays: the
        smallest capture size that holds it, as the runner pads it."""
        sizes = self._capture_sizes
        at = bisect.bisect_left(sizes, rows)
        return sizes[at] if at < len(sizes) else rows

    @functools.cached_property
    def _capture_sizes(self) -> list[int]:
        return sorted(self.vllm_config.compilation_config.cudagraph_capture_sizes or ())

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
        if self.host_block_table is None and not self._warned_unbound:
            self._warned_unbound = True
            logger.error("GraniKV: this attention builder has no host block table: the "
                         "model-runner hook did not run (see the plugin's start-up "
                         "warning). Every step copies the device block table and runs "
                         "eagerly.")
        if self.host_block_table is None or seq is None:
            return None
        b = cam.num_reqs
        return cam.query_start_loc_cpu[: b + 1], seq[:b], self.host_block_table()[:b]



Analysis = tuple[np.ndarray, tuple[HotGroup, ...], tuple[Choice, ...]]
Prepared = tuple[np.ndarray, np.ndarray, np.ndarray, tuple[HotGroup, ...], tuple[Choice, ...]]


class StepMode(Enum):
    """How the runner may run a step's attention."""

    FULL = "full"  # a FULL graph may replay it: the paged kernel only
    FULL_CASCADE = "full-with-cascade"  # a FULL graph in the graph form (cascade groups)
    PIECEWISE = "piecewise"  # attention eager


@dataclass(frozen=True)
class StepAnalysis:
    """One step as the model-runner hook analysed it, before the runner picked its
    graph mode: the mode, and the host analysis (query starts, sequence lengths, HOT
    lengths, groups, choices; None without the host block table) that ``build`` reuses
    when it is handed the same step."""

    mode: StepMode
    host: Prepared | None = None


def _same_step(prepared: Prepared | None,
               host: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None
               ) -> Analysis | None:
    """analyse_step's (hot lengths, groups, choices) when ``build`` sees the same step:
    the same query starts and sequence lengths (the runner's optimistic lengths are
    computed and scheduled tokens, as analyse_step adds them) over the same host block
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

