"""host_table(runner, gid): a reader of a model runner's host copy of one KV-cache group's
block table, which a GraniKV builder uses so that a step's host analysis never waits for
the GPU. The model-runner hook (runner_binding.py) gives it to the builders after the
runner's KV cache is initialised; a builder without one logs an error and runs eagerly.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch


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
