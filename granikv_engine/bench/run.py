"""Run the GPU benchmarks side by side on one machine: ``make bench`` (or the phases one
by one, each within a time limit).

Phases: ``tests`` (GPU kernels vs references), ``kernels``, then one engine process per
end-to-end phase: ``stock``, ``granikv`` (with the paged-only attribution runs on W1 and
W3), ``stock-cascade``, ``granikv-paged``, ``granikv-piecewise``, ``granikv-stockalloc``,
``granikv-implicit``, ``w2-stock``, ``w2-granikv``, ``w4-stock``, ``w4-granikv``, and the
tensor-parallel ones
``tp2-stock``, ``tp2-granikv`` (Qwen2.5-14B on 2 GPUs), ``tp4-stock``, ``tp4-granikv``
(Qwen2.5-32B on 4), and the heterogeneous agent traffic ``agents-stock`` (W6, W7 and
their no-context ceiling runs), ``agents-granikv`` and ``agents-implicit`` (nothing
registered, implicit HOT on). Results land in ``--out`` as
JSON; ``bench/report.py`` turns them into docs/benchmarks/ (markdown + PNG).

``--phases a+b,c`` runs ``a`` and ``b`` at the same time, each on a GPU of its own
(CUDA_VISIBLE_DEVICES), then ``c`` on all GPUs: on a 2-GPU machine, stock and GraniKV
side by side in half the time. ``a~b`` starts both engines on all GPUs at once (each with
its share of the memory), then times ``a`` and ``b`` one after the other while the other
idles: the start-ups overlap, the timed runs do not. NVLink multicast stays off (NCCL,
PyTorch, NVSHMEM, vLLM's symmetric-memory and FlashInfer's all-reduce) for every engine.

``--max-num-seqs N`` runs every end-to-end phase at vLLM's ``max_num_seqs`` N (default:
e2e.py's 512); its JSON then lands as ``e2e-...-sN.json``, beside the 512 run's, and
``bench/report.py`` keeps each engine's best.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable
PHASES: dict[str, list[str]] = {
    "tests": [PY, "-m", "pytest", "tests/gpu", "-m", "gpu", "-q", "-s", "-p",
              "no:cacheprovider"],
    "kernels": [PY, "-m", "granikv_engine.bench.kernels", "--budget-s", "150"],
    "stock": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "stock",
              "--workloads", "W5,W1,W2,W3"],
    "granikv": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "granikv",
                "--workloads", "W5,W1,W2,W3", "--attribution", "W1,W3"],
    "stock-cascade": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "stock-cascade",
                      "--workloads", "W1,W3"],
    "granikv-paged": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "granikv-paged",
                      "--workloads", "W1,W3"],
    "granikv-piecewise": [PY, "-m", "granikv_engine.bench.e2e", "--engine",
                          "granikv-piecewise", "--workloads", "W5,W1"],
    "granikv-stockalloc": [PY, "-m", "granikv_engine.bench.e2e", "--engine",
                           "granikv-stockalloc", "--workloads", "W1,W3"],
    # nothing registered (W5, W1, W3 as stock gets them), then W1 registered, with
    # implicit HOT on: shared prompt heads promoted to HOT by the engine
    "granikv-implicit": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "granikv-implicit",
                         "--workloads", "W5/unreg,W1/unreg,W3/unreg,W1"],
    # W2 alone: its 512 agents need 393K COLD tokens, so GraniKV's HOT arena is sized to
    # its one 16K prefix (the shared phases reserve 100K slots for W3's prefixes too)
    "w2-stock": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "stock",
                 "--workloads", "W2"],
    "w2-granikv": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "granikv",
                   "--workloads", "W2", "--hot-slots", "20000"],
    "w4-stock": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "stock",
                 "--model", "qwen2.5-14b", "--workloads", "W4"],
    "w4-granikv": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "granikv",
                   "--model", "qwen2.5-14b", "--workloads", "W4", "--hot-slots", "20000"],
    # Heterogeneous agent traffic (W6, W7): stock, its no-context runs (the ceiling), and
    # GraniKV with a HOT arena for the larger of the two workloads' context sets (W6: 46.6K
    # tokens; each workload unregisters its contexts when done)
    "agents-stock": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "stock",
                     "--workloads", "W6,W7", "--ceiling", "W6,W7"],
    "agents-granikv": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "granikv",
                       "--workloads", "W6,W7", "--hot-slots", "48000"],
    # the same traffic with nothing registered, implicit HOT on
    "agents-implicit": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "granikv-implicit",
                        "--workloads", "W6/unreg,W7/unreg", "--hot-slots", "48000"],
    **{f"tp{tp}-{eng}": [PY, "-m", "granikv_engine.bench.e2e", "--engine", eng, "--model",
                         model, "--workloads", f"W1-TP{tp},W3-TP{tp}"]
       for tp, model in ((2, "qwen2.5-14b"), (4, "qwen2.5-32b"))
       for eng in ("stock", "granikv")},
}
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0",
                "VLLM_FLASHINFER_ALLREDUCE_BACKEND": "trtllm"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--timeout", type=int, default=560, help="per phase, seconds")
    ap.add_argument("--workloads", default="", help="override the Llama phases' workloads")
    ap.add_argument("--kernel-budget", default="150")
    ap.add_argument("--profile", action="store_true",
                    help="end-to-end phases also profile 20 decode steps (OUT/profile/)")
    ap.add_argument("--profile-stack", action="store_true",
                    help="with --profile: also trace Python calls (host time by function)")
    ap.add_argument("--hot-slots", default="", help="the GraniKV phases' HOT arena size")
    ap.add_argument("--max-num-seqs", default="",
                    help="the end-to-end phases' max_num_seqs (default: e2e.py's 512)")
    ap.add_argument("--attribution", default="W1,W3",
                    help="the granikv phase's paged-only runs ('none': skip them)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for group in args.phases.split(","):
        shared = "~" in group
        phases = group.split("~" if shared else "+")
        sync = args.out / f"sync-{'-'.join(phases)}"
        shutil.rmtree(sync, ignore_errors=True)  # a earlier run's turns are not this one's
        t0 = time.time()
        procs = []
        for i, phase in enumerate(phases):
            cmd = _command(phase, args)
            env = {**os.environ, **NO_MULTICAST}
            if shared:  # all GPUs, memory split, timed one at a time (e2e.take_turn)
                cmd += ["--sync", str(sync), "--turn", str(i), "--peers", str(len(phases))]
                env["GRANIKV_BENCH_GPU_MEM"] = f"{0.88 / len(phases):.3f}"
                env.setdefault("GRANIKV_BENCH_KV_GIB", "32")  # per GPU, the same for all
            elif len(phases) > 1:
                env["CUDA_VISIBLE_DEVICES"] = str(i)
            log = (args.out / f"{phase}.log").open("w")
            # Own process group: on a timeout the engine core and workers go too, and
            # the next phase starts on a free GPU.
            procs.append((i, phase, log, subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)))
        left = list(procs)
        while left:
            for item in list(left):
                i, phase, log, proc = item
                rc: int | str | None = proc.poll()
                if rc is None and time.time() - t0 < args.timeout:
                    continue
                if rc is None:
                    rc = "timeout"
                _kill_group(proc)
                log.close()
                left.remove(item)
                if shared:  # a peer that died must not hold the others up
                    sync.mkdir(parents=True, exist_ok=True)
                    for f in (f"ready-{i}", f"done-{i}"):
                        (sync / f).touch()
                tail = (args.out / f"{phase}.log").read_text().splitlines()[-12:]
                print(f"== {phase}: rc={rc} in {time.time() - t0:.0f}s", flush=True)
                print("\n".join(line[:200] for line in tail), flush=True)
            time.sleep(1)
        _wait_gpu_free()


def _command(phase: str, args: argparse.Namespace) -> list[str]:
    """The phase's command line with this run's overrides."""
    cmd = PHASES[phase] + ([] if phase == "tests" else ["--out", str(args.out)])
    if args.workloads and phase in ("stock", "granikv", "stock-cascade", "granikv-paged",
                                    "granikv-piecewise", "granikv-stockalloc",
                                    "granikv-implicit"):
        cmd[cmd.index("--workloads") + 1] = args.workloads
    if phase == "kernels":
        cmd[cmd.index("--budget-s") + 1] = args.kernel_budget
    e2e = "granikv_engine.bench.e2e" in cmd
    if args.profile and e2e:
        cmd += ["--profile", str(args.out / "profile")]
        if args.profile_stack:
            cmd += ["--profile-stack"]
    if args.hot_slots and phase.startswith("granikv"):
        cmd += ["--hot-slots", args.hot_slots]
    if args.max_num_seqs and e2e:
        cmd += ["--max-num-seqs", args.max_num_seqs]
    if "--attribution" in cmd:
        at = cmd.index("--attribution")
        cmd[at + 1] = "" if args.attribution == "none" else args.attribution
    return cmd


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        time.sleep(3)


def _wait_gpu_free(limit_s: float = 90, used_mib: int = 4000) -> None:
    t0 = time.time()
    while time.time() - t0 < limit_s:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            return
        if not out.strip() or max(int(x) for x in out.split()) < used_mib:
            return
        time.sleep(2)


if __name__ == "__main__":
    main()
