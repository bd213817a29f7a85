"""StepPlan: one step's rows grouped by HOT prefix, lowered to kernel metadata.

A row is one request in the step: ``q_len`` new query tokens at the end of a sequence of
``seq_len`` tokens whose K/V slots are ``block_table[i, :seq_len]`` (page size 1, so a
block id is a slot id). Its HOT length is the run of leading slots that are contiguous,
inside the HOT arena, and already computed (before this step's queries): those keys are
attended non-causally by every query of the row, so rows sharing ``(hot_start, hot_len)``
form a group whose prefix can be read once for all of them.

Lowering turns per-group backend choices into the metadata of one step:
- every row gets a "suffix" part: causal paged attention over the slots after its
  skipped HOT part (all of its slots when its group runs the unified paged backend);
- cascade groups also get a dense part: their queries against the contiguous slab, to be
  merged with the suffix part by log-sum-exp.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from granikv_engine.dispatcher import Backend, GroupStats

Tensor = torch.Tensor


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


@dataclass(frozen=True)
class KernelPlan:
    """Metadata for one step, built once and shared by every layer."""

    query_start_loc: Tensor  # [B+1] int32
    kv_seq_lens: Tensor  # [B] int32, keys of each row's suffix part
    kv_pos_start: Tensor  # [B] int32, absolute position of the first suffix key
    block_table: Tensor  # [B, max_kv] int32, suffix slots; stale past kv_seq_lens
    max_q: int
    max_kv: int
    cascade: tuple[CascadeGroup, ...]
    cascade_q_index: Tensor  # [Qc] int64, query token ids of cascade groups, group-major
    backends: tuple[Backend, ...]  # per HotGroup, as chosen
    cascade_dev: CascadeMeta | None = None  # None when no group runs the cascade

    def kv_csr(self) -> tuple[Tensor, Tensor]:
        """(indptr [B+1], indices [N]) of the suffix slots, for CSR-style kernels."""
        cols = torch.arange(self.block_table.shape[1], device=self.block_table.device)
        mask = cols.unsqueeze(0) < self.kv_seq_lens.unsqueeze(1)
        indptr = torch.zeros(self.kv_seq_lens.numel() + 1, dtype=torch.int32,
                             device=self.block_table.device)
        indptr[1:] = torch.cumsum(self.kv_seq_lens, 0)
        return indptr, self.block_table[mask]


def hot_lengths(block_table: Tensor, ctx_lens: Tensor, arena: tuple[int, int]) -> Tensor:
    """[B] int64: leading slots of each row that are contiguous, in ``arena = [a0, a1)``
    and below the row's computed context. Scans only ``block_table[:, :max(ctx)]``:
    entries past a row's length are stale, so each row is also bounded by ``ctx_lens``."""
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


@dataclass(frozen=True)
class StepPlan:
    query_start_loc: Tensor  # [B+1] int32
    seq_lens: Tensor  # [B] int32
    block_table: Tensor  # [B, M] int32
    hot_lens: Tensor  # [B] int64
    groups: tuple[HotGroup, ...]
    q_lens: tuple[int, ...]  # host copies
    seq_lens_host: tuple[int, ...]

    @property
    def num_rows(self) -> int:
        return len(self.q_lens)

    @classmethod
    def build(cls, query_start_loc: Tensor, seq_lens: Tensor, block_table: Tensor,
              arena: tuple[int, int], min_hot_len: int = 1) -> StepPlan:
        q_lens = query_start_loc[1:] - query_start_loc[:-1]
        hot = hot_lengths(block_table, seq_lens - q_lens, arena)
        host = torch.stack([q_lens.to(torch.int64), seq_lens.to(torch.int64), hot,
                            block_table[:, 0].to(torch.int64) if block_table.shape[1]
                            else torch.zeros_like(hot)]).cpu().tolist()
        q_h, s_h, hot_h, first_h = host if host else ([], [], [], [])
        by_key: dict[tuple[int, int], list[int]] = {}
        for i, h in enumerate(hot_h):
            if h >= min_hot_len:
                by_key.setdefault((first_h[i], h), []).append(i)
        groups = tuple(
            HotGroup(start, length, tuple(rows), sum(q_h[r] for r in rows),
                     sum(s_h[r] - length for r in rows))
            for (start, length), rows in sorted(by_key.items()))
        if min_hot_len > 1:  # rows below the threshold are plain paged rows
            keep = torch.zeros_like(hot)
            for g in groups:
                keep[list(g.rows)] = g.hot_len
            hot = keep
        return cls(query_start_loc, seq_lens, block_table, hot, groups, tuple(q_h),
                   tuple(s_h))

    def lower(self, backends: Sequence[Backend]) -> KernelPlan:
        if len(backends) != len(self.groups):
            raise ValueError(f"{len(backends)} choices for {len(self.groups)} groups")
        dev = self.block_table.device
        skip = [0] * self.num_rows
        cascade: list[CascadeGroup] = []
        order: list[int] = []
        q_begin = 0
        for g, be in zip(self.groups, backends):
            if be is not Backend.CASCADE:
                continue
            for r in g.rows:
                skip[r] = g.hot_len
            order.extend(g.rows)
            cascade.append(CascadeGroup(g.hot_start, g.hot_len, q_begin,
                                        q_begin + g.num_queries))
            q_begin += g.num_queries
        skip_t = torch.tensor(skip, dtype=torch.int32, device=dev)
        kv_lens = self.seq_lens.to(torch.int32) - skip_t
        kv_lens_h = [s - k for s, k in zip(self.seq_lens_host, skip)]
        max_kv = max(kv_lens_h, default=0)
        table = self._shifted_table(skip_t, max_kv)
        return KernelPlan(self.query_start_loc, kv_lens, skip_t, table,
                          max(self.q_lens, default=0), max_kv, tuple(cascade),
                          self._query_index(order), tuple(backends),
                          self._cascade_meta(cascade, order))

    def _cascade_meta(self, groups: list[CascadeGroup], order: list[int]) -> CascadeMeta | None:
        if not groups:
            return None
        cu_q = [g.q_begin for g in groups] + [groups[-1].q_end]
        cu_k = [g.hot_start for g in groups] + [groups[-1].hot_start + groups[-1].hot_len]
        used = [g.hot_len for g in groups]
        packed = torch.tensor(cu_q + cu_k + used, dtype=torch.int32,
                              device=self.block_table.device)  # one host-to-device copy
        n = len(groups) + 1
        identity = order == list(range(self.num_rows))
        return CascadeMeta(packed[:n], packed[n:2 * n], packed[2 * n:],
                           max(g.q_end - g.q_begin for g in groups), max(used), identity)

    def _shifted_table(self, skip: Tensor, width: int) -> Tensor:
        """block_table[i, skip[i] + j] for j < width, clamped inside the table."""
        m = self.block_table.shape[1]
        if width == 0 or m == 0:
            return self.block_table.new_zeros((self.num_rows, max(width, 1)))
        cols = torch.arange(width, device=skip.device).unsqueeze(0) + skip.unsqueeze(1)
        return torch.gather(self.block_table, 1, cols.clamp_(max=m - 1).to(torch.int64))

    def _query_index(self, rows: list[int]) -> Tensor:
        dev = self.query_start_loc.device
        if not rows:
            return torch.zeros(0, dtype=torch.int64, device=dev)
        r = torch.tensor(rows, dtype=torch.int64, device=dev)
        starts = self.query_start_loc.to(torch.int64)[r]
        lens = self.query_start_loc.to(torch.int64)[r + 1] - starts
        total = int(sum(self.q_lens[i] for i in rows))
        base = torch.repeat_interleave(starts - torch.cumsum(lens, 0) + lens, lens,
                                       output_size=total)
        return base + torch.arange(total, device=dev)
