#!/usr/bin/env bash
# Heterogeneous agent traffic on one H200, in one go (about 5-7 minutes): W6 (skewed
# teams, varied lengths) and W7 (multi-turn agents) on GraniKV and on stock vLLM, both
# engines started together and timed one after the other (GraniKV first), the stock
# engine then also running both workloads with every team context cut to 16 tokens (the
# measured part of the ceiling); then the report (markdown + PNG) beside the JSON and
# the engine logs. From the repository root, with the project and vLLM installed:
#   OUT=DIR bash granikv_engine/bench/runs/heterogeneous.sh
# Environment: KV_GIB (KV cache per engine, 42), SEQS (max_num_seqs, 256), LIMIT_S (the
# engines' time limit, 420), PYTHON (python3), RUN_DIR (scratch, /tmp/granikv-agents).
set -uo pipefail
OUT=${OUT:?set OUT}
py=${PYTHON:-python3}
run=${RUN_DIR:-/tmp/granikv-agents}
limit=${LIMIT_S:-420}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
rm -rf "$run" && mkdir -p "$run" "$OUT"
GRANIKV_BENCH_KV_GIB=${KV_GIB:-42} timeout $((limit + 30)) "$py" -m granikv_engine.bench.run \
  --out "$run" --phases "agents-granikv~agents-stock" --timeout "$limit" \
  --max-num-seqs "${SEQS:-256}" | grep -E "^==|tok/s"
"$py" -m granikv_engine.bench.report --runs "$run" --out "$OUT" --name e2e-agents
cp "$run"/*.json "$run"/*.log "$OUT/" 2>/dev/null
sed -n '/^| workload/,/^$/p' "$OUT/e2e-agents.md"
