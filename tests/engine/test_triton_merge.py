"""The Triton in-place merge against the reference merge, through Triton's interpreter
on CPU (the same kernel source runs compiled on the GPU: tests/gpu)."""

import os
from collections.abc import Iterator

import pytest
import torch

_had = os.environ.get("TRITON_INTERPRET")
os.environ["TRITON_INTERPRET"] = "1"  # read when the kernel is decorated and launched
from granikv_engine.attention.reference import merge_attn_states  # noqa: E402
from granikv_engine.attention.triton_merge import merge_indexed_  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _interpreter() -> Iterator[None]:
    os.environ["TRITON_INTERPRET"] = "1"
    yield
    if _had is None:  # keep it out of the vLLM engines that later tests spawn
        os.environ.pop("TRITON_INTERPRET", None)



@pytest.mark.parametrize(("t", "h", "d", "qc"), [(7, 4, 64, 3), (12, 8, 32, 12), (5, 5, 80, 1)])
def test_merge_indexed_matches_reference(t: int, h: int, d: int, qc: int) -> None:
    g = torch.Generator().manual_seed(t * 100 + h + d + qc)
    out = torch.randn(t, h, d, generator=g)
    lse_s = torch.randn(h, t, generator=g) * 3
    o_hot = torch.randn(qc, h, d, generator=g)
    lse_h = torch.randn(h, qc, generator=g) * 3
    idx = torch.randperm(t, generator=g)[:qc]
    ref = out.clone()
    merged, _ = merge_attn_states(out[idx], lse_s[:, idx], o_hot, lse_h)
    ref[idx] = merged
    got = out.clone()
    merge_indexed_(got, lse_s, o_hot, lse_h, idx)
    err = float((got - ref).norm() / ref.norm())
    assert err < 1e-6, err
    untouched = torch.ones(t, dtype=torch.bool)
    untouched[idx] = False
    assert torch.equal(got[untouched], out[untouched])


def test_launcher_checks_shapes() -> None:
    out = torch.zeros(4, 2, 8)
    with pytest.raises(AssertionError):
        merge_indexed_(out, torch.zeros(2, 4), torch.zeros(3, 2, 8), torch.zeros(2, 2),
                       torch.arange(3))
