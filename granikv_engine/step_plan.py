"""StepPlan: one step's rows grouped by HOT prefix, lowered to kernel metadata.

A row is one request in the step: ``q_len`` new query tokens at the end of a sequence of
``seq_len`` tokens whose K/V slots are ``block_table[i, :seq_len]`` (page size 1, so a
block id is a slot id). Its HOT length is the run of leading slots that are contiguous,
inside the HOT arena, and already computed (before this step's queries): those keys are
attended non-causally by every query of the row, so rows sharing ``(hot_start, hot_len)``
form a group whose prefix can be read once for all of them.

The analysis runs on the host, from host copies of the step's metadata (the model
runner keeps them), so building a plan never waits for the GPU. Lowering turns per-group
backend choices into device metadata with at most one host-to-device copy:
- every row gets a "suffix" part: causal paged attention over the slots after its
  skipped HOT part (all of its slots when its group runs the unified paged backend);
- cascade groups also get a dense part: their queries against the contiguous slab, to be
  merged with the suffix part by log-sum-exp.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from granikv_engine.dispatcher import Backend, GroupStats

Tensor = torch.Tensor
# Copies a host int32 array to the plan's device; the builder passes a pinned,
# non-blocking one on GPUs.
Stager = Callable[[np.ndarray], Tensor]


@dataclass(frozen=True)
class HotGroup:
    hot_start: int
    hot_len: int
    rows: tuple[int, ...]
    num_queries: int
    suffix_tokens: int  # sum over rows of seq_len - hot_len

    def stats(self) -> GroupStats:
        return GroupStats(num_rows=len(self.rows), num_queries=self.num_queries,
                          hot_len=self.hot_len, suffix_tokens=self.suffix_tokens)


@dataclass(frozen=True)
class CascadeGroup:
    hot_start: int
    hot_len: int
    q_begin: int  # this group's queries are cascade_q_index[q_begin:q_end]
    q_end: int


@dataclass(frozen=True)
class CascadeMeta:
    """The cascade groups in the varlen form dense kernels take (one launch for all):
    queries ``cu_q[g]:cu_q[g+1]`` of ``cascade_q_index`` attend slots
    ``cu_k[g] : cu_k[g] + seqused_k[g]``. Groups are sorted by HOT start."""

    cu_q: Tensor  # [G+1] int32
    cu_k: Tensor  # [G+1] int32
    seqused_k: Tensor  # [G] int32
    max_q: int
    max_k: int
    identity: bool  # cascade_q_index == arange(num_tokens): no gather needed
    # graph form (graph_plan.py): the rows the queries are read from, when
    # cascade_q_index has -1 padding; FA3's ahead-of-time schedule of the dense pass and
    # its split bound (None/0: the kernel schedules itself)
    gather: Tensor | None = None
    scheduler_metadata: Tensor | None = None
    num_splits: int = 0


@dataclass(frozen=True)
class KernelPlan:
    """Metadata for one step, built once and shared by every layer."""

    query_start_loc: Tensor  # [B+1] int32
    kv_seq_lens: Tensor  # [B] int32, keys of each row's suffix part
    kv_pos_start: Tensor  # [B] int32, absolute position of the first suffix key
    block_table: Tensor  # [B, >= max_kv] int32, suffix slots; stale past kv_seq_lens
    max_q: int
    max_kv: int
    cascade: tuple[CascadeGroup, ...]
    cascade_q_index: Tensor  # [Qc] int32, query token ids of cascade groups, group-major
    # (graph form: [N], -1 past the cascade queries)
    backends: tuple[Backend, ...]  # per HotGroup, as chosen
    cascade_dev: CascadeMeta | None = None  # None when no group runs the cascade
    # FA3's ahead-of-time schedule of the paged pass, in a buffer that outlives the step
    # (FULL CUDA graphs replay it), and the split bound it was made with; None/0: the
    # kernel schedules itself. Only plans with no cascade group carry one.
    scheduler_metadata: Tensor | None = None
    num_splits: int = 0

    def kv_csr(self) -> tuple[Tensor, Tensor]:
        """(indptr [B+1], indices [N]) of the suffix slots, for CSR-style kernels."""
        cols = torch.arange(self.block_table.shape[1], device=self.block_table.device)
        mask = cols.unsqueeze(0) < self.kv_seq_lens.unsqueeze(1)
        indptr = torch.zeros(self.kv_seq_lens.numel() + 1, dtype=torch.int32,
                             device=self.block_table.device)
        indptr[1:] = torch.cumsum(self.kv_seq_lens, 0)
        return indptr, self.block_table[mask]


def hot_lengths(block_table: Tensor, ctx_lens: Tensor, arena: tuple[int, int]) -> Tensor:
    """[B] int64 by a full scan: leading slots of each row that are contiguous, in
    ``arena = [a0, a1)`` and below the row's computed context. The reference for
    ``hot_lengths_host``; bounded by ``ctx_lens`` because entries past a row's length
    are stale."""
    b = block_table.shape[0]
    m = int(ctx_lens.max()) if b else 0
    if m == 0 or arena[1] <= arena[0]:
        return torch.zeros(b, dtype=torch.int64, device=block_table.device)
    bt = block_table[:, :m].to(torch.int64)
    cols = torch.arange(m, device=bt.device)
    expect = bt[:, :1] + cols
    ok = (bt == expect) & (expect < arena[1]) & (bt[:, :1] >= arena[0])
    ok &= cols.unsqueeze(0) < ctx_lens.unsqueeze(1)
    return ok.to(torch.int32).cumprod(dim=1).sum(dim=1)


def hot_lengths_host(block_table: np.ndarray, ctx_lens: np.ndarray,
                     arena: tuple[int, int]) -> np.ndarray:
    """Same result as ``hot_lengths`` without scanning the rows.

    A row's arena slots are exactly one leading contiguous run (the scheduler gives HOT
    blocks only as a prefix, and COLD blocks are never inside the arena), so "slot k ==
    first + k" holds for k below the run and fails after it: a binary search finds its
    end. Rows that start at the same slot almost always share the run (the agents of
    one team), so one row per start is searched (in Python: a few microseconds, where
    numpy's per-call cost dominates at this size) and the others are only verified at
    that length (two gathers); a row that fails the check is searched on its own."""
    b = block_table.shape[0]
    out = np.zeros(b, dtype=np.int64)
    if b == 0 or block_table.shape[1] == 0:
        return out
    first = block_table[:, 0].astype(np.int64)
    inside = (first >= arena[0]) & (first < arena[1])
    hi = np.where(inside, np.minimum(ctx_lens.astype(np.int64), arena[1] - first), 0)
    rows = np.flatnonzero(hi > 0)
    if rows.size == 0:
        return out
    starts, inverse = np.unique(first[rows], return_inverse=True)
    cand = np.empty(starts.size, dtype=np.int64)
    for k in range(starts.size):  # one representative per start: the longest bound
        mine = rows[inverse == k]
        i = int(mine[np.argmax(hi[mine])])
        cand[k] = _run_length(block_table[i], int(first[i]), int(hi[i]))
    c = np.minimum(cand[inverse], hi[rows])
    f, width = first[rows], block_table.shape[1]
    below = np.where(c > 0, block_table[rows, np.maximum(c - 1, 0)] == f + c - 1, True)
    ends = (c == hi[rows]) | (block_table[rows, np.minimum(c, width - 1)] != f + c)
    good = below & ends
    out[rows[good]] = c[good]
    for i in rows[~good].tolist():
        out[i] = _run_length(block_table[i], int(first[i]), int(hi[i]))
    return out


def _run_length(row: np.ndarray, first: int, bound: int) -> int:
    """Largest n <= bound with row[k] == first + k for all k < n (row[0] == first)."""
    lo, hi = 0, bound
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if row[mid - 1] == first + mid - 1:
            lo = mid
        else:
            hi = mid - 1
    return lo


def group_rows(query_start: np.ndarray, seq_lens: np.ndarray, block_table: np.ndarray,
               arena: tuple[int, int], min_hot_len: int = 1
               ) -> tuple[np.ndarray, tuple[HotGroup, ...]]:
    """Host-side analysis of a step: each row's HOT length (0 below ``min_hot_len``) and
    the rows grouped by ``(hot_start, hot_len)``. Pure numpy: the model-runner hook runs
    it before the step's metadata is built (cuda_graphs.py), the builder inside."""
    q_lens = query_start[1:] - query_start[:-1]
    hot = hot_lengths_host(block_table, seq_lens - q_lens, arena)
    rows = np.flatnonzero(hot >= min_hot_len)
    groups: tuple[HotGroup, ...] = ()
    if rows.size:  # by (start, length), in that order; rows ascending inside a group
        span = int(arena[1]) + 1  # hot_len <= arena end: one int64 key per (start, len)
        keys = block_table[rows, 0].astype(np.int64) * span + hot[rows]
        uniq, inverse = np.unique(keys, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.cumsum(np.bincount(inverse, minlength=uniq.size))[:-1]
        q_sum = np.bincount(inverse, weights=q_lens[rows], minlength=uniq.size)
        s_sum = np.bincount(inverse, weights=seq_lens[rows] - hot[rows], minlength=uniq.size)
        groups = tuple(
            HotGroup(int(uniq[g] // span), int(uniq[g] % span), tuple(members.tolist()),
                     int(q_sum[g]), int(s_sum[g]))
            for g, members in enumerate(np.split(rows[order], bounds)))
    if min_hot_len > 1:  # rows below the threshold are plain paged rows
        hot = np.where(hot >= min_hot_len, hot, 0)
    return hot, groups


@dataclass(frozen=True)
class StepPlan:
    query_start_loc: Tensor  # [B+1] int32, on the device
    seq_lens: Tensor  # [B] int32, on the device
    block_table: Tensor  # [B, M] int32, on the device
    hot_lens: np.ndarray  # [B] int64, host
    groups: tuple[HotGroup, ...]
    q_lens: np.ndarray  # [B] host
    seq_lens_host: np.ndarray  # [B] host
    query_start_host: np.ndarray  # [B+1] host

    @property
    def num_rows(self) -> int:
        return len(self.q_lens)

    @classmethod
    def build(cls, query_start_loc: Tensor, seq_lens: Tensor, block_table: Tensor,
              arena: tuple[int, int], min_hot_len: int = 1,
              host: tuple[Tensor, Tensor, Tensor] | None = None,
              analysed: tuple[np.ndarray, tuple[HotGroup, ...]] | None = None) -> StepPlan:
        """``host``: CPU copies of (query_start_loc, seq_lens, block_table); without them
        the device tensors are copied (a device sync on a GPU). ``analysed``: what
        ``group_rows`` already returned for these very inputs."""
        qsl_h, seq_h, bt_h = host if host is not None else (
            query_start_loc.cpu(), seq_lens.cpu(), block_table.cpu())
        qsl = qsl_h.numpy().astype(np.int64)
        seqs = seq_h.numpy().astype(np.int64)
        hot, groups = analysed if analysed is not None else group_rows(
            qsl, seqs, bt_h.numpy(), arena, min_hot_len)
        q_lens = qsl[1:] - qsl[:-1]
        return cls(query_start_loc, seq_lens, block_table, hot, groups, q_lens, seqs, qsl)

    def lower(self, backends: Sequence[Backend], stage: Stager | None = None) -> KernelPlan:
        if len(backends) != len(self.groups):
            raise ValueError(f"{len(backends)} choices for {len(self.groups)} groups")
        dev = self.block_table.device
        max_q = int(self.q_lens.max()) if self.num_rows else 0
        chosen = [g for g, be in zip(self.groups, backends) if be is Backend.CASCADE]
        if not chosen:  # the unified paged kernel over the step's own tensors: no copy
            return KernelPlan(self.query_start_loc, self.seq_lens,
                              torch.zeros_like(self.seq_lens), self.block_table, max_q,
                              int(self.seq_lens_host.max()) if self.num_rows else 0, (),
                              torch.zeros(0, dtype=torch.int32, device=dev), tuple(backends))
        skip, cascade, q_index, order = self.cascade_layout(chosen)
        cu_q = [c.q_begin for c in cascade] + [cascade[-1].q_end]
        cu_k = [c.hot_start for c in cascade] + [cascade[-1].hot_start + cascade[-1].hot_len]
        used = [c.hot_len for c in cascade]
        packed = np.concatenate([skip, q_index, cu_q, cu_k, used]).astype(np.int32)
        dev_packed = (stage or _default_stage(dev))(packed)  # the one host-to-device copy
        b, n, ng = self.num_rows, len(q_index), len(cascade)
        skip_t = dev_packed[:b]
        meta_at = b + n
        meta = CascadeMeta(dev_packed[meta_at:meta_at + ng + 1],
                           dev_packed[meta_at + ng + 1:meta_at + 2 * ng + 2],
                           dev_packed[meta_at + 2 * ng + 2:meta_at + 3 * ng + 2],
                           max(c.q_end - c.q_begin for c in cascade), max(used),
                           order == list(range(b)))
        kv_lens = self.seq_lens.to(torch.int32) - skip_t
        max_kv = int((self.seq_lens_host - skip).max())
        return KernelPlan(self.query_start_loc, kv_lens, skip_t,
                          self._shifted_table(skip_t, max_kv), max_q, max_kv, tuple(cascade),
                          dev_packed[b:b + n], tuple(backends), meta)

    def cascade_layout(self, chosen: Sequence[HotGroup]
                       ) -> tuple[np.ndarray, list[CascadeGroup], np.ndarray, list[int]]:
        """The host side of lowering the ``chosen`` (cascade) groups: each row's skipped
        HOT length, the cascade groups with their query ranges, the query index
        (group-major) and the rows in that order."""
        skip = np.zeros(self.num_rows, dtype=np.int64)
        cascade: list[CascadeGroup] = []
        order: list[int] = []
        q_begin = 0
        for g in chosen:
            skip[list(g.rows)] = g.hot_len
            order.extend(g.rows)
            cascade.append(CascadeGroup(g.hot_start, g.hot_len, q_begin,
                                        q_begin + g.num_queries))
            q_begin += g.num_queries
        return skip, cascade, self._query_index(order), order

    def _shifted_table(self, skip: Tensor, width: int) -> Tensor:
        """block_table[i, skip[i] + j] for j < width, clamped inside the table."""
        m = self.block_table.shape[1]
        if width == 0 or m == 0:
            return self.block_table.new_zeros((self.num_rows, max(width, 1)))
        cols = torch.arange(width, device=skip.device).unsqueeze(0) + skip.unsqueeze(1)
        return torch.gather(self.block_table, 1, cols.clamp_(max=m - 1).to(torch.int64))

    def _query_index(self, rows: list[int]) -> np.ndarray:
        if not rows:
            return np.zeros(0, dtype=np.int64)
        r = np.asarray(rows)
        starts, lens = self.query_start_host[r], self.q_lens[r]
        offsets = np.repeat(starts - np.cumsum(lens) + lens, lens)
        return offsets + np.arange(int(lens.sum()))


class PinnedStager:
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

    def __call__(self, a: np.ndarray) -> Tensor:
        n = a.shape[0]
        if n > self.host.shape[0]:
            self._alloc(2 * n)
        self.host[:n].numpy()[:] = a
        self.dev[:n].copy_(self.host[:n], non_blocking=True)
        return self.dev[:n]


def _default_stage(device: torch.device) -> Stager:
    def stage(a: np.ndarray) -> Tensor:
        return torch.from_numpy(a).to(device)

    return stage
