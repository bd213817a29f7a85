#!/usr/bin/env bash
# GPU benchmarks and GPU tests of GraniKV against stock vLLM, one step per call; each step
# finishes within 10 minutes, so a run can be split across short GPU leases.
#
#   OUT=DIR bash granikv_engine/bench/gpu_benchmarks.sh STEP
#   STEP: install | tests | gate | llama | w2 | qwen | w1-profile | w1-stack |
#         attribution | stock-cascade | fast-alloc | cascade-split
#
# Prerequisites:
# - one NVIDIA GPU with about 140 GB of memory (the tables in docs/benchmarks/ come from
#   an H200) and a driver for CUDA 13 (torch 2.11.0+cu130); W4 (Qwen2.5-14B) needs the whole GPU;
# - vLLM 0.26.0 (GPU build), FlashInfer 0.6.14 and torch as pinned in
#   requirements/gpu.txt, installed in the Python that runs `python3` (the `install` step
#   does this from PyPI), or installed elsewhere with `pip install --target DIR` and
#   named by SITE=DIR, which goes first on PYTHONPATH (for a machine without network:
#   install into DIR on one with network, copy DIR over);
# - run from the repository root; no model weights (dummy weights of the models' shapes).
# Each step writes its results to $OUT: the runs' JSON (with the commands that made
# them) and engine logs, the GPU tests' output, profile summaries. The engines' own work
# folders are under $RUNS (default ${TMPDIR:-/tmp}/granikv-bench). Tables and plots:
#   python -m granikv_engine.bench.report --runs DIR... --out docs/benchmarks --name NAME
set -uo pipefail
OUT=${OUT:?set OUT to the folder that receives the results}
RUNS=${RUNS:-${TMPDIR:-/tmp}/granikv-bench}
step=${1:?name a step}
export PYTHONPATH=${SITE:+$SITE:}$PWD
mkdir -p "$OUT" "$RUNS"

gpu_tests() {  # LIMIT_S: the GPU tests (kernels, FULL-graph replay, engine vs stock)
  timeout "$1" python3 -m pytest tests/gpu -m gpu -q -s -p no:cacheprovider 2>&1 \
    | grep -v "^(EngineCore" | tail -60 >"$OUT/gpu-tests.txt"
  tail -25 "$OUT/gpu-tests.txt"
}

bench() {  # NAME LIMIT_S RUN_ARGS...: engines started together on the GPU, timed in turn
  # (bench/run.py, "~" phases); their JSON and logs to $OUT
  local dir=$RUNS/$1 limit=$2
  shift 2
  GRANIKV_BENCH_KV_GIB=${KV_GIB:-42} timeout $((limit + 10)) python3 -m granikv_engine.bench.run \
    --out "$dir" --timeout "$limit" "$@" | grep -E "^==|tok/s"
  cp "$dir"/*.json "$dir"/*.log "$OUT/"
}

profile_summary() {  # NAME FILE TOP: the traces of $RUNS/NAME/profile, summarised into $OUT/FILE
  python3 -m granikv_engine.bench.trace_summary "$RUNS/$1/profile" --top "$3" >"$OUT/$2" 2>&1
  grep -E "^## |steps \(" "$OUT/$2"
}

case $step in
install)  # the GPU build (requirements/gpu.txt), then this repository, editable
  python3 -m pip install -q -r requirements/gpu.txt >"$RUNS/pip.log" 2>&1 \
    && python3 -m pip install -q --no-deps --no-build-isolation -e . >>"$RUNS/pip.log" 2>&1 \
    || { tail -20 "$RUNS/pip.log"; exit 1; }
  python3 -c "import vllm, flashinfer; print('vllm', vllm.__version__, 'flashinfer', flashinfer.__version__)"
  ;;
tests)
  gpu_tests 300
  ;;
gate)  # the GPU tests, then W5 on three engines, profiled
  gpu_tests 240
  KV_GIB=10 bench w5 320 --phases "stock~granikv~granikv-piecewise" --workloads W5 \
    --attribution none --hot-slots 20000 --profile
  profile_summary w5 profile-w5.md 12
  ;;
llama)  # W5, W1, W3, W2: stock and GraniKV at max_num_seqs 256 (W1 and W3 have 256
  # agents, W5 has 8: 256 limits none of them), so W2 (512 agents) runs at 256 for both
  # engines here, and at 512 in the w2 step; the report keeps each engine's best
  bench llama 570 --phases "stock~granikv" --workloads W5,W1,W3,W2 --attribution none \
    --max-num-seqs 256
  ;;
w2)  # W2 alone, its HOT arena sized to its prefix (run.py's w2-* phases)
  bench w2 570 --phases "w2-stock~w2-granikv"
  ;;
w1-profile)  # where a W1 step's time goes
  bench w1-profile 570 --phases "stock~granikv" --workloads W1 --attribution none --profile
  profile_summary w1-profile profile-w1.md 15
  ;;
w1-stack)  # where a W1 step's host time goes, by Python function: vLLM's cascade on the
  # V1 runner (stock-cascade) and GraniKV, 20 decode steps each with Python tracing
  bench w1-stack 540 --phases "stock-cascade~granikv" --workloads W1 --attribution none \
    --profile --profile-stack
  profile_summary w1-stack profile-w1-stack.md 45
  ;;
attribution)  # W1, W3: stock; GraniKV with the unified paged backend only; GraniKV
  bench attribution 570 --phases "stock~granikv" --workloads W1,W3 --attribution W1,W3
  ;;
stock-cascade)  # W1, W3: stock and vLLM's own cascade (V1 model runner: e2e.engine_env)
  bench stock-cascade 570 --phases "stock~stock-cascade" --workloads W1,W3 --attribution none
  ;;
fast-alloc)  # W1, W3: GraniKV with and without the allocation fast path (fast_alloc.py)
  bench fast-alloc 570 --phases "granikv~granikv-stockalloc" --workloads W1,W3 \
    --attribution none
  ;;
qwen)  # W4 (Qwen2.5-14B): two engines of 14B with 40 GiB of KV each do not fit one
  # GPU together, so stock, then GraniKV, each alone (0.9 of the GPU)
  timeout 590 python3 -m granikv_engine.bench.run --out "$RUNS/qwen" \
    --phases "w4-stock,w4-granikv" --timeout 290 | grep -E "^==|tok/s"
  cp "$RUNS"/qwen/*.json "$RUNS"/qwen/*.log "$OUT/"
  ;;
cascade-split)  # the cascade layer of a decode step launch by launch, and the context
  # pass at several split counts (bench/cascade_split.py)
  timeout 400 python3 -m granikv_engine.bench.cascade_split --out "$OUT" | tail -12
  ;;
*) echo "unknown step $step"; exit 2 ;;
esac
