#!/usr/bin/env bash
# Start several sides of the online benchmark together on one GPU (each with GPU_MEM of
# it), then measure them one after another, so that no two measurements overlap:
#   bash granikv_engine/bench/online_together.sh OUT "stock platform" [WORKLOADS]
# Each side runs bench/online_gpu.sh into OUT/SIDE on its own port (8100, 8200, ...);
# the environment reaches every side (GPU_MEM defaults to 0.9 divided among them).
set -uo pipefail
out=$1
sides=$2
workloads=${3:-W1-online}
n=$(wc -w <<<"$sides")
export GPU_MEM=${GPU_MEM:-$(python3 -c "print(round(0.9 / $n, 2))")}
mkdir -p "$out"
k=0
for side in $sides; do
  k=$((k + 1))
  GO_FILE="$out/go-$side" PORT=$((8000 + 100 * k)) \
    bash granikv_engine/bench/online_gpu.sh "$side" "$out/$side" "$workloads" \
    >"$out/$side.txt" 2>&1 &
done
for side in $sides; do  # all up (or one failed)
  until [ -e "$out/$side/up" ] || [ -e "$out/$side/done" ]; do sleep 2; done
  echo "== $side up"
done
for side in $sides; do
  touch "$out/go-$side"
  until [ -e "$out/$side/done" ]; do sleep 2; done
  grep "^==" "$out/$side.txt"
done
wait
