"""Prompts and comparisons shared by the engine tests."""

from __future__ import annotations

from typing import Any

from vllm import SamplingParams
from vllm.inputs import TokensPrompt

# Greedy tokens must match; the chosen tokens' logprobs may differ by float32 rounding
# between vLLM's CPU attention kernel and the GraniKV reference path.
LOGPROB_TOL = 2e-3


def tokens(seed: int, n: int) -> list[int]:
    """Deterministic token ids inside the tiny vocabulary (3..1023)."""
    return [(seed * 7919 + i * 104729 + (i * i) % 97) % 1021 + 3 for i in range(n)]


def params(max_tokens: int, extra: dict[str, Any] | None = None) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, min_tokens=max_tokens, ignore_eos=True,
                          temperature=0.0, logprobs=0, detokenize=False, extra_args=extra)


def generate(llm: Any, prompts: list[list[int]], sps: list[SamplingParams] | SamplingParams
             ) -> list[tuple[list[int], list[float]]]:
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sps,
                        use_tqdm=False)
    res = []
    for o in outs:
        c = o.outputs[0]
        lps = [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs or [])]
        res.append((list(c.token_ids), lps))
    return res


def assert_same(stock: list[tuple[list[int], list[float]]],
                gk: list[tuple[list[int], list[float]]]) -> float:
    """Same greedy tokens everywhere; returns the largest logprob difference."""
    worst = 0.0
    for i, ((ts, ls), (tg, lg)) in enumerate(zip(stock, gk, strict=True)):
        assert ts == tg, f"request {i}: stock {ts} != granikv {tg}"
        for a, b in zip(ls, lg):
            worst = max(worst, abs(a - b))
    assert worst < LOGPROB_TOL, worst
    return worst
