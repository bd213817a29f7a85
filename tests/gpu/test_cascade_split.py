"""bench/cascade_split.py: the cascade's launches, run apart, give forward's output, and
each is timed (run on the H200; skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_the_launches_apart_are_the_whole_layer() -> None:
    from granikv_engine.bench.cascade_split import split_point

    r = split_point("llama-3.1-8b", 16, 1024, 32, splits=(1, 2))
    assert r["parts_vs_forward_rel_err"] < 1e-2, r
    for key in ("suffix_us", "context_us", "whole_us", "context_splits_1_us",
                "context_splits_2_us"):
        assert r[key] > 0, (key, r)
    # the whole layer is the three launches (and the query gather it skips here)
    assert 0.5 * r["parts_us"] < r["whole_us"] < 1.5 * r["parts_us"] + 10, r
