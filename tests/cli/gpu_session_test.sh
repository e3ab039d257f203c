#!/usr/bin/env bash
# tools/gpu_session.sh, the one call a lent GPU gets: without a GPU it stops at `devices` with
# one line saying so and exit 1; parts that need no GPU run and are summarised; an unknown part
# is refused with exit 2. With a GPU, `devices` passes.
#   gpu_session_test.sh BUILD SOURCE_DIR
set -uo pipefail
build=$1
cd "$2"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

log=$(tools/gpu_session.sh "$build" "$out" devices 2>&1)
rc=$?
if [ $rc -eq 0 ]; then
  grep -q "devices: exit 0" <<< "$log" || { echo "no summary line: $log"; exit 1; }
  exit 0  # a GPU is here: the rest is for a real session
fi
[ $rc -eq 1 ] || { echo "devices without a GPU: exit $rc, want 1"; exit 1; }
grep -q "error: no GPU" <<< "$log" || { echo "no 'no GPU' line: $log"; exit 1; }
grep -q "devices: exit 1" "$out/summary.txt" || { echo "no summary"; exit 1; }

# `tests` needs no GPU (its GPU tests skip); the summary records it.
tools/gpu_session.sh "$build" "$out" tests > /dev/null 2>&1 || { echo "tests part failed"; exit 1; }
grep -q "tests: exit 0" "$out/summary.txt" || { echo "no tests summary"; exit 1; }

tools/gpu_session.sh "$build" "$out" bogus > /dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || { echo "unknown part: exit $rc, want 2"; exit 1; }
echo "gpu_session.sh: ok"
