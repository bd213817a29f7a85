"""The ceiling's priced part: the prefix work no engine can avoid, in seconds.

The ceiling of a workload = its output tokens / (the wall time of the same stock engine
with every team context cut to 16 tokens + this priced work). The priced work, per
layer, at the kernel benchmark's rates (roofline: compute or HBM, whichever is slower):
- each request's fresh prompt tokens attend to its team's context once (prefill);
- each decode step, each team group attends its context in one dense pass: its rows'
  one query each over the context's K/V, read once.
Decode steps follow the ideal schedule: ``slots`` requests decode together from the
first step, in submission order, and a finished one's slot goes to the next. That is
the fewest context passes any schedule needs, so the ceiling errs high, never low.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

# The dense context pass's FLOP rate on an H200 (bf16): the kernel benchmark's GraniKV
# cascade at Lp=16384, S=64, from B=256 (194.9 us a layer) to B=512 (323.6 us), Llama
# shapes: the 256 extra rows' 4*256*32*16448*128 FLOP in 128.7 us (kernels.json of
# 2026-11-29). HBM: the measured copy bandwidth (bench/kernels.py's BW).
CONTEXT_FLOPS = 4 * 256 * 32 * 16448 * 128 / 128.7e-6
HBM_BYTES_S = 4.3e12


@dataclass(frozen=True)
class Shape:
    """A model's attention shape."""
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2  # bf16 K/V


@dataclass(frozen=True)
class Rates:
    context_flops: float = CONTEXT_FLOPS  # FLOP/s
    hbm_bytes_s: float = HBM_BYTES_S  # bytes/s


class Work(NamedTuple):
    prefill_s: float  # fresh tokens' attention to their contexts, all layers
    decode_s: float  # one context pass per team group per decode step, all layers
    passes: int  # team-group context passes over all decode steps

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s


def context_pass_s(shape: Shape, rates: Rates, queries: int, context: int) -> float:
    """One layer: ``queries`` query tokens attend (non-causally) a context of
    ``context`` tokens, its K/V read from HBM once."""
    flops = 4 * queries * shape.heads * context * shape.head_dim
    kv_bytes = context * 2 * shape.kv_heads * shape.head_dim * shape.dtype_bytes
    return max(flops / rates.context_flops, kv_bytes / rates.hbm_bytes_s)


def decode_groups(steps: Sequence[tuple[int, int]], slots: int) -> Counter[tuple[int, int]]:
    """(team, decode steps) per request, in submission order -> how many decode steps
    had a group of (team, rows)."""
    waiting = list(reversed(steps))
    running: list[list[int]] = []  # [team, steps left]
    seen: Counter[tuple[int, int]] = Counter()
    while waiting or running:
        while waiting and len(running) < slots:
            team, n = waiting.pop()
            if n > 0:
                running.append([team, n])
        if not running:
            continue
        rows = Counter(team for team, _ in running)
        seen.update((team, g) for team, g in rows.items())
        for r in running:
            r[1] -= 1
        running = [r for r in running if r[1] > 0]
    return seen


def prefix_work(shape: Shape, rates: Rates, contexts: Sequence[int],
                reqs: Sequence[tuple[int, int, int]], slots: int) -> Work:
    """``reqs``: (team, fresh tokens, generated tokens) in submission order; the first
    generated token comes from the prefill, the others from one decode step each."""
    prefill = sum(context_pass_s(shape, rates, fresh, contexts[t]) for t, fresh, _ in reqs)
    groups = decode_groups([(t, out - 1) for t, _, out in reqs], slots)
    decode = sum(n * context_pass_s(shape, rates, g, contexts[t]) for (t, g), n in groups.items())
    return Work(shape.layers * prefill, shape.layers * decode, sum(groups.values()))


def ceiling(wall_s: float, output_tokens: int, work: Work) -> dict[str, Any]:
    """The ceiling of a run without shared contexts (``wall_s``) plus the priced work."""
    total = wall_s + work.total_s
    return {"tok_s": output_tokens / total, "wall_s": total, "no_context_wall_s": wall_s,
            "prefill_s": work.prefill_s, "decode_s": work.decode_s, "passes": work.passes}


def shape_of(hf_config: Any, dtype_bytes: int = 2) -> Shape:
    """The attention shape of a Hugging Face config."""
    heads = hf_config.num_attention_heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    return Shape(hf_config.num_hidden_layers, heads,
                 getattr(hf_config, "num_key_value_heads", heads), head_dim, dtype_bytes)
