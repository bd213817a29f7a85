"""The model runner's side of GraniKV's builders: finding them on a runner, and giving
them the runner's host copy of the block table (so a step's host analysis never waits
for the GPU)."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from vllm.logger import init_logger

from granikv_engine.vllm_plugin.metadata_builder import GraniKVMetadataBuilder

logger = init_logger(__name__)


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

