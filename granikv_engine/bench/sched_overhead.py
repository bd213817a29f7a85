"""Engine-core time per step on this CPU: 256 agents on one 16K-token prefix, GraniKV
(block 1, HOT arena) vs stock vLLM at block 16: the engine core's cost of block size 1.

The tiny dummy-weight Llama keeps the forward pass cheap, so the scheduler's own work
shows: ``schedule()`` and ``update_from_output()`` per step, timed inside the engine core
by the GraniKV scheduler and by the stock probe scheduler. Agents are short (64 own
tokens, 16 generated) to keep the CPU forward pass tractable.

``python -m granikv_engine.bench.sched_overhead --out docs/benchmarks --name DATE-cpu-scheduler``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from granikv_engine.bench.workloads import Workload

TINY = str(Path(__file__).resolve().parents[2] / "deploy" / "models" / "tiny-llama")
WORKLOAD = Workload("CPU-W1", "tiny-llama", (16384,), 256, 0.0, 0.0, suffix=64, output=16)


def run_engine(engine: str) -> dict[str, Any]:
    from granikv_engine.bench import e2e, timed

    max_len = WORKLOAD.max_len + 8
    t0 = time.perf_counter()
    llm = e2e.make_llm(TINY, engine, max_len, 20_000, True, {
        "dtype": "float32", "enforce_eager": True, "max_num_seqs": 256,
        "hf_overrides": {"max_position_embeddings": max_len}})
    start = time.perf_counter() - t0
    llm.collective_rpc("granikv_reinit_weights")
    res = timed.run_workload(llm, engine, WORKLOAD, 1024, 1.0)
    sch = res["scheduler"]
    steps = max(sch["steps"], 1)
    return {"engine": engine, "engine_start_s": start, "steps": sch["steps"],
            "schedule_ms_per_step": 1e3 * sch["schedule_s"] / steps,
            "update_ms_per_step": 1e3 * sch["update_s"] / steps,
            "wall_s": res["wall_s"], "warm_s": res["warm_s"], "hits": res.get("hits"),
            "seeded_hash_tokens": res["stats_after"].get("seeded_hash_tokens")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    ap.add_argument("--engine", default="")
    ap.add_argument("--engines", default="stock,granikv",
                    help="engines to compare, one process each (e.g. granikv-stockalloc)")
    ap.add_argument("--name", default="cpu-scheduler", help="output file name")
    args = ap.parse_args()
    if args.engine:  # child: one engine, JSON on stdout
        print("RESULT " + json.dumps(run_engine(args.engine)), flush=True)
        return
    from granikv_engine.bench.env import environment

    rows = []
    for engine in args.engines.split(","):  # one process each, one after the other
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get(
            "VLLM_CPU_KVCACHE_SPACE", "4")}
        out = subprocess.run([sys.executable, "-m", "granikv_engine.bench.sched_overhead",
                              "--engine", engine], capture_output=True, text=True, env=env,
                             check=True).stdout
        rows.append(json.loads(next(x for x in out.splitlines()
                                    if x.startswith("RESULT "))[7:]))
    doc: dict[str, Any] = {"bench": "cpu-scheduler", "workload": WORKLOAD.__dict__,
                           "env": environment(), "results": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=1))
    lines = ["| engine | steps | schedule() ms/step | update_from_output() ms/step | "
             "engine-core ms/step | wall s | hits | prefix tokens not re-hashed |",
             "|" + "---|" * 8]
    for r in rows:
        tot = r["schedule_ms_per_step"] + r["update_ms_per_step"]
        lines.append(f"| {r['engine']} | {r['steps']} | {r['schedule_ms_per_step']:.2f} | "
                     f"{r['update_ms_per_step']:.2f} | {tot:.2f} | {r['wall_s']:.1f} | "
                     f"{r['hits'] if r['hits'] is not None else '-'} | "
                     f"{r['seeded_hash_tokens'] or '-'} |")
    (args.out / f"{args.name}.md").write_text(
        "# Engine-core scheduling time per step, on a CPU\n\n"
        f"{doc['env']['date']}, Python {doc['env']['python']}, vLLM {doc['env']['vllm']} "
        f"(CPU build). Command: `python -m granikv_engine.bench.sched_overhead "
        f"--engines {args.engines} --name {args.name}`.\n\n"
        "256 agents on one 16,384-token prefix, 64 own tokens and 16 generated tokens each,"
        " tiny dummy-weight Llama; stock vLLM at block 16 vs GraniKV at block 1 with the"
        " prefix in the HOT arena. A benchmark, not a test.\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
