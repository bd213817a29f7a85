"""Deterministic random weights for dummy-weight models.

vLLM's ``load_format="dummy"`` draws weights uniform in +-1e-3, which makes a tiny model
emit the same two alternating tokens for every prompt, so output comparisons prove
nothing. ``reinit_weights`` redraws them with a larger spread (norms at 1.0, the rest
uniform in +-spread), seeded by parameter name: identical in every engine, whatever the
backend, so a stock and a GraniKV engine compute the same function.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch


def reinit_weights(worker: Any, seed: int = 0, spread: float = 0.15) -> int:
    """Runs on a worker (``collective_rpc``); returns the number of tensors redrawn."""
    model = worker.model_runner.get_model()
    n = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:
                g = torch.Generator(device="cpu").manual_seed(
                    seed * 1_000_003 + zlib.crc32(name.encode()))
                w = torch.empty(p.shape, dtype=torch.float32).uniform_(-spread, spread,
                                                                       generator=g)
                p.copy_(w.to(p.dtype))
            n += 1
    return n
