#!/usr/bin/env bash
# Planner and simulator speed: Google Benchmark of the full search on 1 and 2 threads and of
# simulated iterations, then the CLI doing the same under /usr/bin/time for wall time and peak
# memory. Figures go to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target plan_search_bench simulate_bench moeplan
build/tools/bench/plan_search_bench --benchmark_min_time=1
build/tools/bench/simulate_bench
run() {
  local label=$1; shift
  /usr/bin/time -f "$label: %e s wall, %M KB peak" build/tools/moeplan/moeplan plan "$@" --threads 2 >/dev/null
}
run "DeepSeek-V3 on 2048 H800" --model models/deepseek-v3.json --cluster topologies/h800-2048.json \
  --global-batch 15360 --seq-len 4096
run "Internal-352B on 1440 H800" --model models/megascale-internal-352b.json \
  --cluster topologies/megascale-h800-1440.json --global-batch 720 --seq-len 8192

# The simulator through the CLI: the planner's best plan for each, saved, then simulated.
simulate() {
  local label=$1 model=$2 cluster=$3 gbs=$4 seq=$5 plan
  plan=$(mktemp --suffix=.json)
  build/tools/moeplan/moeplan plan --model "$model" --cluster "$cluster" --global-batch "$gbs" \
    --seq-len "$seq" --threads 2 --save "$plan" >/dev/null
  /usr/bin/time -f "$label (simulate): %e s wall, %M KB peak" build/tools/moeplan/moeplan simulate \
    --model "$model" --cluster "$cluster" --plan "$plan" | tail -1
  rm -f "$plan"
}
simulate "Internal-352B on 1440 H800" models/megascale-internal-352b.json \
  topologies/megascale-h800-1440.json 720 8192
simulate "DeepSeek-V3 on 16384 H800" models/deepseek-v3.json topologies/h800-16384.json 15360 4096
