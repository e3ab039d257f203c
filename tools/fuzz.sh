#!/usr/bin/env bash
# A short libFuzzer pass over every loader (and the Megatron-LM launch reader). Usage: tools/fuzz.sh [seconds per target, default 20]
# Builds with clang, ASan and UBSan in build-fuzz/, seeds from the shipped files; exits non-zero
# on the first crash (libFuzzer leaves the reproducer in build-fuzz/crash-*).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
command -v clang++ >/dev/null || { echo "error: clang++ is needed for libFuzzer (apt-get install clang)"; exit 1; }
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMOEPLAN_FUZZ=ON -DMOEPLAN_SANITIZE=ON -DMOEPLAN_TESTS=OFF >/dev/null
cmake --build build-fuzz --target fuzz_model_loader fuzz_cluster_loader fuzz_calibration_loader fuzz_popularity_loader \
  fuzz_megatron_args_loader
run() {
  local name=$1; shift
  local corpus=build-fuzz/corpus-$name
  mkdir -p "$corpus"
  cp "$@" "$corpus"/
  local log=build-fuzz/fuzz-$name.log
  echo "fuzzing the $name loader for ${seconds}s"
  if ! (cd build-fuzz && ./tools/fuzz/fuzz_${name}_loader -max_total_time="$seconds" -max_len=16384 \
          -print_final_stats=1 "corpus-$name" >"fuzz-$name.log" 2>&1); then
    tail -30 "$log"
    echo "error: the $name loader failed under the fuzzer; reproducer and log in build-fuzz/"
    exit 1
  fi
  grep -E "stat::number_of_executed_units" "$log"
}
run model models/*.json models/hf/*.json tests/data/model-*.json tests/data/hf-*.json
run cluster topologies/*.json tests/data/cluster-*.json
run calibration calibrate/data/*.json tests/data/curves-*.json
run popularity tests/data/popularity-*.json
run megatron_args tests/data/megatron-*
echo "fuzz: all loaders survived ${seconds}s each"
