#!/usr/bin/env bash
# Issue 6: the what-if report renders in headless Chromium (charts painted, no console message),
# and so do the reproduce reports; the checker itself rejects a page that logs an error.
#   report_renders_test.sh MOEPLAN SOURCE_DIR
set -euo pipefail
moeplan=$1
cd "$2"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The acceptance sweep: sequence length 4K..256K for Mixtral-8x7B on 2 x 8 A800.
"$moeplan" whatif --model models/mixtral-8x7b.json --cluster topologies/monta-2x8-a800.json \
  --search --global-batch 16 --sweep seq-len=4096,16384,65536,262144 --out "$out/whatif" >/dev/null
tools/check_report.sh "$out/whatif/report.html" 6  # five line charts and the stacked breakdown

"$moeplan" reproduce monta --out "$out/reproduce" >/dev/null
tools/check_report.sh "$out/reproduce/monta.html" 0

printf '<html><body><script>console.error("broken")</script></body></html>' >"$out/bad.html"
if tools/check_report.sh "$out/bad.html" 0 2>/dev/null; then
  echo "check_report accepted a page that logs a console error" >&2
  exit 1
fi
