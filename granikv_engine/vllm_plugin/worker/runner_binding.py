"""The model runner's side of GraniKV's builders: finding them on a runner, and giving
them the runner's host copy of the block table (host_table.py) when the runner's KV cache
is initialised."""

from __future__ import annotations

from typing import Any

from granikv_engine.vllm_plugin.worker.host_table import host_table
from granikv_engine.vllm_plugin.worker.metadata_builder import GraniKVMetadataBuilder


def runner_builders(runner: Any) -> list[tuple[int, GraniKVMetadataBuilder]]:
    """(KV-cache group id, builder) for every GraniKV builder of a model runner."""
    return [(gid, b) for gid, groups in enumerate(getattr(runner, "attn_groups", []) or [])
            for group in groups for b in getattr(group, "metadata_builders", [])
            if isinstance(b, GraniKVMetadataBuilder)]


def bind_host_block_tables(runner: Any) -> int:
    """Give every GraniKV builder of a (V1) model runner its host block table."""
    found = runner_builders(runner)
    for gid, b in found:
        b.host_block_table = host_table(runner, gid)
    return len(found)
