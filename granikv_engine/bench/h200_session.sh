#!/usr/bin/env bash
# The device session's runs, one step per call (each under the 10-minute call limit), on
# the H200 after the three transfers of ../shared/gpu/README.md:
#   bash granikv_engine/bench/h200_session.sh install|tests|gate|llama|w2|w1-profile|w1-stack|attribution|stock-cascade|fast-alloc|qwen
# Results go to $OUT (JSON, engine logs, profile summary), at most 8 files per call.
set -uo pipefail
OUT=${OUT:?set OUT}
step=$1
export PYTHONPATH=/tmp/site:$PWD

case $step in
install)
  cp .gpu/part_* /tmp/gk/ && bash .gpu/install.sh >/tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
  tail -2 /tmp/install.log
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/tmp/pip.log 2>&1 || { tail -5 /tmp/pip.log; exit 1; }
  ;;
tests)  # the GPU tests alone (kernels, FULL-graph replay, engine vs stock)
  timeout 300 python3 -m pytest tests/gpu -m gpu -q -s -p no:cacheprovider 2>&1 \
    | grep -v "^(EngineCore" | tail -60 >"$OUT/gpu-tests.txt"
  tail -25 "$OUT/gpu-tests.txt"
  ;;
gate)  # GPU tests (kernels, FULL-graph replay, engine vs stock), then W5 on three engines
  timeout 240 python3 -m pytest tests/gpu -m gpu -q -s -p no:cacheprovider 2>&1 \
    | grep -v "^(EngineCore" | tail -60 >"$OUT/gpu-tests.txt"
  tail -25 "$OUT/gpu-tests.txt"
  GRANIKV_BENCH_KV_GIB=10 timeout 330 python3 -m granikv_engine.bench.run --out /tmp/r5 \
    --phases "stock~granikv~granikv-piecewise" --workloads W5 --attribution none \
    --hot-slots 20000 --profile --timeout 320 | grep -E "^==|tok/s"
  python3 -m granikv_engine.bench.trace_summary /tmp/r5/profile --top 12 >"$OUT/profile-w5.md" 2>&1
  cp /tmp/r5/*.json /tmp/r5/*.log "$OUT/"
  grep -E "^## |steps \(" "$OUT/profile-w5.md"
  ;;
llama)  # W5, W1, W2, W3: stock and GraniKV on one GPU, timed in turn
  GRANIKV_BENCH_KV_GIB=42 timeout 580 python3 -m granikv_engine.bench.run --out /tmp/rl \
    --phases "stock~granikv" --workloads W5,W1,W2,W3 --attribution none --timeout 570 \
    | grep -E "^==|tok/s"
  cp /tmp/rl/*.json /tmp/rl/*.log "$OUT/"
  ;;
w2)  # W2 alone, its HOT arena sized to its prefix: both engines on one GPU, in turn
  GRANIKV_BENCH_KV_GIB=42 timeout 580 python3 -m granikv_engine.bench.run --out /tmp/r2 \
    --phases "w2-stock~w2-granikv" --timeout 570 | grep -E "^==|tok/s"
  cp /tmp/r2/*.json /tmp/r2/*.log "$OUT/"
  ;;
w1-profile)  # where a W1 step's time goes (cascade steps, PIECEWISE)
  GRANIKV_BENCH_KV_GIB=42 timeout 580 python3 -m granikv_engine.bench.run --out /tmp/rp \
    --phases "stock~granikv" --workloads W1 --attribution none --profile --timeout 570 \
    | grep -E "^==|tok/s"
  python3 -m granikv_engine.bench.trace_summary /tmp/rp/profile --top 15 >"$OUT/profile-w1.md" 2>&1
  cp /tmp/rp/*.json /tmp/rp/*.log "$OUT/"
  grep -E "^## |steps \(" "$OUT/profile-w1.md"
  ;;
w1-stack)  # where a W1 step's host time goes, by Python function: vLLM's cascade on the
  # V1 runner (stock-cascade) and GraniKV, 20 decode steps each with Python tracing
  GRANIKV_BENCH_KV_GIB=42 timeout 560 python3 -m granikv_engine.bench.run --out /tmp/rs \
    --phases "stock-cascade~granikv" --workloads W1 --attribution none --profile \
    --profile-stack --timeout 540 | grep -E "^==|tok/s"
  python3 -m granikv_engine.bench.trace_summary /tmp/rs/profile --top 45 >"$OUT/profile-w1-stack.md" 2>&1
  cp /tmp/rs/*.json /tmp/rs/*.log "$OUT/"
  grep -E "^## |steps \(" "$OUT/profile-w1-stack.md"
  ;;
attribution)  # W1, W3: stock; GraniKV with the unified paged backend only; GraniKV
  GRANIKV_BENCH_KV_GIB=42 timeout 580 python3 -m granikv_engine.bench.run --out /tmp/rb \
    --phases "stock~granikv" --workloads W1,W3 --attribution W1,W3 --timeout 570 \
    | grep -E "^==|tok/s"
  cp /tmp/rb/*.json /tmp/rb/*.log "$OUT/"
  ;;
stock-cascade)  # W1, W3: stock and vLLM's own cascade (V1 model runner: e2e.engine_env)
  GRANIKV_BENCH_KV_GIB=42 timeout 580 python3 -m granikv_engine.bench.run --out /tmp/ra \
    --phases "stock~stock-cascade" --workloads W1,W3 --attribution none --timeout 570 \
    | grep -E "^==|tok/s"
  cp /tmp/ra/*.json /tmp/ra/*.log "$OUT/"
  ;;
fast-alloc)  # W1, W3: GraniKV with and without the allocation fast path (fast_alloc.py)
  GRANIKV_BENCH_KV_GIB=42 timeout 580 python3 -m granikv_engine.bench.run --out /tmp/rf \
    --phases "granikv~granikv-stockalloc" --workloads W1,W3 --attribution none \
    --timeout 570 | grep -E "^==|tok/s"
  cp /tmp/rf/*.json /tmp/rf/*.log "$OUT/"
  ;;
qwen)  # W4 (Qwen2.5-14B): two engines of 14B with 40 GiB of KV each do not fit one
  # GPU together, so stock, then GraniKV, each alone (0.9 of the GPU)
  timeout 590 python3 -m granikv_engine.bench.run --out /tmp/rq \
    --phases "w4-stock,w4-granikv" --timeout 290 | grep -E "^==|tok/s"
  cp /tmp/rq/*.json /tmp/rq/*.log "$OUT/"
  ;;
*) echo "unknown step $step"; exit 2 ;;
esac
