#!/usr/bin/env bash
# The online benchmark's sides at vLLM's stream intervals, each alone on the GPU, one after
# the other (bench/online_gpu.sh with the whole GPU each). From the repository root, with
# vLLM, Ray Serve and the project installed:
#   OUT=DIR bash granikv_engine/bench/runs/online_intervals.sh \
#       "stock@1 granikv@1 platform@1 platform-haproxy@1 granikv@16 platform-haproxy@16"
# SIDE@N: bench/online_gpu.sh SIDE at STREAM_INTERVAL=N into OUT/SIDE-siN; "platform" is the
# platform behind Serve's Python proxy, "platform-haproxy" behind its HAProxy (FRONT).
# Each side runs WORKLOADS ("W1-online W3-online", closed loop), then, except stock, W1-online
# in open loop at OPEN_RATE requests/s (10; empty: none); each workload cut at TIME_LIMIT
# seconds (120). The platform's 32-agent team run is made by the side named in TEAM_SIDE
# (platform-haproxy@1; empty: none). After each side every server process is stopped (Ray's
# cluster too: RAY, the `ray` command) and, when TAR is set, OUT is packed into TAR, so a run
# cut short still leaves what it measured.
# then: python -m granikv_engine.bench.online_report --runs OUT ... (docs/benchmarks/online.md).
set -uo pipefail
OUT=${OUT:?set OUT}
specs=${1:?"SIDE@N ..."}
workloads=${WORKLOADS:-W1-online W3-online}
export TIME_LIMIT=${TIME_LIMIT:-120} TEAM_TIMEOUT=${TEAM_TIMEOUT:-240}
team_side=${TEAM_SIDE-platform-haproxy@1}
mkdir -p "$OUT"
t0=$(date +%s)
for spec in $specs; do
  name=${spec%@*}
  interval=${spec#*@}
  side=$name front=proxy
  [ "$name" = platform-haproxy ] && side=platform front=haproxy
  open=${OPEN_RATE-10}; [ "$side" = stock ] && open=""
  no_team=1; [ "$spec" = "$team_side" ] && no_team=""
  echo "== $spec: start at $(( $(date +%s) - t0 )) s"
  STREAM_INTERVAL=$interval FRONT=$front OPEN_RATE=$open NO_TEAM_RUN=$no_team \
    bash granikv_engine/bench/online_gpu.sh "$side" "$OUT/$name-si$interval" "$workloads" \
    >"$OUT/$name-si$interval.txt" 2>&1
  grep "^==" "$OUT/$name-si$interval.txt"
  # nothing of this side may hold the GPU when the next one starts
  "${RAY:-ray}" stop --force >/dev/null 2>&1
  pkill -f vllm.entrypoints.openai.api_server
  sleep 3
  nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null | sed 's/^/== GPU memory in use: /'
  if [ "$side" = platform ] && [ -d /tmp/ray/session_latest/logs ]; then
    # the replicas' own logs: where a platform side's failure shows
    mkdir -p "$OUT/$name-si$interval/ray-logs"
    for f in /tmp/ray/session_latest/logs/serve/*.log /tmp/ray/session_latest/logs/worker-*.err; do
      [ -s "$f" ] && tail -c 300000 "$f" >"$OUT/$name-si$interval/ray-logs/${f##*/}"
    done
  fi
  [ -n "${TAR:-}" ] && tar czf "$TAR" -C "$OUT" .
  echo "== $spec: done at $(( $(date +%s) - t0 )) s"
done
