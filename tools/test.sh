#!/usr/bin/env bash
# Builds moeplan and runs every test: the normal build, the same tests under AddressSanitizer +
# UndefinedBehaviorSanitizer, and a short fuzz pass over the loaders (FUZZ_SECONDS each, 10 by
# default; 0 skips it). Installs missing Debian packages first.
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

if [ "${FUZZ_SECONDS:-10}" != 0 ] && command -v clang++ >/dev/null; then
  echo "== fuzz the loaders =="
  tools/fuzz.sh "${FUZZ_SECONDS:-10}"
fi
