"""Dispatcher: a pure policy from one group's statistics to an attention backend.

Only the HOT prefix differs between the backends: the unified paged kernel re-reads the
prefix once per row, the cascade reads it once per group and pays two extra launches
(dense prefix pass and merge). The choice comes from a calibration table measured on the
GPU when there is one, else from a roofline. It depends only on its inputs, so every
tensor-parallel rank given the same table takes the same decision.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple


class Backend(enum.StrEnum):
    CASCADE = "cascade"
    PAGED = "paged"


class Regime(enum.StrEnum):
    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"


class GroupStats(NamedTuple):
    num_rows: int
    num_queries: int
    hot_len: int
    suffix_tokens: int  # keys after the prefix, summed over rows

    @property
    def q_per_row(self) -> float:
        return self.num_queries / max(self.num_rows, 1)


@dataclass(frozen=True)
class AttnShape:
    """Attention shape of the whole model; per-rank heads follow from ``tp``."""

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int = 2
    hidden_size: int = 0
    tp: int = 1

    @property
    def q_heads_per_rank(self) -> int:
        return self.num_q_heads // self.tp

    @property
    def kv_heads_per_rank(self) -> int:
        return max(1, self.num_kv_heads // self.tp)


@dataclass(frozen=True)
class Hardware:
    """Roofline constants; defaults are an H200's measured ceilings (copy 4.3 TB/s,
    bf16 GEMM about 790 TFLOP/s on random data)."""

    mem_bw: float = 4.3e12  # bytes/s
    matmul_flops: float = 7.9e14
    paged_efficiency: float = 0.35  # share of matmul_flops a paged decode kernel reaches
    dense_efficiency: float = 0.70
    launch_us: float = 6.0
    num_sms: int = 132
    dense_tile_m: int = 128  # query rows (queries x GQA group) per CTA of a dense kernel
    link_bw: float = 3.6e11  # bytes/s for a TP all-reduce (NVLink, algorithm bandwidth)


class Choice(NamedTuple):
    backend: Backend
    regime: Regime
    cascade_us: float
    paged_us: float
    source: str  # "table" | "roofline" | "forced"


class Cost(NamedTuple):
    us: float
    compute_us: float
    memory_us: float


@dataclass(frozen=True)
class CalibrationPoint:
    num_rows: int
    hot_len: int
    q_per_row: int
    cascade_us: float
    paged_us: float


@dataclass(frozen=True)
class CalibrationTable:
    """Per-layer times of both backends over a grid of shapes, measured on one GPU."""

    points: tuple[CalibrationPoint, ...]
    meta: dict[str, object] = field(default_factory=dict)

    def nearest(self, s: GroupStats) -> CalibrationPoint | None:
        if not self.points:
            return None

        def dist(p: CalibrationPoint) -> float:
            return (abs(math.log2(p.num_rows) - math.log2(max(s.num_rows, 1)))
                    + abs(math.log2(p.hot_len) - math.log2(max(s.hot_len, 1)))
                    + abs(math.log2(p.q_per_row) - math.log2(max(s.q_per_row, 1.0))))

        return min(self.points, key=lambda p: (dist(p), p.num_rows, p.hot_len))

    def to_json(self) -> str:
        return json.dumps({"meta": self.meta, "points": [asdict(p) for p in self.points]},
                          indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CalibrationTable:
        d = json.loads(text)
        pts = tuple(CalibrationPoint(**p) for p in d["points"])
        return cls(pts, dict(d.get("meta", {})))

    @classmethod
    def load(cls, path: str | Path) -> CalibrationTable:
        return cls.from_json(Path(path).read_text())


class Dispatcher:
    """``choose(stats) -> Choice``; ``margin`` keeps the unified paged backend unless the
    cascade is expected to win by that fraction (it is the safe choice at small scale)."""

    def __init__(self, shape: AttnShape, hardware: Hardware | None = None,
                 table: CalibrationTable | None = None, force: Backend | None = None,
                 margin: float = 0.05) -> None:
        self.shape, self.hw, self.table = shape, hardware or Hardware(), table
        self.force, self.margin = force, margin

    def choose(self, s: GroupStats) -> Choice:
        casc, paged = self.cascade_cost(s), self.paged_cost(s)
        source = "roofline"
        c_us, p_us = casc.us, paged.us
        point = self.table.nearest(s) if self.table else None
        if point is not None:
            # The measured pair of the nearest grid point decides (a roofline rescaling
            # to the group's exact size mis-ranks small groups, where launch latency,
            # not bytes or FLOPs, sets the time).
            c_us, p_us = point.cascade_us, point.paged_us
            source = "table"
        if self.force is not None:
            backend, source = self.force, "forced"
        else:
            backend = Backend.CASCADE if c_us < p_us * (1 - self.margin) else Backend.PAGED
        chosen = casc if backend is Backend.CASCADE else paged
        return Choice(backend, self._regime(s, chosen), c_us, p_us, source)

    def choose_all(self, groups: Iterable[GroupStats]) -> list[Choice]:
        """Per-group choices, then one step-level check: the cascade's extra launches
        (one dense pass and one merge for all cascade groups together) are paid once per
        step, so the groups that gain must together gain more than that overhead."""
        choices = [self.choose(g) for g in groups]
        overhead = self.step_overhead_us()
        casc = [c for c in choices if c.backend is Backend.CASCADE and c.source != "forced"]
        if casc and sum(c.paged_us - c.cascade_us for c in casc) < overhead:
            choices = [c._replace(backend=Backend.PAGED) if c in casc else c for c in choices]
        return choices

    def step_overhead_us(self) -> float:
        """Launch cost of running the cascade in a step, beyond the paged pass."""
        if self.table is not None and "cascade_overhead_us" in self.table.meta:
            return float(self.table.meta["cascade_overhead_us"])  # type: ignore[arg-type]
        return 0.0

    # ---- roofline -----------------------------------------------------------------
    def _kv_bytes(self, tokens: float) -> float:
        sh = self.shape
        return tokens * sh.kv_heads_per_rank * sh.head_dim * 2 * sh.dtype_bytes

    def _prefix_flops(self, s: GroupStats) -> float:
        return 4.0 * s.num_queries * self.shape.q_heads_per_rank * s.hot_len * self.shape.head_dim

    def paged_cost(self, s: GroupStats) -> Cost:
        """The prefix part inside one paged kernel: read once per row."""
        mem = self._kv_bytes(s.num_rows * s.hot_len) / self.hw.mem_bw * 1e6
        comp = self._prefix_flops(s) / (self.hw.matmul_flops * self.hw.paged_efficiency) * 1e6
        return Cost(max(mem, comp), comp, mem)

    def cascade_cost(self, s: GroupStats) -> Cost:
        """Dense prefix pass, read once, plus the merge and two more launches.

        A dense pass has one CTA per tile of query rows per KV head; with few queries
        it cannot fill the GPU, so its rates scale with that occupancy."""
        sh, hw = self.shape, self.hw
        group = sh.q_heads_per_rank // sh.kv_heads_per_rank
        ctas = math.ceil(s.num_queries * group / hw.dense_tile_m) * sh.kv_heads_per_rank
        occ = min(1.0, ctas / hw.num_sms)
        q_bytes = s.num_queries * sh.q_heads_per_rank * sh.head_dim * sh.dtype_bytes
        mem = (self._kv_bytes(s.hot_len) + 5 * q_bytes) / (hw.mem_bw * occ) * 1e6
        comp = self._prefix_flops(s) / (hw.matmul_flops * hw.dense_efficiency * occ) * 1e6
        return Cost(max(mem, comp) + 2 * hw.launch_us, comp, mem)

    def comm_us(self, s: GroupStats) -> float:
        """Two all-reduces per layer of this group's hidden states under TP."""
        sh = self.shape
        if sh.tp <= 1 or sh.hidden_size <= 0:
            return 0.0
        vol = 2 * s.num_queries * sh.hidden_size * sh.dtype_bytes * 2 * (sh.tp - 1) / sh.tp
        return vol / self.hw.link_bw * 1e6

    def _regime(self, s: GroupStats, cost: Cost) -> Regime:
        if self.comm_us(s) > cost.us:
            return Regime.COMMUNICATION
        return Regime.COMPUTE if cost.compute_us >= cost.memory_us else Regime.MEMORY


def summarize(choices: Sequence[Choice]) -> dict[str, int]:
    """Counts per backend and regime, for metrics."""
    out: dict[str, int] = {}
    for c in choices:
        out[f"backend.{c.backend.value}"] = out.get(f"backend.{c.backend.value}", 0) + 1
        out[f"regime.{c.regime.value}"] = out.get(f"regime.{c.regime.value}", 0) + 1
    return out
