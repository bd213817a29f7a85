"""GraniKVConfig: one frozen dataclass; dictionaries and YAML only at the edges.

In vLLM it arrives as ``additional_config={"granikv": {...}}`` (engine argument
``--additional-config '{"granikv": {"enabled": true}}'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

BACKENDS = ("auto", "cascade", "paged")


@dataclass(frozen=True)
class GraniKVConfig:
    enabled: bool = False
    hot_slots: int = 0  # size of the HOT arena in tokens; 0: use hot_fraction
    hot_fraction: float = 0.5  # share of the KV slots reserved as HOT arena
    backend: str = "auto"  # "auto" (dispatcher), or force "cascade" / "paged"
    calibrate: bool = True  # measure the backends at start-up on a GPU
    calibration_path: str = ""  # load (or store) the calibration table here
    min_hot_len: int = 16  # shorter HOT runs are not worth a cascade group
    # GPU: decode steps replay FULL CUDA graphs (attention included); steps with prefill
    # rows, and small ones with a cascade group, run PIECEWISE (attention eager).
    full_cudagraphs: bool = True
    # FULL graphs of at least this many rows carry the cascade (graph_plan.py) for up to
    # cascade_graph_groups HOT groups a step; 0: cascade steps always run PIECEWISE
    cascade_graph_min_rows: int = 16
    cascade_graph_groups: int = 16
    dispatch_margin: float = 0.05
    # the engine core's allocation for running requests takes the direct path of
    # vllm_plugin/core/fast_alloc.py (False: vLLM's generic allocate_slots every time)
    fast_alloc: bool = True
    prompt_match: bool = True  # bind prompts that start with a prefix of their team
    # COLD prefix caching hashes and looks up per this many tokens (stock vLLM's block
    # size) and allocates per token; 1: a hash per token, as vLLM does at block size 1.
    # KV-cache events and KV connectors read per-block hashes: with either, it is 1.
    hash_chunk: int = 16
    # implicit HOT (vllm_plugin/core/implicit.py): a prompt head of at least
    # implicit_min_len tokens that implicit_min_hits requests of a team found in COLD
    # prefix caching is promoted to HOT, within implicit_fraction of the arena
    implicit_hot: bool = False
    implicit_fraction: float = 0.25
    implicit_min_len: int = 1024
    implicit_min_hits: int = 2
    # HOT slots each team's prefixes may hold together (hot_budget.py); 0: no per-team
    # budget here (the platform sends each engine its teams' budgets at start-up)
    team_hot_slots: int = 0
    default_team: str = "default"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"granikv.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.hot_slots < 0:
            raise ValueError("granikv.hot_slots must be >= 0")
        if not 0.0 <= self.hot_fraction < 1.0:
            raise ValueError("granikv.hot_fraction must be in [0, 1)")
        if self.cascade_graph_min_rows < 0 or self.cascade_graph_groups < 1:
            raise ValueError("granikv.cascade_graph_min_rows must be >= 0 and "
                             "granikv.cascade_graph_groups >= 1")
        if self.min_hot_len < 1:
            raise ValueError("granikv.min_hot_len must be >= 1")
        if self.hash_chunk < 1:
            raise ValueError("granikv.hash_chunk must be >= 1")
        if not 0.0 <= self.implicit_fraction <= 1.0:
            raise ValueError("granikv.implicit_fraction must be in [0, 1]")
        if self.team_hot_slots < 0:
            raise ValueError("granikv.team_hot_slots must be >= 0")
        if self.implicit_min_len < 1 or self.implicit_min_hits < 1:
            raise ValueError("granikv.implicit_min_len and implicit_min_hits must be >= 1")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> GraniKVConfig:
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown granikv settings {unknown}; known: {sorted(known)}")
        return cls(**d)

    def hot_capacity(self, num_slots: int) -> int:
        """HOT arena size for a cache of ``num_slots`` token slots (slot 0 is vLLM's null
        block and is never part of either pool)."""
        usable = max(num_slots - 1, 0)
        want = self.hot_slots or int(usable * self.hot_fraction)
        return max(0, min(want, usable))
