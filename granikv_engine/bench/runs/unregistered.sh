#!/usr/bin/env bash
# Shared prompts nobody registered, against stock vLLM on one GPU, one step per call (each
# within 10 minutes; every engine or server alone on the GPU, one after the other):
#   OUT=DIR bash granikv_engine/bench/runs/unregistered.sh STEP
# STEP:
#   offline-stock     the implicit-HOT GPU test, then stock vLLM offline (bench/e2e.py,
#                     the LLM class): W5, W1, W3
#   offline-implicit  GraniKV with implicit HOT on: W5, W1, W3 with nothing registered,
#                     then W1 registered
#   offline-cold      GraniKV with implicit HOT off: W1 and W3 with nothing registered
#                     (COLD prefix caching in hash chunks), then W1 registered
#   agents-stock      stock vLLM offline: W6 and W7 (heterogeneous agent traffic) and their
#                     no-context runs (the ceiling, bench/ceiling.py)
#   agents-implicit   GraniKV with implicit HOT on: W6 and W7 with nothing registered
#   online-stock      stock `vllm serve`: W1-online and W3-online, the context as the
#                     system message of every request
#   online-cold       GraniKV in `vllm serve`, implicit HOT off: W1-online sent as to stock
#                     (nothing registered); then registered: W1-online, W3-online (team0's
#                     id registered again with a 2K text) and W1-online (again with 16K)
#   online-implicit   GraniKV in `vllm serve` with implicit HOT on: W1-online and W3-online
#                     sent as to stock, then W1-online registered
# then the report: python -m granikv_engine.bench.unregistered_report --runs DIR ...
# Environment: PYTHON (python3), SERVE, KV_GIB (each engine's KV cache, 42), RUNS (the
# engines' work folders, /tmp/granikv-unregistered), TIME_LIMIT (each online workload's
# cut, 100 s).
set -uo pipefail
OUT=${OUT:?set OUT}
step=${1:?name a step}
py=${PYTHON:-python3}
RUNS=${RUNS:-/tmp/granikv-unregistered}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TIME_LIMIT=${TIME_LIMIT:-100}
export GRANIKV_BENCH_KV_GIB=${KV_GIB:-42} KV_GIB=${KV_GIB:-42}
mkdir -p "$OUT" "$RUNS"

offline() {  # LIMIT_S PHASE WORKLOADS: one engine alone on the GPU (bench/run.py;
  # WORKLOADS "": the phase's own)
  local dir=$RUNS/offline-$2
  timeout $(($1 + 15)) "$py" -m granikv_engine.bench.run --out "$dir" --phases "$2" \
    ${3:+--workloads "$3"} --attribution none --max-num-seqs 256 --timeout "$1" \
    | grep -E "^==|tok/s"
  mkdir -p "$OUT/offline/$2"
  cp "$dir"/*.json "$dir"/*.log "$OUT/offline/$2/" 2>/dev/null
}

online() {  # SIDE DIR WORKLOADS: one server alone on the GPU (bench/online_gpu.sh)
  bash granikv_engine/bench/online_gpu.sh "$1" "$OUT/$2" "$3" >"$OUT/$2.txt" 2>&1
  grep "^==" "$OUT/$2.txt"
  grep -h "promoted to HOT" "$OUT/$2"/server-*.log 2>/dev/null | sed 's/.*GraniKV: /== /' \
    | head -20
}

case $step in
offline-stock)
  timeout 150 "$py" -m pytest tests/gpu/test_implicit_gpu.py -m gpu -q -s -p no:cacheprovider \
    2>&1 | grep -v "^(EngineCore" | tail -30 >"$OUT/gpu-test-implicit.txt"
  tail -6 "$OUT/gpu-test-implicit.txt"
  offline 280 stock W5,W1,W3
  ;;
offline-implicit)
  offline 320 granikv-implicit W5/unreg,W1/unreg,W3/unreg,W1
  ;;
offline-cold)
  offline 320 granikv W1/unreg,W3/unreg,W1
  ;;
agents-stock)
  offline 420 agents-stock ""
  ;;
agents-implicit)
  offline 420 agents-implicit ""
  ;;
online-stock)
  online stock stock "W1-online W3-online"
  ;;
online-cold)
  online granikv granikv "W1-online@stock W1-online W3-online W1-online"
  ;;
online-implicit)
  IMPLICIT=1 online granikv granikv-implicit "W1-online@stock W3-online@stock W1-online"
  ;;
*) echo "unknown step $step"; exit 2 ;;
esac
