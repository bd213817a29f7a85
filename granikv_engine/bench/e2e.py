"""End-to-end benchmark: one engine configuration, several workloads, output tokens/s.

One process per engine (``--engine``); ``bench/run.py`` runs stock and GraniKV side by
side on one machine and writes the report. Engines:
- ``stock``: vLLM 0.26 as shipped (block 16, prefix caching), with a timing probe;
- ``stock-cascade``: the same with vLLM's own batch-global cascade attention enabled (on
  vLLM's V1 model runner: the default V2 runner has no cascade);
- ``granikv-paged``: GraniKV storage (HOT arena + page-1 COLD), unified paged backend only;
- ``granikv-piecewise``: full GraniKV without FULL CUDA graphs (attention always eager);
- ``granikv-stockalloc``: full GraniKV with vLLM's generic ``allocate_slots`` for running
  requests (no ``fast_alloc``);
- ``granikv``: full GraniKV with the calibrated dispatcher;
- ``granikv-implicit``: the same with implicit HOT on (``implicit_hot``, its budget the
  whole arena: ``implicit_fraction`` 1.0).
A workload named ``NAME/unreg`` (``--workloads W1/unreg,W1``) runs on GraniKV as a user
who never registers sends it: every team context only at the start of each prompt,
nothing registered and no request arguments (loaded into the prefix cache as stock's
are); its result carries ``"registered": false`` and the engine name ``ENGINE-unreg``.
With ``--ceiling``, the stock engine also runs those workloads with every team context
cut to 16 tokens (results as engine ``stock-noctx``); that run's wall time plus the
priced prefix work (bench/ceiling.py) is the workload's ceiling, written into the result.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from granikv_engine.bench.env import environment
from granikv_engine.bench.timed import NO_CONTEXT, run_workload, run_workloads
from granikv_engine.bench.workloads import MAX_NUM_SEQS, WORKLOADS
from granikv_engine.vllm_plugin import installed

MODELS = Path(__file__).parent / "models"
UNREG = "/unreg"  # a workload name's suffix: run with nothing registered
EXT = "granikv_engine.vllm_plugin.worker.worker_ext.GraniKVWorkerExtension"


def engine_kwargs(engine: str, max_len: int, hot_slots: int, async_sched: bool,
                  tiny: bool, calibration: str = "") -> dict[str, Any]:
    probe = "AsyncProbeScheduler" if async_sched else "ProbeScheduler"
    kw: dict[str, Any] = {"worker_extension_cls": EXT}
    if engine.startswith("stock"):
        kw["scheduler_cls"] = f"granikv_engine.bench.probe_scheduler.{probe}"
        if not tiny:
            kw["block_size"] = 16
        if engine == "stock-cascade":
            kw["disable_cascade_attn"] = False
    else:
        backend = "paged" if engine == "granikv-paged" else "auto"
        kw["additional_config"] = {"granikv": {
            "enabled": True, "hot_slots": hot_slots, "backend": backend,
            "calibration_path": calibration,
            "full_cudagraphs": engine != "granikv-piecewise",
            "fast_alloc": engine != "granikv-stockalloc"}}
        if engine == "granikv-implicit":
            kw["additional_config"]["granikv"].update(implicit_hot=True,
                                                      implicit_fraction=1.0)
    return kw


def engine_env(engine: str) -> dict[str, str]:
    """Environment an engine needs before vLLM starts. vLLM 0.26 runs its V2 model runner
    by default, and the V2 runner has no cascade attention: ``disable_cascade_attn=False``
    alone leaves stock-cascade the same engine as stock (measured on one H200 on
    2026-11-29: 1.01x on W1, 0.99x on W3). The V1 runner implements it."""
    return {"VLLM_USE_V2_MODEL_RUNNER": "0"} if engine == "stock-cascade" else {}


def make_llm(model: str, engine: str, max_len: int, hot_slots: int, tiny: bool,
             extra: dict[str, Any], calibration: str = "", tp: int = 1,
             max_num_seqs: int = MAX_NUM_SEQS) -> Any:
    installed.check()  # both sides: the stock engine's probes are control calls too
    os.environ.update(engine_env(engine))
    from vllm import LLM

    if tiny:
        folder = model
    else:
        folder = tempfile.mkdtemp(prefix=f"granikv-{model}-")
        (Path(folder) / "config.json").write_text((MODELS / f"{model}.json").read_text())
    import torch

    gpu = torch.cuda.is_available()
    kw: dict[str, Any] = dict(model=folder, load_format="dummy", skip_tokenizer_init=True,
                              enable_prefix_caching=True, max_model_len=max_len, seed=0,
                              disable_log_stats=False, max_num_seqs=max_num_seqs)
    if tp > 1:  # vLLM's multiprocessing executor, one worker per GPU, NCCL between them.
        # FlashInfer's fused all-reduce + RMSNorm picks its "mnnvl" backend on one node,
        # which needs NVLink multicast (off on machines whose GPUs are shared; it faulted): off
        # for every engine alike, so all-reduce is vLLM's custom (CUDA IPC) one.
        kw.update(tensor_parallel_size=tp, distributed_executor_backend="mp")
        if gpu:
            extra = {**extra, "compilation_config": {
                **extra.get("compilation_config", {}),
                "pass_config": {"fuse_allreduce_rms": False}}}
    if gpu:  # both engines alike; async scheduling is vLLM's GPU default, made explicit
        kw["gpu_memory_utilization"] = float(os.environ.get("GRANIKV_BENCH_GPU_MEM", "0.9"))
        if kv_gib := os.environ.get("GRANIKV_BENCH_KV_GIB"):  # engines sharing the GPUs:
            # a fixed KV size, not one profiled while the other engine allocates
            kw["kv_cache_memory_bytes"] = int(float(kv_gib) * 2**30)
        kw["async_scheduling"] = True
        # Start-up only: FlashInfer autotuning and its sampler's JIT (greedy decoding
        # never uses it) cost ~100 s per fresh machine; off for every engine alike.
        kw["kernel_config"] = {"enable_flashinfer_autotune": False}
    kw.update(engine_kwargs(engine, max_len, hot_slots, async_sched=gpu, tiny=tiny,
                            calibration=calibration))
    kw.update(extra)
    return LLM(**kw)


def take_turn(sync: Path, turn: int, peers: int) -> None:
    """Engines that share the GPUs (``bench/run.py``'s ``a~b``) start at the same time but
    are timed one at a time: ready when all have started, then in turn order, so that no
    engine's start-up (compile, CUDA graphs, calibration) overlaps another's timing."""
    sync.mkdir(parents=True, exist_ok=True)
    (sync / f"ready-{turn}").touch()
    while not all((sync / f"ready-{i}").exists() for i in range(peers)):
        time.sleep(0.5)
    while turn and not (sync / f"done-{turn - 1}").exists():
        time.sleep(0.5)


def end_turn(sync: Path, turn: int, peers: int) -> None:
    """Done; stay up (idle) until every peer is done, so that this engine's shutdown
    (freeing its GPU memory) never overlaps a peer's timing."""
    (sync / f"done-{turn}").touch()
    while not all((sync / f"done-{i}").exists() for i in range(peers)):
        time.sleep(0.5)


def main() -> None:
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")  # see make_llm
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", required=True,
                    choices=["stock", "stock-cascade", "granikv-paged", "granikv-piecewise",
                             "granikv-stockalloc", "granikv", "granikv-implicit"])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--workloads", default="W5,W1,W2,W3",
                    help="names; NAME/unreg: run with nothing registered (GraniKV)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--hot-slots", type=int, default=100_000)
    ap.add_argument("--max-num-seqs", type=int, default=MAX_NUM_SEQS,
                    help="vLLM's max_num_seqs (requests per engine step), for every workload")
    ap.add_argument("--scale", type=float, default=1.0, help="shrink lengths (CPU dry runs)")
    ap.add_argument("--tiny", default="", help="a local model folder (CPU dry runs)")
    ap.add_argument("--attribution", default="",
                    help="granikv: these workloads also run with the paged backend only")
    ap.add_argument("--ceiling", default="",
                    help="stock: these workloads also run with every team context cut to "
                         f"{NO_CONTEXT} tokens (engine stock-noctx), priced into a ceiling")
    ap.add_argument("--capture-sizes", default="1,2,4,8,16,32,64,128,256,512",
                    help="CUDA graph capture sizes, the same for every engine")
    ap.add_argument("--profile", type=Path, default=None,
                    help="after the timed runs, profile the first workload's steps "
                         "(torch profiler, vLLM's profiler_config) into this folder")
    ap.add_argument("--profile-stack", action="store_true",
                    help="with --profile: the torch profiler also traces Python calls "
                         "(trace_summary's host time by function; slows the host)")
    ap.add_argument("--sync", type=Path, default=None,
                    help="engines sharing the GPUs: start together, time one at a time")
    ap.add_argument("--turn", type=int, default=0, help="with --sync: this engine's turn")
    ap.add_argument("--peers", type=int, default=1, help="with --sync: engines in all")
    args = ap.parse_args()
    names = args.workloads.split(",")
    ws = [WORKLOADS[n.removesuffix(UNREG)] for n in names]
    unregistered = {i for i, n in enumerate(names) if n.endswith(UNREG)}
    tps = {w.tp for w in ws}
    if len(tps) != 1 or any(w.model != args.model for w in ws):
        ap.error(f"--workloads must all be {args.model}'s at one TP degree: {args.workloads}")
    tp = tps.pop()
    # Sized for every workload of the model, whichever run now: one engine config per
    # model, so a later run on the same machine reuses the compile cache.
    max_len = max(w.max_len_at(args.scale) + 8 for w in WORKLOADS.values()
                  if w.model == args.model and w.tp == tp)
    t0 = time.perf_counter()
    extra: dict[str, Any] = {"dtype": "float32", "enforce_eager": True} if args.tiny else {
        "compilation_config": {"cudagraph_capture_sizes": [
            int(x) for x in args.capture_sizes.split(",")]}}
    tag = args.model if tp == 1 else f"{args.model}-tp{tp}"
    cal = "" if args.tiny else f"/tmp/granikv-calibration-{tag}.json"
    if args.profile:  # engine steps 40-59 of the profiled run (decode, past the prefill)
        args.profile = args.profile.resolve()
        extra["profiler_config"] = {
            "profiler": "torch", "torch_profiler_dir": str(args.profile / args.engine),
            "torch_profiler_with_stack": args.profile_stack, "torch_profiler_use_gzip": True,
            "delay_iterations": 40, "max_iterations": 20, "ignore_frontend": True}
    llm = make_llm(args.tiny or args.model, args.engine, max_len, args.hot_slots,
                   bool(args.tiny), extra, cal, tp, max_num_seqs=args.max_num_seqs)
    start_s = time.perf_counter() - t0
    llm.collective_rpc("granikv_reinit_weights")
    vocab = llm.llm_engine.vllm_config.model_config.get_vocab_size()
    if args.sync:
        take_turn(args.sync, args.turn, args.peers)
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"env": environment(), "engine": args.engine, "model": args.model,
                           "tp": tp, "max_num_seqs": args.max_num_seqs,
                           "engine_start_s": start_s, "results": []}
    # the default keeps the name it always had; another max_num_seqs its own file
    seqs = "" if args.max_num_seqs == MAX_NUM_SEQS else f"-max-num-seqs-{args.max_num_seqs}"
    out = args.out / f"e2e-{tag}-{args.engine}{seqs}.json"
    # GraniKV: each workload once with the unified paged backend only, then with the
    # dispatcher (fresh suffixes, so the second run gets no prefix-cache help).
    attributed = set(args.attribution.split(",")) if args.attribution else set()
    capped = set(args.ceiling.split(",")) if args.ceiling else set()
    for r in run_workloads(llm, args.engine, ws, vocab, args.scale, attributed, capped,
                           args.max_num_seqs, unregistered):
        doc["results"].append(r)
        print(f"[{r['engine']}] {r['workload']}: {r['tok_s']:.0f} tok/s in {r['wall_s']:.2f}s",
              flush=True)
        out.write_text(json.dumps(doc, indent=1))
    if args.profile:  # after the timed runs: the first workload once more, profiled
        w = ws[0]
        llm.start_profile()
        r = run_workload(llm, args.engine, w, vocab, args.scale, salt="-profile")
        llm.stop_profile()
        print(f"[{args.engine}] {w.name} profiled ({r['tok_s']:.0f} tok/s with the "
              f"profiler on): {args.profile}", flush=True)
    if args.sync:
        end_turn(args.sync, args.turn, args.peers)


if __name__ == "__main__":
    main()
