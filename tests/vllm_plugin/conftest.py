"""Session-scoped engines on the tiny dummy-weight Llama (vLLM 0.26 CPU build).

Both engines get the same re-drawn weights (``reinit_weights``), so the stock engine and
the GraniKV engine compute the same function and their greedy outputs must agree.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

MODEL = str(Path(__file__).resolve().parents[2] / "deploy" / "models" / "tiny-llama")
HOT_SLOTS = 2048
COMMON: dict[str, Any] = dict(
    model=MODEL, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
    max_model_len=3072, dtype="float32", seed=0, max_num_seqs=32,
    max_num_batched_tokens=256,  # long prompts are chunked and mix with decodes
    enable_prefix_caching=True)


def _calibration(tmp: Path) -> str:
    """A table under which groups of >= 3 rows run the cascade and smaller ones the
    unified paged kernel, so one engine exercises both backends."""
    pts = [{"num_rows": r, "hot_len": lp, "q_per_row": q,
            "cascade_us": 10.0 if r >= 3 else 100.0, "paged_us": 50.0}
           for r in (1, 2, 3, 8, 32) for lp in (64, 256, 1024) for q in (1, 64)]
    path = tmp / "calibration.json"
    path.write_text(json.dumps({"meta": {"note": "test table"}, "points": pts}))
    return str(path)


def _start(**kw: Any) -> Any:
    from vllm import LLM

    from granikv_engine.vllm_plugin.worker.worker_ext import EXTENSION

    llm = LLM(**{**COMMON, "worker_extension_cls": EXTENSION, **kw})
    llm.collective_rpc("granikv_reinit_weights")
    return llm


@pytest.fixture(scope="session")
def stock_llm() -> Iterator[Any]:
    llm = _start(block_size=16,
                 scheduler_cls="granikv_engine.bench.probe_scheduler.ProbeScheduler")
    yield llm
    llm.llm_engine.engine_core.shutdown()


@pytest.fixture(scope="session")
def gk_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    cal = _calibration(tmp_path_factory.mktemp("granikv"))
    llm = _start(additional_config={"granikv": {
        "enabled": True, "hot_slots": HOT_SLOTS, "calibration_path": cal, "min_hot_len": 16}})
    yield llm
    llm.llm_engine.engine_core.shutdown()
