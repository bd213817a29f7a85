"""Kernel benchmark, per layer: GraniKV backends vs FA3 paged decode at block 16.

Decode step of B agents on one team prefix of Lp tokens, each with S own tokens:
- stock: vLLM's FA3 paged kernel at page 16, the prefix blocks shared through the block
  table (as after prefix caching), so it reads the prefix once per row;
- granikv-cascade: dense prefix pass + page-1 suffix + merge (our CudaOps);
- granikv-paged: the unified page-1 kernel over HOT + COLD slots.
Bytes floor: each K/V slot read once (Lp + B*S slots), q and out once; FLOP floor:
4*B*H*(Lp+S)*D. Run on a GPU: ``python -m granikv_engine.bench.kernels --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from granikv_engine.bench.env import environment
from granikv_engine.vllm_plugin.worker.kernels import fa3
from granikv_engine.vllm_plugin.worker.kernels.calibrate import (
    synthetic_step,
    time_graph_us,
    time_us,
)

SHAPES = {"llama-3.1-8b": (32, 8, 128), "qwen2.5-14b": (40, 8, 128)}
BATCH = (1, 8, 64, 256, 512)
PREFIX = (1024, 4096, 16384)
SUFFIX = (64, 640, 2048)
BW, FLOPS = 4.3e12, 7.9e14  # H200 ceilings measured with large copies and bf16 GEMMs


def stock_block16(b: int, lp: int, s: int, h: int, hkv: int, d: int,
                  dtype: torch.dtype) -> tuple[Any, ...]:
    """Pages of 16; rows share the prefix's blocks, then own blocks; q = one token each."""
    pb = -(-lp // 16)
    ob = -(-(lp + s) // 16) - lp // 16
    nblocks = pb + b * ob + 1
    k = torch.randn(nblocks, 16, hkv, d, dtype=dtype, device="cuda")
    v = torch.randn_like(k)
    table = torch.empty(b, lp // 16 + ob, dtype=torch.int32)
    for i in range(b):
        table[i, : lp // 16] = torch.arange(1, 1 + lp // 16)
        table[i, lp // 16:] = torch.arange(1 + pb + i * ob, 1 + pb + (i + 1) * ob)
    seq = torch.full((b,), lp + s, dtype=torch.int32, device="cuda")
    cu = torch.arange(b + 1, dtype=torch.int32, device="cuda")
    return k, v, table.cuda(), seq, cu


def point(model: str, b: int, lp: int, s: int, dtype: torch.dtype) -> dict[str, Any]:
    from granikv_engine.vllm_plugin.worker.kernels.calibrate import measure
    from granikv_engine.vllm_plugin.worker.kernels.cuda_ops import CudaOps

    h, hkv, d = SHAPES[model]
    res: dict[str, Any] = {"model": model, "B": b, "Lp": lp, "S": s}
    res.update(_stock(b, lp, s, h, hkv, d, dtype))
    plan, slots = synthetic_step(b, lp, 1, s, torch.device("cuda"))
    t = measure(CudaOps(), plan, slots, b, h, hkv, d, dtype, torch.device("cuda"))
    for be in ("cascade", "paged"):
        res[f"granikv_{be}_us"], res[f"granikv_{be}_eager_us"] = t[be], t[be + "_eager"]
    kv_slot = hkv * d * 2 * torch.tensor([], dtype=dtype).element_size()
    q_bytes = b * h * d * torch.tensor([], dtype=dtype).element_size()
    res["bytes_floor"] = (lp + b * s) * kv_slot + 2 * q_bytes
    res["bytes_stock"] = b * (lp + s) * kv_slot
    res["flops"] = 4 * b * h * (lp + s) * d
    res["floor_us"] = max(res["bytes_floor"] / BW, res["flops"] / FLOPS) * 1e6
    best = min(res["granikv_cascade_us"], res["granikv_paged_us"])
    res["speedup"] = res["stock_us"] / best
    res["granikv_bw_tbs"] = res["bytes_floor"] / (best * 1e-6) / 1e12
    res["stock_bw_tbs"] = res["bytes_stock"] / (res["stock_us"] * 1e-6) / 1e12
    return res


def _stock(b: int, lp: int, s: int, h: int, hkv: int, d: int,
           dtype: torch.dtype) -> dict[str, float]:
    """FA3 paged decode at block 16, GPU time (graph replays) and eager time."""
    q = torch.randn(b, h, d, dtype=dtype, device="cuda")
    out = torch.empty_like(q)
    k, v, table, seq, cu = stock_block16(b, lp, s, h, hkv, d, dtype)

    def stock() -> None:
        fa3.paged(q, k, v, cu, seq, table, 1, lp + s, d ** -0.5, out, want_lse=False)

    return {"stock_us": time_graph_us(stock), "stock_eager_us": time_us(stock)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", default=",".join(SHAPES))
    ap.add_argument("--budget-s", type=float, default=240)
    args = ap.parse_args()
    from tqdm import tqdm

    t0 = time.time()
    rows = []
    grid = [(m, b, lp, s) for m in args.models.split(",") for lp in PREFIX for s in SUFFIX
            for b in BATCH]
    for m, b, lp, s in tqdm(grid, desc="kernels"):
        if time.time() - t0 > args.budget_s:
            break
        rows.append(point(m, b, lp, s, torch.bfloat16))
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"bench": "kernels", "env": environment(), "points": rows,
           "seconds": round(time.time() - t0, 1)}
    (args.out / "kernels.json").write_text(json.dumps(doc, indent=1))
    for r in rows:
        print(f"{r['model']:>13} B={r['B']:<4} Lp={r['Lp']:<6} S={r['S']:<5} stock "
              f"{r['stock_us']:9.1f}us cascade {r['granikv_cascade_us']:8.1f}us paged "
              f"{r['granikv_paged_us']:9.1f}us floor {r['floor_us']:8.1f}us x{r['speedup']:.2f}")


if __name__ == "__main__":
    main()
