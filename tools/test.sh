#!/usr/bin/env bash
# Builds moeplan and runs every test: the normal build, the same tests under AddressSanitizer +
# UndefinedBehaviorSanitizer, 80 random models through plan and simulate on the sanitized
# binary, and a short fuzz pass over the loaders (FUZZ_SECONDS each, 10 by default; 0 skips it).
# Installs missing Debian packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
jobs=$(nproc)

echo "== build and test =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== build and test under ASan + UBSan =="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMOEPLAN_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"

echo "== random models through plan and simulate, under ASan + UBSan =="
# Crashes, sanitizer reports, errors of more than one line, nan: not the simulator-vs-planner
# gap (--gap 1000), which `tools/hunt_random_plans.py` reports on its own. The sanitizers exit
# with codes of their own, as 1 is an input error.
for seed in 1 2; do
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:exitcode=86 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87 \
    MOEPLAN=build-asan/tools/moeplan/moeplan python3 tools/hunt_random_plans.py "$seed" 40 --gap 1000
done

if [ "${FUZZ_SECONDS:-10}" != 0 ] && command -v clang++ >/dev/null; then
  echo "== fuzz the loaders =="
  tools/fuzz.sh "${FUZZ_SECONDS:-10}"
fi
