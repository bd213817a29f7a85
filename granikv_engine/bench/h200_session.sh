#!/usr/bin/env bash
# The device session's runs, one step per call (each under the 10-minute call limit), on
# the H200 after the three transfers of ../shared/gpu/README.md:
#   bash granikv_engine/bench/h200_session.sh install|tests|gate|llama|w2|w1-profile|w1-stack|attribution|stock-cascade|fast-alloc|qwen
# Results go to $OUT (JSON, engine logs, profile summary), at most 8 files per call.
set -uo pipefail
OUT=${OUT:?set OUT}
step=$1
export PYTHONPATH=/tmp/site:$PWD

gpu_tests() {  # LIMIT_S: the GPU tests (kernels, FULL-graph replay, engine vs stock)
  timeout "$1" python3 -m pytest tests/gpu -m gpu -q -s -p no:cacheprovider 2>&1 \
    | grep -v "^(EngineCore" | tail -60 >"$OUT/gpu-tests.txt"
  tail -25 "$OUT/gpu-tests.txt"
}

bench() {  # DIR LIMIT_S RUN_ARGS...: engines started together on the GPU, timed in turn
  # (bench/run.py, "~" phases); their JSON and logs to $OUT
  local dir=$1 limit=$2
  shift 2
  GRANIKV_BENCH_KV_GIB=${KV_GIB:-42} timeout $((limit + 10)) python3 -m granikv_engine.bench.run \
    --out "$dir" --timeout "$limit" "$@" | grep -E "^==|tok/s"
  cp "$dir"/*.json "$dir"/*.log "$OUT/"
}

profile_summary() {  # DIR NAME TOP: the traces of DIR/profile, summarised into $OUT/NAME
  python3 -m granikv_engine.bench.trace_summary "$1/profile" --top "$3" >"$OUT/$2" 2>&1
  grep -E "^## |steps \(" "$OUT/$2"
}

case $step in
install)
  cp .gpu/part_* /tmp/gk/ && bash .gpu/install.sh >/tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
  tail -2 /tmp/install.log
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip.log 2>&1 || { tail -5 /tmp/pip.log; exit 1; }
  ;;
tests)
  gpu_tests 300
  ;;
gate)  # the GPU tests, then W5 on three engines, profiled
  gpu_tests 240
  KV_GIB=10 bench /tmp/r5 320 --phases "stock~granikv~granikv-piecewise" --workloads W5 \
    --attribution none --hot-slots 20000 --profile
  profile_summary /tmp/r5 profile-w5.md 12
  ;;
llama)  # W5, W1, W3, W2: stock and GraniKV at max_num_seqs 256 (W1 and W3 have 256
  # agents, W5 has 8: 256 limits none of them), so W2 (512 agents) runs at 256 for both
  # engines here, and at 512 in the w2 step; the report keeps each engine's best
  bench /tmp/rl 570 --phases "stock~granikv" --workloads W5,W1,W3,W2 --attribution none \
    --max-num-seqs 256
  ;;
w2)  # W2 alone, its HOT arena sized to its prefix (run.py's w2-* phases)
  bench /tmp/r2 570 --phases "w2-stock~w2-granikv"
  ;;
w1-profile)  # where a W1 step's time goes
  bench /tmp/rp 570 --phases "stock~granikv" --workloads W1 --attribution none --profile
  profile_summary /tmp/rp profile-w1.md 15
  ;;
w1-stack)  # where a W1 step's host time goes, by Python function: vLLM's cascade on the
  # V1 runner (stock-cascade) and GraniKV, 20 decode steps each with Python tracing
  bench /tmp/rs 540 --phases "stock-cascade~granikv" --workloads W1 --attribution none \
    --profile --profile-stack
  profile_summary /tmp/rs profile-w1-stack.md 45
  ;;
attribution)  # W1, W3: stock; GraniKV with the unified paged backend only; GraniKV
  bench /tmp/rb 570 --phases "stock~granikv" --workloads W1,W3 --attribution W1,W3
  ;;
stock-cascade)  # W1, W3: stock and vLLM's own cascade (V1 model runner: e2e.engine_env)
  bench /tmp/ra 570 --phases "stock~stock-cascade" --workloads W1,W3 --attribution none
  ;;
fast-alloc)  # W1, W3: GraniKV with and without the allocation fast path (fast_alloc.py)
  bench /tmp/rf 570 --phases "granikv~granikv-stockalloc" --workloads W1,W3 \
    --attribution none
  ;;
qwen)  # W4 (Qwen2.5-14B): two engines of 14B with 40 GiB of KV each do not fit one
  # GPU together, so stock, then GraniKV, each alone (0.9 of the GPU)
  timeout 590 python3 -m granikv_engine.bench.run --out /tmp/rq \
    --phases "w4-stock,w4-granikv" --timeout 290 | grep -E "^==|tok/s"
  cp /tmp/rq/*.json /tmp/rq/*.log "$OUT/"
  ;;
*) echo "unknown step $step"; exit 2 ;;
esac
