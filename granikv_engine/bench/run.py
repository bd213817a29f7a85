"""Run the GPU benchmarks side by side on one machine: ``make bench`` (or the phases one
by one on a machine lent for a few minutes at a time).

Phases: ``tests`` (GPU kernels vs references), ``kernels``, then one engine process per
end-to-end phase: ``stock``, ``granikv`` (with the paged-only attribution runs on W1 and
W3), ``stock-cascade``, ``w4-stock``, ``w4-granikv``. Results land in ``--out`` as JSON;
``bench/report.py`` turns them into docs/benchmarks/ (markdown + PNG).
"""

from __future__ import annotations

import argparse
import os
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
    "w4-stock": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "stock",
                 "--model", "qwen2.5-14b", "--workloads", "W4"],
    "w4-granikv": [PY, "-m", "granikv_engine.bench.e2e", "--engine", "granikv",
                   "--model", "qwen2.5-14b", "--workloads", "W4", "--hot-slots", "20000"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--timeout", type=int, default=560, help="per phase, seconds")
    ap.add_argument("--workloads", default="", help="override the Llama phases' workloads")
    ap.add_argument("--kernel-budget", default="150")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for phase in args.phases.split(","):
        cmd = PHASES[phase] + ([] if phase == "tests" else ["--out", str(args.out)])
        if args.workloads and phase in ("stock", "granikv", "stock-cascade"):
            cmd[cmd.index("--workloads") + 1] = args.workloads
        if phase == "kernels":
            cmd[cmd.index("--budget-s") + 1] = args.kernel_budget
        t0 = time.time()
        log = args.out / f"{phase}.log"
        with log.open("w") as f:
            # Own process group: on a timeout the engine core and workers go too, and
            # the next phase starts on a free GPU.
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                rc: int | str = proc.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                rc = "timeout"
            _kill_group(proc)
            _wait_gpu_free()
        tail = log.read_text().splitlines()[-12:]
        print(f"== {phase}: rc={rc} in {time.time() - t0:.0f}s", flush=True)
        print("\n".join(line[:200] for line in tail), flush=True)


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
