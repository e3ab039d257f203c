#!/usr/bin/env bash
# Planner speed: Google Benchmark of the full search on 1 and 2 threads, then the CLI doing the
# same searches under /usr/bin/time for wall time and peak memory. Figures go to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target plan_search_bench moeplan
build/tools/bench/plan_search_bench --benchmark_min_time=1
run() {
  local label=$1; shift
  /usr/bin/time -f "$label: %e s wall, %M KB peak" build/tools/moeplan/moeplan plan "$@" --threads 2 >/dev/null
}
run "DeepSeek-V3 on 2048 H800" --model models/deepseek-v3.json --cluster topologies/h800-2048.json \
  --global-batch 15360 --seq-len 4096
run "Internal-352B on 1440 H800" --model models/megascale-internal-352b.json \
  --cluster topologies/megascale-h800-1440.json --global-batch 720 --seq-len 8192
