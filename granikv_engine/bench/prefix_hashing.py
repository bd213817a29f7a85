"""CPU cost of prefix caching per prompt token, on vLLM's own block pool and KV-cache
manager (no model): stock vLLM at block size 16 beside GraniKV at block size 1, hashing
per token (``hash_chunk`` 1, vLLM's block-size-1 behaviour) and in chunks of 16 and 64.

Per request, as the engine core does on admission: the request is created (its block
hashes computed), looked up in the prefix cache (``get_computed_blocks``), given its
blocks (``allocate_slots``: hits taken, new blocks allocated, full ones cached), and at
the end freed. Workloads: ``shared``, 32 prompts of one 16,384-token document and 64
tokens of their own (the first misses, the rest hit the document); ``distinct``, 32
prompts of 2,048 tokens that share nothing. Each engine's block pool is built, then the garbage
collector's heap frozen, as vLLM's engine core does after start-up. Times are medians
over ``--reps`` runs, divided by the prompt tokens. A benchmark, not a test.

    python -m granikv_engine.bench.prefix_hashing --out docs/benchmarks --name NAME
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# (name, block size, hash chunk, the pool's one-pass loops)
ENGINES = (("stock, block 16", 16, 1, False), ("GraniKV, hash per token", 1, 1, False),
           ("GraniKV, hash per 16, vLLM's pool loops", 1, 16, False),
           ("GraniKV, hash per 16", 1, 16, True), ("GraniKV, hash per 64", 1, 64, True))
PHASES = ("hash", "lookup", "alloc", "free")


def _manager(block: int, chunk: int, num_blocks: int, one_pass: bool = True) -> Any:
    import torch
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    from granikv_engine.hot_pool import HotPool
    from granikv_engine.prefix_registry import PrefixRegistry
    from granikv_engine.vllm_plugin.core import kv_manager as kvm

    spec = FullAttentionSpec(block_size=block, num_kv_heads=1, head_size=8,
                             dtype=torch.float32)
    cfg = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    kv = KVCacheManager(cfg, max_model_len=1 << 16, scheduler_block_size=block,
                        hash_block_size=block, enable_caching=True)
    if block == 1:
        arena = kvm.reserve_arena(kv.block_pool, 16)
        pool = kv.block_pool
        kv = kvm.GraniKVCacheManager.adopt(
            kv, PrefixRegistry(HotPool(arena.start, arena.length)), arena, True, chunk)
        if not one_pass:  # the pool's own per-block loops (no HOT hit here to skip)
            for name in ("get_new_blocks", "free_blocks", "touch"):
                vars(pool).pop(name, None)
    return kv


def _prompts(workload: str, rng: random.Random) -> list[list[int]]:
    if workload == "shared":
        doc = [rng.randrange(1, 32000) for _ in range(16384)]
        return [doc + [rng.randrange(1, 32000) for _ in range(64)] for _ in range(32)]
    return [[rng.randrange(1, 32000) for _ in range(2048)] for _ in range(32)]


def run_once(workload: str, block: int, chunk: int, seed: int,
             one_pass: bool = True) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.utils.gc_utils import freeze_gc_heap
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256)
    prompts = _prompts(workload, random.Random(seed))
    tokens = sum(len(p) for p in prompts)
    kv = _manager(block, chunk, tokens // block + 4096, one_pass)
    freeze_gc_heap()  # as the engine core does once it is built: the pool is static
    hasher = get_request_block_hasher(max(block, chunk), sha256)
    sp = SamplingParams(max_tokens=16)
    t = dict.fromkeys(PHASES, 0.0)
    reqs, hit = [], 0
    clock = time.perf_counter
    for i, p in enumerate(prompts):
        t0 = clock()
        r = Request(str(i), p, sp, None, block_hasher=hasher)
        t1 = clock()
        blocks, n, _ = kv.get_computed_blocks(r)
        t2 = clock()
        if kv.allocate_slots(r, len(p) - n, n, blocks) is None:
            raise RuntimeError("the pool is too small for the workload")
        t3 = clock()
        r.num_computed_tokens = len(p)
        t["hash"] += t1 - t0
        t["lookup"] += t2 - t1
        t["alloc"] += t3 - t2
        reqs.append(r)
        hit += n
    t0 = clock()
    for r in reqs:
        kv.free(r)
    t["free"] = clock() - t0
    gc.unfreeze()
    return {"us_per_token": {k: v / tokens * 1e6 for k, v in t.items()},
            "tokens": tokens, "hit_tokens": hit}


def measure(reps: int) -> list[dict[str, Any]]:
    rows = []
    for workload in ("shared", "distinct"):
        # the engines take turns, seed by seed, so that a drift of the machine's speed
        # reaches each alike; one unmeasured run first
        runs_of: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in ENGINES}
        for seed in range(-1, reps):
            for name, block, chunk, one_pass in ENGINES:
                got = run_once(workload, block, chunk, max(seed, 0), one_pass)
                if seed >= 0:
                    runs_of[name].append(got)
        for name, block, chunk, _ in ENGINES:
            runs = runs_of[name]
            med = {k: statistics.median(r["us_per_token"][k] for r in runs) for k in PHASES}
            rows.append({"workload": workload, "engine": name, "block_size": block,
                         "hash_chunk": max(block, chunk), "us_per_token": med,
                         "admission_us_per_token": med["hash"] + med["lookup"] + med["alloc"],
                         "tokens": runs[0]["tokens"], "hit_tokens": runs[0]["hit_tokens"]})
    for r in rows:
        base = next(s for s in rows if s["workload"] == r["workload"] and s["block_size"] == 16)
        r["vs_stock"] = r["admission_us_per_token"] / base["admission_us_per_token"]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| workload | engine | hit tokens | hash | lookup | alloc | admission "
             "(hash + lookup + alloc) | vs stock | free |", "|---" * 9 + "|"]
    for r in rows:
        u = r["us_per_token"]
        lines.append(f"| {r['workload']} | {r['engine']} | {r['hit_tokens']:,} / "
                     f"{r['tokens']:,} | {u['hash']:.3f} | {u['lookup']:.3f} | "
                     f"{u['alloc']:.3f} | **{r['admission_us_per_token']:.3f}** | "
                     f"{r['vs_stock']:.2f}x | {u['free']:.3f} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, workload in zip(axes, ("shared", "distinct")):
        rs = [r for r in rows if r["workload"] == workload]
        bottom = [0.0] * len(rs)
        for phase in PHASES:
            vals = [r["us_per_token"][phase] for r in rs]
            ax.bar(range(len(rs)), vals, bottom=bottom, label=phase)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(range(len(rs)), [r["engine"].replace(", ", "\n") for r in rs],
                      fontsize=8)
        # a linear scale, cut above the chunked engines: bars past it say their total
        top = 1.25 * max(b for b, r in zip(bottom, rs) if r["hash_chunk"] > 1)
        ax.set_ylim(0, top)
        for i, b in enumerate(bottom):
            if b > top:
                ax.text(i, top * 0.97, f"{b:.2f}\n(cut)", ha="center", va="top", fontsize=8)
        ax.set_title(f"{workload}: CPU us per prompt token")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    ap.add_argument("--name", default=time.strftime("%Y-%m-%d") + "-cpu-prefix-hashing")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    from granikv_engine.bench.env import environment

    env = environment()
    env["command"] = "python -m granikv_engine.bench.prefix_hashing " + " ".join(sys.argv[1:])
    env["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip()
    rows = measure(args.reps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps({"env": env, "rows": rows},
                                                           indent=1))
    plot(rows, args.out / f"{args.name}.png")
    md = (f"# Prefix caching's CPU cost per prompt token\n\n{env['date']}, commit "
          f"`{env['commit']}`, Python {env['python']}, vLLM {env['vllm']} (CPU build), "
          f"host `{env['host']}`. Command: `{env['command']}`.\n\n"
          + __doc__.split("\n\n")[1].replace("\n", " ") + "\n\n"
          + __doc__.split("\n\n")[2].replace("\n", " ") + "\n\n"
          + "Microseconds per prompt token (median of "
          f"{args.reps} runs; *vLLM's pool loops*: the block pool's own "
          "`get_new_blocks`, `free_blocks` and `touch` instead of GraniKV's one-pass "
          f"loops):\n\n{table(rows)}\n\n![plot]({args.name}.png)\n")
    (args.out / f"{args.name}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
