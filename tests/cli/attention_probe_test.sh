#!/usr/bin/env bash
# tools/attention_probe.py --from turns the H200's measurements into a calibration file that
# `plan --calibration` reads, with no GPU or PyTorch; a malformed input is one line and exit 1,
# and writes nothing.
#   attention_probe_test.sh MOEPLAN SOURCE_DIR
set -uo pipefail
bin=$1
cd "$2"
command -v python3 > /dev/null || { echo "no python3"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

python3 tools/attention_probe.py --from calibrate/data/h200-attention.json \
  --calibration "$out/cal.json" || { echo "conversion failed"; exit 1; }
python3 - "$out/cal.json" << 'PY' || { echo "calibration file is not what was measured"; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "moeplan-calibration/1"
points = d["curves"]["attention_core"]["points"]
assert len(points) >= 8, len(points)
sizes = [p["size_flops"] for p in points]
assert sizes == sorted(set(sizes)), sizes
assert abs(points[-1]["efficiency"] - 0.48) < 0.01, points[-1]
assert abs(d["constants"]["attention_latent"] - 0.88) < 0.02, d["constants"]
PY
"$bin" plan --model models/mixtral-8x7b.json --cluster topologies/megascale-h800-240.json \
  --gpus 32 --global-batch 128 --top 1 --calibration "$out/cal.json" > "$out/plan.txt" 2>&1 \
  || { echo "plan did not take it: $(cat "$out/plan.txt")"; exit 1; }
grep -q "Best plan" "$out/plan.txt" || { echo "no plan: $(cat "$out/plan.txt")"; exit 1; }

echo '{"cases": 3}' > "$out/bad.json"
err=$(python3 tools/attention_probe.py --from "$out/bad.json" --calibration "$out/x.json" 2>&1)
rc=$?
[ $rc -eq 1 ] || { echo "malformed input: exit $rc, want 1"; exit 1; }
[ "$(wc -l <<< "$err")" -eq 1 ] || { echo "malformed input: more than one line: $err"; exit 1; }
grep -q "bad.json" <<< "$err" || { echo "the error does not name the file: $err"; exit 1; }
[ ! -e "$out/x.json" ] || { echo "malformed input wrote a file"; exit 1; }
echo "attention_probe.py --from: ok"
