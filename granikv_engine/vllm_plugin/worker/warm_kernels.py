"""A kernel of vLLM's that every GraniKV step runs and vLLM's warm-up does not compile
for GraniKV's block size.

vLLM's warm-up (``warm_v1_block_table_kernels``) compiles the block table's slot-mapping
kernel (``_compute_slot_mapping_kernel``) at block sizes 3 and 16. The block size is part
of the compiled kernel's key (its ``KV_CACHE_BLOCK_SIZE``, and Triton specialises an
integer argument equal to 1), so at GraniKV's block size 1 the kernel was compiled at the
first real step, while serving: vLLM's JIT monitor logged it on every GraniKV engine of
the GPU runs of 2026-12-06 and on none of stock's. Here the runner's own block tables run
it once, for a one-token step, when the runner's KV cache is initialised (before vLLM's
warm-up and its JIT monitor). On the CPU build it runs vLLM's C++ replacement.
"""

from __future__ import annotations

from typing import Any

import torch


def warm_slot_mapping(runner: Any) -> int:
    """Run the runner's slot-mapping kernel once; returns how many block tables ran it.
    Its output buffer is rewritten by every step, so this leaves nothing behind."""
    table = getattr(getattr(runner, "input_batch", None), "block_table", None)
    if table is None:
        return 0
    device = runner.device
    query_start_loc = torch.tensor([0, 1], dtype=torch.int32, device=device)
    positions = torch.zeros(1, dtype=torch.int64, device=device)
    table.compute_slot_mapping(1, query_start_loc, positions)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return len(table.block_tables)
