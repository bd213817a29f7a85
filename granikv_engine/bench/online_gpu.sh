#!/usr/bin/env bash
# The online benchmark on one GPU: start one server, run the load generator against it
# (bench/online.py), stop the server. Run each side in turn on the same GPU:
#   bash granikv_engine/bench/online_gpu.sh stock    OUT [WORKLOADS]   # vllm serve (its module)
#   bash granikv_engine/bench/online_gpu.sh granikv  OUT [WORKLOADS]   # vllm serve + GraniKV
#   bash granikv_engine/bench/online_gpu.sh platform OUT [WORKLOADS]   # serve run (the app)
# then: python -m granikv_engine.bench.online_report --runs OUT --out docs/benchmarks ...
# WORKLOADS defaults to "W1-online W3-online". A workload written NAME@CLIENT is sent the way
# the client side CLIENT sends it (W1-online@stock on the granikv side: the context as the
# system message of every request, nothing registered); each run's JSON is labelled with
# its place in WORKLOADS, and every run after the first sends other agent messages for
# the same contexts (none of them cached by an earlier run).
# The platform side also times one agent team run of 32 reviewers (bench/online_team.py).
# Prerequisites: vLLM 0.26.0 for CUDA with FlashInfer 0.6.14, Ray Serve 2.60, LangGraph,
# and this project installed into the Python that runs them (`python3 -m pip install
# --no-deps -e .`: vLLM finds the GraniKV plugin through its entry point in every
# process; the GraniKV sides check it first). The model is Llama-3.1-8B's shape with dummy weights
# and a tokenizer built from code as wide as its vocabulary (bench/word_tokenizer.py: every
# id the dummy model emits decodes to a word; no download). Every side renders and tokenizes
# with 8 threads (vLLM's renderer_num_workers; its default, 1, serializes the tokenizing
# of every request's 16K-token context in the vllm serve sides). Environment: PYTHON (python3),
# SERVE (the `serve` command), MODEL_DIR, PORT (8100), STREAM_BATCH_MS (0), STREAM_INTERVAL
# (vLLM's stream_interval on every side: a request's tokens are sent every N; 1),
# FRONT (the platform's front: proxy, Serve's Python proxy, the default; haproxy, Serve's
# HAProxy, which binds every interface), START_TIMEOUT (600 s), PROCS (client processes, 4), RATE (every
# workload in open loop, requests/s), OPEN_RATE (also W1-online in open loop at this
# rate), WORDS_ONLY (1: generate only whole-word token ids, see bench/online.py; 0, the
# default: any), GPU_MEM (each server's share of the GPU, 0.9), KV_GIB (a fixed KV
# cache size instead of one profiled: for servers that share a GPU), HOT_SLOTS (100000),
# IMPLICIT (1: the granikv side with implicit HOT on, its budget the whole arena),
# GO_FILE (wait for this file before measuring: online_together.sh sets it), TIME_LIMIT
# (seconds: cut each workload then, see bench/online.py), TEAM_TIMEOUT (600 s),
# PROFILE_WORKLOAD (py-spy samples the server during this workload: PROFILE_S seconds
# from PROFILE_AFTER seconds in, collapsed stacks in OUT/profile-SIDE-WORKLOAD.txt). A dry run
# elsewhere (a CPU machine, the tiny model) overrides MODEL_JSON, ENGINE_ARGS (the engine
# arguments of both vllm serve sides), PLATFORM_CONFIG and SCALE (shrinks the workloads).
set -uo pipefail
side=$1
out=$2
workloads=${3:-W1-online W3-online}
PY=${PYTHON:-python3}
SERVE=${SERVE:-serve}
MODEL_DIR=${MODEL_DIR:-/tmp/granikv-llama-8b-dummy}
PORT=${PORT:-8100}
URL=http://127.0.0.1:$PORT
mkdir -p "$out" "$MODEL_DIR"
if [ "$side" != stock ]; then  # vLLM must find GraniKV's entry point (see installed.py)
  "$PY" -m granikv_engine.vllm_plugin.installed || { touch "$out/done"; exit 1; }
fi
# sides started together share MODEL_DIR: every file is replaced whole, never rewritten
put() { cp "$1" "$2.$$" && mv -f "$2.$$" "$2"; }
put "${MODEL_JSON:-granikv_engine/bench/models/llama-3.1-8b.json}" "$MODEL_DIR/config.json"
put deploy/models/tiny-llama/tokenizer_config.json "$MODEL_DIR/tokenizer_config.json"
put deploy/models/tiny-llama/special_tokens_map.json "$MODEL_DIR/special_tokens_map.json"
"$PY" -m granikv_engine.bench.word_tokenizer --out "$MODEL_DIR" \
  --vocab-size "$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' \
                 "$MODEL_DIR/config.json")" || exit 1
STREAM_INTERVAL=${STREAM_INTERVAL:-1}

DEFAULT_VLLM_ARGS="--load-format dummy --dtype bfloat16 --max-model-len 17408
  --enable-prefix-caching --gpu-memory-utilization ${GPU_MEM:-0.9} --max-num-seqs 256 --async-scheduling
  --kernel-config {\"enable_flashinfer_autotune\":false} --renderer-num-workers 8
  --stream-interval $STREAM_INTERVAL"
KV_BYTES=$(python3 -c "print(int(float('${KV_GIB:-0}') * 2**30))")
[ "$KV_BYTES" != 0 ] && DEFAULT_VLLM_ARGS="$DEFAULT_VLLM_ARGS --kv-cache-memory-bytes $KV_BYTES"
read -r -a VLLM_ARGS <<<"$(echo ${ENGINE_ARGS:-$DEFAULT_VLLM_ARGS})"
VLLM_ARGS+=(--served-model-name llama-8b --host 127.0.0.1 --port "$PORT"
  --disable-uvicorn-access-log)
KEYS=""
case $side in
stock)
  setsid "$PY" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" "${VLLM_ARGS[@]}" \
    >"$out/server-stock.log" 2>&1 &
  ;;
granikv)
  setsid "$PY" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" "${VLLM_ARGS[@]}" \
    --additional-config "{\"granikv\": {\"enabled\": true, \"hot_slots\": ${HOT_SLOTS:-100000}$(
      [ "${IMPLICIT:-0}" = 1 ] && echo ', "implicit_hot": true, "implicit_fraction": 1.0')}}" \
    >"$out/server-granikv.log" 2>&1 &
  ;;
platform)
  KEYS=$out/api-keys
  "$PY" -m granikv_platform.cli keys "$KEYS" team0 team1 team2 team3 team4 team5 team6 \
    team7 >/dev/null
  sed -e "s#MODEL_DIR#$MODEL_DIR#" -e "s#KEYS_FILE#$KEYS#" \
      -e "s#STREAM_BATCH_MS#${STREAM_BATCH_MS:-0}#" \
      -e "s#port: 8100#port: $PORT#" \
      -e "s#gpu_memory_utilization: 0.9#gpu_memory_utilization: ${GPU_MEM:-0.9}#" \
      -e "s#hot_slots: 100000#hot_slots: ${HOT_SLOTS:-100000}#" \
      -e "s#renderer_num_workers: 8#renderer_num_workers: 8\n          stream_interval: $STREAM_INTERVAL$( [ "$KV_BYTES" != 0 ] &&
          echo "\n          kv_cache_memory_bytes: $KV_BYTES")#" \
      "${PLATFORM_CONFIG:-granikv_engine/bench/online_configs/platform-gpu.yaml}" \
      >"$out/platform.yaml"
  ha=0; [ "${FRONT:-proxy}" = haproxy ] && ha=1
  RAY_USAGE_STATS_ENABLED=0 RAY_SERVE_ENABLE_HA_PROXY=$ha \
  RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=granikv_platform.front:proxy_middlewares \
    setsid "$SERVE" run "$out/platform.yaml" >"$out/server-platform.log" 2>&1 &
  ;;
*) echo "side: stock, granikv or platform" >&2; exit 2 ;;
esac
pid=$!
stop() {
  kill -TERM -- -"$pid" 2>/dev/null; sleep 5; kill -KILL -- -"$pid" 2>/dev/null
  touch "$out/done"
}
trap stop EXIT
key() { [ -n "$KEYS" ] && sed -n "s/^$1: //p" "$KEYS"; }
answers() {  # PATH [KEY]: the server answers 200 there
  "$PY" -c 'import sys, urllib.request as u
r = u.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
try:
    sys.exit(0 if u.urlopen(r, timeout=5).status == 200 else 1)
except Exception:
    sys.exit(1)' "$URL$1" "${2:-}"
}
replica_up() {  # the platform: a replica has reported
  "$PY" -c 'import json, sys, urllib.request as u
r = u.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
try:
    sys.exit(0 if json.load(u.urlopen(r, timeout=5)).get("replicas") else 1)
except Exception:
    sys.exit(1)' "$URL/v1/granikv/stats" "$(key @admin)"
}
up() { if [ "$side" = platform ]; then replica_up; else answers /v1/models; fi; }
t0=$(date +%s)
until up; do
  if ! kill -0 "$pid" 2>/dev/null || [ $(( $(date +%s) - t0 )) -gt "${START_TIMEOUT:-600}" ]; then
    echo "== $side server did not come up"; tail -40 "$out"/server-"$side".log; exit 1
  fi
  sleep 2
done
echo "== $side server up in $(( $(date +%s) - t0 )) s"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
args=(--base-url "$URL" --side "$side" --tokenizer "$MODEL_DIR" --model llama-8b --out "$out"
      ${KEYS:+--api-keys-file "$KEYS"} --procs "${PROCS:-4}" --scale "${SCALE:-1}"
      --stream-interval "$STREAM_INTERVAL" --gpu "${GPU_NAME:-none}"
      $( [ "$side" = platform ] && echo --front "${FRONT:-proxy}")
      $( [ "${WORDS_ONLY:-0}" = 1 ] && echo --words-only) ${TIME_LIMIT:+--time-limit "$TIME_LIMIT"})
if [ -n "${GO_FILE:-}" ]; then  # started together with other sides: measure when told
  touch "$out/up"
  until [ -e "$GO_FILE" ]; do sleep 1; done
fi
profiler=""
n=0
for spec in $workloads; do
  w=${spec%@*}
  n=$((n + 1))
  client=()
  if [ "$spec" != "$w" ]; then  # sent as another side sends it, labelled by its place
    client=(--side "${spec#*@}" --label "$n-${spec#*@}")
  elif [ "$(wc -w <<<"$workloads")" -gt 1 ] && grep -q "@" <<<"$workloads"; then
    client=(--label "$n-$side")
  fi
  # after the first run, other agent messages: none of them is in the prefix cache yet
  [ ${#client[@]} -gt 0 ] && [ "$n" -gt 1 ] && client+=(--salt "$n")
  if [ "$w" = "${PROFILE_WORKLOAD:-}" ] && command -v py-spy >/dev/null; then
    # sample every process of the server (the engine core, Ray's workers) for
    # PROFILE_S seconds, PROFILE_AFTER seconds into the workload, without pausing them
    (sleep "${PROFILE_AFTER:-8}"; py-spy record --nonblocking --subprocesses -r 50 \
       -d "${PROFILE_S:-10}" -f raw -p "$pid" -o "$out/profile-$side-$w.txt" \
       >"$out/profile-$side.log" 2>&1) &
    profiler=$!
  fi
  "$PY" -m granikv_engine.bench.online "${args[@]}" "${client[@]}" --workload "$w" \
    ${RATE:+--rate "$RATE"}
done
[ -n "${profiler:-}" ] && wait "$profiler"
if [ -n "${OPEN_RATE:-}" ]; then  # and W1-online in open loop, Poisson arrivals
  "$PY" -m granikv_engine.bench.online "${args[@]}" --workload W1-online --rate "$OPEN_RATE"
fi
if [ "$side" = platform ] && [ -z "${NO_TEAM_RUN:-}" ]; then
  "$PY" -m granikv_engine.bench.online_team --base-url "$URL" --api-keys-file "$KEYS" \
    --tokenizer "$MODEL_DIR" --agents 32 --out "$out" --timeout "${TEAM_TIMEOUT:-600}" \
    --context-tokens "$(python3 -c "print(max(64, int(12288 * ${SCALE:-1})))")"
  "$PY" -c 'import sys, urllib.request as u
r = u.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
sys.stdout.write(u.urlopen(r, timeout=30).read().decode())' "$URL/v1/granikv/stats" \
    "$(key @admin)" >"$out/platform-stats.json"
fi
