"""No kernel is compiled while a GraniKV engine serves (tiny dummy-weight Llama in bf16):
vLLM's JIT monitor is set to raise, so a Triton compilation after the warm-up fails the
request that caused it. The steps cover what a GraniKV step can be: a registration's
fill, prefills and decodes of one team and of several at once (the cascade with one and
with several HOT groups, so the merge by index), plain requests (the paged kernel), an
implicit promotion (block copies), and decode batches of 1 to 40 rows (FULL graphs and
piecewise steps). The engine is test_implicit_gpu.py's.

vLLM's own warm-up compiles its slot-mapping kernel at block sizes 3 and 16 only; on the
GPU runs of 2026-12-06 every GraniKV engine compiled it at its first step
(``warm_kernels.py`` now runs it at block size 1 when the KV cache is initialised)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.gpu.test_engine_graphs import _run, _tokens
from tests.gpu.test_implicit_gpu import _engine

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_serving_every_kind_of_step_compiles_nothing(tmp_path: Path) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from granikv_engine.vllm_plugin.client import bind_args, control, register

    llm = _engine(tmp_path, granikv=True, jit_monitor_mode="error",
                  jit_monitor_verbose=True)
    try:
        ctx = {t: _tokens(40 + i, 300 + 200 * i) for i, t in enumerate(("red", "blue"))}
        for team, toks in ctx.items():
            assert register(llm, team, toks, prefix_id=f"{team}-ctx")["state"] == "ready"
        one = [ctx["red"] + _tokens(100 + j, 8 + j) for j in range(40)]  # 40 rows at once
        _run(llm, one, 12, bind_args("red", "red-ctx"))
        _run(llm, [ctx["blue"] + _tokens(150, 11)], 8, bind_args("blue", "blue-ctx"))  # 1 row
        mixed = [(ctx[t] + _tokens(200 + j, 5 + 2 * j), t) for j in range(12) for t in ctx]
        sps = [SamplingParams(max_tokens=8, min_tokens=8, ignore_eos=True, temperature=0.0,
                              detokenize=False, extra_args=bind_args(t, f"{t}-ctx"))
               for _, t in mixed]  # both teams in one batch: several HOT groups a step
        got = llm.generate([TokensPrompt(prompt_token_ids=p) for p, _ in mixed], sps,
                           use_tqdm=False)
        assert all(len(o.outputs[0].token_ids) == 8 for o in got)
        plain = [_tokens(300 + j, 20 + 7 * j) for j in range(5)]  # no HOT prefix
        _run(llm, plain, 8, None)
        head = _tokens(7, 400)  # nothing registered: promoted after two COLD hits
        _run(llm, [head], 1, None)
        _run(llm, [head + _tokens(500 + j, 9 + j) for j in range(10)], 10, None)
        _run(llm, [head + _tokens(600 + j, 9 + j) for j in range(10)], 10, None)
        st = control(llm, "stats")
        assert st["implicit"]["promotions"] >= 1, st["implicit"]
        d = st["dispatch"]
        assert d["groups"].get("cascade", 0) > 0 and d["groups"].get("paged", 0) > 0, d
        assert d["plain_rows"] > 0, d
    finally:
        llm.llm_engine.engine_core.shutdown()
