"""host_table(runner, gid): a reader of a model runner's host copy of one KV-cache group's
block table, which a GraniKV builder uses so that a step's host analysis never waits for
the GPU; and the call-stack fallback that finds a builder's runner when the model-runner
hook (runner_binding.py) was not installed.

This module knows builders only as objects with a ``host_block_table`` slot, so the
builder can call it and runner_binding.py can import the builder, without a cycle.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from vllm.logger import init_logger

logger = init_logger(__name__)


def host_table(runner: Any, gid: int) -> Callable[[], torch.Tensor]:
    """Reads ``runner``'s host block table of KV-cache group ``gid`` (a weak reference:
    the builder must not keep its runner alive)."""
    ref = weakref.ref(runner)

    def get() -> torch.Tensor:
        live = ref()
        if live is None:
            raise RuntimeError("the model runner is gone")
        table: torch.Tensor = live.input_batch.block_table.block_tables[gid].get_cpu_tensor()
        return table

    return get


def bind_from_caller(builder: Any, depth: int = 12) -> bool:
    """Fallback when the model-runner hook could not be installed: the runner that calls
    ``build`` is on the stack; give ``builder`` its host block table (once, at the first
    step). True when bound."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            break
        cand = frame.f_locals.get("self")
        if hasattr(cand, "attn_groups") and hasattr(cand, "input_batch"):
            gid = _group_of(cand, builder)
            if gid is not None:
                builder.host_block_table = host_table(cand, gid)
                logger.info("GraniKV: bound a builder to the model runner's host block "
                            "table (from the call stack)")
                return True
        frame = frame.f_back
    logger.warning("GraniKV: no host block table; each step copies the device block table")
    return False


def _group_of(runner: Any, builder: Any) -> int | None:
    """The KV-cache group id whose attention groups hold ``builder``, if any."""
    for gid, groups in enumerate(getattr(runner, "attn_groups", []) or []):
        for group in groups:
            if any(b is builder for b in getattr(group, "metadata_builders", [])):
                return gid
    return None
