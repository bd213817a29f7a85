"""Lowering a decode step into fixed buffers, so that its cascade can replay in a FULL
CUDA graph.

A replayed graph reads the addresses it captured, with the shapes it captured. For a
graph of ``N`` rows (the model runner's padded row count; one query token a row), every
step of that size is lowered into the same buffers, whatever its grouping:
- the paged pass (each row's COLD suffix, or its whole sequence): ``kv_lens[:N]``,
  ``skip[:N]`` and the shifted block table ``table[:N]``; padded rows have length 0;
- the dense HOT pass: ``groups`` varlen groups (``cu_q``, ``cu_k``, ``seqused_k``), the
  step's cascade groups first, then empty ones (no queries, no keys);
- the cascade queries: ``gather[:N]``, the row each one reads (0 for padding), and
  ``scatter[:N]``, the row its HOT part is merged into (-1 for padding: skipped).
The integer bounds a kernel takes on the host are fixed per ``N`` as well: one query a
row, ``N`` queries a group at most, the HOT arena's length at most.

The host fills the per-step values into one array and stages it in one copy
(``PinnedStager``) into one device array that holds the small buffers; the suffix lengths
and the shifted table are then computed on the device from the runner's own (persistent)
tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from granikv_engine.dispatcher import Backend
from granikv_engine.step_plan import CascadeMeta, KernelPlan, PinnedStager, StepPlan

Tensor = torch.Tensor


@dataclass(frozen=True)
class GraphLimits:
    rows: int  # the most rows a graph has (the largest capture size, max_num_seqs)
    width: int  # columns of the runner's block table (slots a row can have)
    groups: int  # cascade groups a graph step can carry
    hot_len: int  # the HOT arena's length: no group's prefix is longer


class GraphBuffers:
    """The fixed buffers of graph-form plans (one set per metadata builder)."""

    def __init__(self, limits: GraphLimits, device: torch.device) -> None:
        self.limits = lim = limits
        r, g = lim.rows, lim.groups
        # layout of the small buffers: skip | gather | scatter | cu_q | cu_k | seqused_k
        self._at = np.cumsum([0, r, r, r, g + 1, g + 1, g])
        self._host = np.zeros(int(self._at[-1]), dtype=np.int32)
        self._stage = PinnedStager(device, self._host.shape[0])
        self._dev = self._stage.dev  # a fixed address: every copy has the same size
        self.kv_lens = torch.zeros(r, dtype=torch.int32, device=device)
        self.table = torch.zeros(r, lim.width, dtype=torch.int32, device=device)
        self._cols = torch.arange(lim.width, dtype=torch.int64, device=device)

    def _part(self, i: int) -> Tensor:
        return self._dev[int(self._at[i]):int(self._at[i + 1])]

    def fits(self, plan: StepPlan) -> bool:
        """Whether the step can take the graph form: a decode step (at most one query a
        row; padded rows have none) no larger than the buffers."""
        lim = self.limits
        return (plan.num_rows <= lim.rows and plan.block_table.shape[1] <= lim.width
                and (plan.num_rows == 0 or int(plan.q_lens.max()) <= 1))

    def lower(self, plan: StepPlan, backends: Sequence[Backend]) -> KernelPlan:
        """The step in graph form. The returned plan's tensors are views of this
        object's buffers with shapes that depend on ``plan.num_rows`` only."""
        if len(backends) != len(plan.groups):
            raise ValueError(f"{len(backends)} choices for {len(plan.groups)} groups")
        lim, n = self.limits, plan.num_rows
        chosen = [g for g, be in zip(plan.groups, backends) if be is Backend.CASCADE]
        if not self.fits(plan) or len(chosen) > lim.groups:
            raise ValueError(f"the step ({n} rows, {len(chosen)} cascade groups) does not "
                             f"fit the graph buffers {lim}")
        skip, cascade, q_index, _ = plan.cascade_layout(chosen)
        qc, ng = len(q_index), len(cascade)
        host, at = self._host, self._at
        host[at[0]:at[0] + n] = skip
        host[at[1]:at[1] + n] = 0
        host[at[1]:at[1] + qc] = q_index
        host[at[2]:at[2] + n] = -1
        host[at[2]:at[2] + qc] = q_index
        cu_q, cu_k, used = host[at[3]:at[4]], host[at[4]:at[5]], host[at[5]:at[6]]
        cu_q[:] = qc
        cu_q[:ng] = [c.q_begin for c in cascade]
        cu_k[:] = 0  # empty groups read nothing; any in-range start will do
        cu_k[:ng] = [c.hot_start for c in cascade]
        used[:] = 0
        used[:ng] = [c.hot_len for c in cascade]
        self._stage(host)  # one host-to-device copy
        skip_t = self._part(0)[:n]
        kv_lens = self.kv_lens[:n]
        torch.sub(plan.seq_lens[:n].to(torch.int32), skip_t, out=kv_lens)
        width = int((plan.seq_lens_host - skip).max()) if n else 0
        if width > 0:  # block_table[i, skip[i] + j], clamped inside the runner's table
            m = plan.block_table.shape[1]
            cols = (self._cols[:width].unsqueeze(0) + skip_t.unsqueeze(1)).clamp_(max=m - 1)
            self.table[:n, :width].copy_(torch.gather(plan.block_table[:n], 1, cols))
        meta = CascadeMeta(self._part(3), self._part(4), self._part(5), max(n, 1),
                           max(lim.hot_len, 1), identity=False, gather=self._part(1)[:n])
        return KernelPlan(plan.query_start_loc, kv_lens, skip_t, self.table[:n], 1,
                          lim.width, tuple(cascade), self._part(2)[:n], tuple(backends),
                          meta)
