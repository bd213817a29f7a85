"""The cascade layer of a decode step, launch by launch: where its fixed time goes.

``bench/context_pass.py`` splits the layer's time, from ``bench/kernels.py``'s points,
into the context pass's streaming work and a fixed part (89 us at B = 256 on an H200).
This benchmark times the three launches of ``CudaOps.forward``'s cascade apart, on the
same synthetic step (B rows on one team context of Lp tokens, S own tokens a row; each
launch captured in a CUDA graph, median of event-timed replays):

- ``suffix``: FA3, paged at page size 1, each row over its own COLD tokens;
- ``context``: FA3, dense and non-causal, all rows over the team's context, with the
  split count the plan chose (``num_splits``; 0: FA3's own heuristic) and then forced to
  each of ``--splits`` (FA3 without a precomputed schedule);
- ``merge``: vLLM's merge of the two partial outputs by their log-sum-exps;

and the whole ``forward`` for comparison. The context pass's FLOP rate is
4 * B * Hq * Lp * D over its time. Run on a GPU:

    python -m granikv_engine.bench.cascade_split --out DIR [--model llama-3.1-8b]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from granikv_engine.bench.context_pass import PEAK_FLOPS
from granikv_engine.bench.env import environment
from granikv_engine.bench.kernels import SHAPES
from granikv_engine.dispatcher import Backend
from granikv_engine.vllm_plugin.worker.kernels.calibrate import synthetic_step, time_graph_us

POINTS = ((256, 16384, 64), (256, 16384, 640), (256, 1024, 64), (512, 16384, 64),
          (64, 16384, 64))
SPLITS = (1, 2, 4, 8, 16)


def split_point(model: str, b: int, lp: int, s: int, splits: tuple[int, ...] = SPLITS,
                dtype: torch.dtype = torch.bfloat16) -> dict[str, Any]:
    from granikv_engine.vllm_plugin.worker.kernels.cuda_ops import CudaOps

    h, hkv, d = SHAPES[model]
    dev = torch.device("cuda")
    ops = CudaOps()
    plan, slots = synthetic_step(b, lp, 1, s, dev)
    kp = plan.lower([Backend.CASCADE])
    dd = kp.cascade_dev
    if dd is None or not dd.identity:
        raise RuntimeError("the synthetic step did not lower to one cascade group in order")
    k = torch.randn(slots, hkv, d, dtype=dtype, device=dev)
    v = torch.randn_like(k)
    x = torch.randn(b, h, d, dtype=dtype, device=dev)
    out = torch.empty_like(x)
    scale = d ** -0.5
    kpg, vpg = k.unsqueeze(1), v.unsqueeze(1)

    def suffix() -> tuple[torch.Tensor, torch.Tensor]:
        return ops._fa3(x, kpg, vpg, out=out, cu_q=kp.query_start_loc, cu_k=None,
                        seqused_k=kp.kv_seq_lens, max_q=kp.max_q, max_k=kp.max_kv,
                        page_table=kp.block_table, scale=scale, causal=True,
                        scheduler_metadata=kp.scheduler_metadata, num_splits=kp.num_splits)

    def context(num_splits: int = dd.num_splits,
                schedule: torch.Tensor | None = dd.scheduler_metadata
                ) -> tuple[torch.Tensor, torch.Tensor]:
        return ops._fa3(x, k, v, out=None, cu_q=dd.cu_q, cu_k=dd.cu_k,
                        seqused_k=dd.seqused_k, max_q=dd.max_q, max_k=dd.max_k,
                        page_table=None, scale=scale, causal=False,
                        scheduler_metadata=schedule, num_splits=num_splits)

    _, lse = suffix()
    o_hot, lse_hot = context()
    suffix_out = out.clone()
    merged = torch.empty_like(out)

    def merge() -> None:  # into a copy: the suffix pass's output stays as it was
        merged.copy_(suffix_out)
        ops._merge(merged, o_hot, lse_hot, merged, lse)

    def copy() -> None:
        merged.copy_(suffix_out)

    def whole() -> None:
        ops.forward(x, k, v, kp, scale, out)

    merge()
    whole()  # the pieces, run apart, give forward's output
    err = float((merged.double() - out.double()).norm() / out.double().norm())
    res: dict[str, Any] = {
        "model": model, "B": b, "Lp": lp, "S": s, "plan_num_splits": dd.num_splits,
        "parts_vs_forward_rel_err": err,
        "suffix_us": time_graph_us(lambda: _none(suffix())),
        "context_us": time_graph_us(lambda: _none(context())),
        "merge_us": time_graph_us(merge) - time_graph_us(copy),
        "whole_us": time_graph_us(whole),
    }
    for n in splits:
        def forced(n: int = n) -> None:
            _none(context(n, None))

        res[f"context_splits_{n}_us"] = time_graph_us(forced)
    flops = 4 * b * h * lp * d
    res["context_flop"] = flops
    res["context_tflops"] = flops / (res["context_us"] * 1e-6) / 1e12
    res["best_context_tflops"] = flops / (min(
        [res["context_us"], *(res[f"context_splits_{n}_us"] for n in splits)]) * 1e-6) / 1e12
    res["context_of_peak"] = res["context_tflops"] * 1e12 / PEAK_FLOPS
    res["parts_us"] = res["suffix_us"] + res["context_us"] + res["merge_us"]
    return res


def _none(_: object) -> None:
    """What ``time_graph_us`` wants: a call that returns nothing."""


def table(rows: list[dict[str, Any]], splits: tuple[int, ...]) -> str:
    head = ("| B | Lp | S | whole us | suffix us | context us (plan's splits) | merge us | "
            "context TFLOP/s (of peak) | " + " | ".join(f"context at {n} splits us"
                                                        for n in splits) + " |")
    lines = [head, "|" + "---|" * (8 + len(splits))]
    for r in rows:
        lines.append(
            f"| {r['B']} | {r['Lp']:,} | {r['S']} | {r['whole_us']:.1f} | {r['suffix_us']:.1f} | "
            f"{r['context_us']:.1f} ({r['plan_num_splits']}) | {r['merge_us']:.1f} | "
            f"{r['context_tflops']:.0f} ({r['context_of_peak']:.0%}) | "
            + " | ".join(f"{r[f'context_splits_{n}_us']:.1f}" for n in splits) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="llama-3.1-8b", choices=sorted(SHAPES))
    args = ap.parse_args()
    rows = []
    for b, lp, s in POINTS:
        rows.append(split_point(args.model, b, lp, s))
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    (args.out / "cascade-split.json").write_text(json.dumps(
        {"bench": "cascade_split", "env": env, "points": rows}, indent=1))
    md = (f"# The cascade layer, launch by launch ({args.model})\n\n{env.get('gpu')}; "
          f"{env.get('date')}; `{env.get('command')}`\n\n{table(rows, SPLITS)}\n")
    (args.out / "cascade-split.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
