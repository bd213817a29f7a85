#!/usr/bin/env bash
# The online benchmark on one H200, in one go: the platform (`serve run`) and stock
# `vllm serve` started together (each with a fixed KV cache of KV_GIB), measured one after
# the other (W1-online and W3-online, closed loop, then the platform's 32-agent team run);
# then GraniKV in `vllm serve` alone with the same KV cache; every workload cut at
# TIME_LIMIT seconds. From the repository root, with vLLM, Ray Serve and the project
# installed:
#   OUT=DIR SERVE=serve bash granikv_engine/bench/runs/online.sh
# then python -m granikv_engine.bench.online_report --runs DIR ... (docs/benchmarks/online.md).
# Environment: KV_GIB (40), HOT_SLOTS (100000: W3-online's eight contexts take 73,728
# slots), GPU_MEM (0.45), TIME_LIMIT (150), WORKLOADS ("W1-online W3-online"), PYTHON,
# SERVE, RAY (the `ray` command, to stop the platform's cluster).
set -uo pipefail
OUT=${OUT:?set OUT}
export KV_GIB=${KV_GIB:-40} HOT_SLOTS=${HOT_SLOTS:-100000} GPU_MEM=${GPU_MEM:-0.45}
export TIME_LIMIT=${TIME_LIMIT:-150} TEAM_TIMEOUT=${TEAM_TIMEOUT:-240}
export PROFILE_WORKLOAD=${PROFILE_WORKLOAD-W3-online}  # the headline W1-online runs unsampled
workloads=${WORKLOADS:-W1-online W3-online}
mkdir -p "$OUT"
t0=$(date +%s)
bash granikv_engine/bench/online_together.sh "$OUT/together" "platform stock" "$workloads"
echo "== platform and stock done at $(( $(date +%s) - t0 )) s"
# nothing of them may hold the GPU when the next server starts
"${RAY:-ray}" stop --force >/dev/null 2>&1
pkill -f vllm.entrypoints.openai.api_server
sleep 5
nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null | sed 's/^/== GPU memory in use: /'
bash granikv_engine/bench/online_gpu.sh granikv "$OUT/granikv" "$workloads" \
  >"$OUT/granikv.txt" 2>&1
grep "^==" "$OUT/granikv.txt"
echo "== all done at $(( $(date +%s) - t0 )) s"
