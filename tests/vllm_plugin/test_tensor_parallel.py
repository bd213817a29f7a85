"""Tensor parallelism on the CPU build (TP=2, one core per rank): GraniKV gives the same
tokens as stock vLLM at the same TP degree, the HOT arena is shared through global block
ids, and every rank takes the same dispatcher decisions."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from granikv_engine.vllm_plugin.client import bind_args, control, register
from tests.vllm_plugin.conftest import COMMON
from tests.vllm_plugin.helpers import assert_same, generate, params, tokens

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def tp_engines() -> Iterator[tuple[Any, Any]]:
    from vllm import LLM

    from granikv_engine.vllm_plugin.worker.worker_ext import EXTENSION

    old = os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "0|1"  # one core per rank
    kw = {**COMMON, "tensor_parallel_size": 2, "distributed_executor_backend": "mp",
          "worker_extension_cls": EXTENSION, "max_model_len": 1024}
    engines = []
    try:
        for extra in ({"block_size": 16}, {"additional_config": {"granikv": {
                "enabled": True, "hot_slots": 1024, "backend": "cascade"}}}):
            llm = LLM(**kw, **extra)
            assert llm.collective_rpc("granikv_reinit_weights") == [15, 15]
            engines.append(llm)
        yield engines[0], engines[1]
    finally:
        for llm in engines:
            llm.llm_engine.engine_core.shutdown()
        if old is None:
            os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
        else:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = old


def test_tp2_matches_stock_and_ranks_agree(tp_engines: tuple[Any, Any]) -> None:
    stock, gk = tp_engines
    prefix = tokens(21, 300)
    assert register(gk, "red", prefix, prefix_id="red-ctx")["state"] == "ready"
    agents = [prefix + tokens(700 + j, 5 + 3 * j) for j in range(6)]
    assert_same(generate(stock, agents, params(8)),
                generate(gk, agents, params(8, bind_args("red", "red-ctx"))))
    st = control(gk, "stats")
    assert st["hits"]["hits"] == 6
    assert st["dispatch"]["groups"]["cascade"] > 0
    assert st["dispatch_ranks_agree"] is True  # every rank chose the same backends
