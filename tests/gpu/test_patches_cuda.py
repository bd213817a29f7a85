"""The vLLM internals of the CUDA build (FA3's launchers) are there as listed."""

from __future__ import annotations

import pytest

from granikv_engine.vllm_plugin import patches

pytestmark = pytest.mark.gpu


def test_the_cuda_builds_internals_are_there_as_listed() -> None:
    assert patches.check_internals(gpu=True) == []
