"""Implicit HOT on the GPU (tiny dummy-weight Llama in bf16), against stock vLLM: prompts
that share a head, sent with nothing registered and no arguments, follow stock's tokens
(test_engine_graphs.py's check: equal until a near-tie) before and after the head is
promoted; the later ones are bound to it and run the cascade; the HOT range holds the
K/V that a fill of the same tokens writes (copied there by vLLM's block-copy channel on
the GPU model runner)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.gpu.test_engine_graphs import MODEL, _check, _run, _tokens

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HEAD = 700  # 43 whole chunks of 16: 688 tokens promoted


def _engine(tmp: Path, granikv: bool, **extra: Any) -> Any:
    """``extra``: more engine arguments."""
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    # run alone, nothing has initialized CUDA here before vLLM forks its engine core
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    from vllm import LLM

    from granikv_engine.vllm_plugin.worker.worker_ext import EXTENSION

    kw: dict[str, Any] = dict(
        model=MODEL, load_format="dummy", skip_tokenizer_init=True, max_model_len=3072,
        dtype="bfloat16", seed=0, max_num_seqs=64, enable_prefix_caching=True,
        gpu_memory_utilization=0.12, worker_extension_cls=EXTENSION,
        compilation_config={"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64]},
        kernel_config={"enable_flashinfer_autotune": False})
    if granikv:  # groups of >= 3 rows run the cascade
        pts = [{"num_rows": r, "hot_len": lp, "q_per_row": q,
                "cascade_us": 10.0 if r >= 3 else 100.0, "paged_us": 50.0}
               for r in (1, 2, 3, 8, 32) for lp in (64, 256, 1024) for q in (1, 64)]
        cal = tmp / "calibration.json"
        cal.write_text(json.dumps({"meta": {"note": "test table"}, "points": pts}))
        kw["additional_config"] = {"granikv": {
            "enabled": True, "hot_slots": 4096, "calibration_path": str(cal),
            "implicit_hot": True, "implicit_min_len": 64, "implicit_min_hits": 2}}
    else:
        kw["block_size"] = 16
    llm = LLM(**kw, **extra)
    llm.collective_rpc("granikv_reinit_weights")
    return llm


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    tmp = tmp_path_factory.mktemp("implicit")
    stock = _engine(tmp, granikv=False)
    gk = _engine(tmp, granikv=True)
    yield stock, gk
    for llm in (stock, gk):
        llm.llm_engine.engine_core.shutdown()


def test_a_shared_head_is_promoted_and_read_from_hot_with_stocks_tokens(
        engines: tuple[Any, Any]) -> None:
    from granikv_engine.vllm_plugin.client import control, register

    stock, gk = engines
    head = _tokens(5, HEAD)
    _run(stock, [head], 1, None)
    first = [head + _tokens(200 + j, 10 + 3 * j) for j in range(6)]
    _run(gk, [head], 1, None)  # the head into COLD prefix caching, as stock's
    matched = _check(_run(stock, first, 24, None), _run(gk, first, 24, None))
    st = control(gk, "stats")
    assert st["implicit"]["promotions"] == 1, st["implicit"]
    (entry,) = [p for p in control(gk, "list")["prefixes"] if p["implicit"]]
    assert entry["length"] == HEAD // 16 * 16 and entry["state"] == "ready"
    later = [head + _tokens(300 + j, 12 + 5 * j) for j in range(12)]
    got = _run(gk, later, 40, None)
    after = control(gk, "stats")
    matched += _check(_run(stock, later, 40, None), got)
    assert after["hits"]["implicit_hits"] - st["hits"]["implicit_hits"] == 12
    cascade = (after["dispatch"]["groups"].get("cascade", 0)
               - st["dispatch"]["groups"].get("cascade", 0))
    print(f"implicit HOT on the GPU: tokens matching stock before the first difference "
          f"{matched}, cascade groups {cascade}")
    assert cascade >= 30
    # the entry holds the head's K/V: what a fill of the same tokens (another team's
    # registration) writes; bf16 sums of 64 values per slot and layer
    fill = register(gk, "other", head[:entry["length"]], prefix_id="other-ctx")
    assert fill["state"] == "ready" and fill["hot_start"] != entry["hot_start"]
    (want,), (have,) = ({tuple(map(tuple, r)) for r in gk.collective_rpc(
        "granikv_slot_kv", args=(e["hot_start"], entry["length"]))} for e in (fill, entry))
    assert len(want) == len(have) and any(v != 0 for v in want[0])
    for layer_want, layer_have in zip(want, have, strict=True):
        assert layer_have == pytest.approx(layer_want, rel=0.05, abs=0.05)
