#!/usr/bin/env bash
# Every GPU measurement moeplan has, in one call on a lent GPU machine (or any GPU box):
#   tools/gpu_session.sh BUILD OUT [PARTS]
# BUILD: a build of moeplan and calibrate_tests (for carrying: -DMOEPLAN_PORTABLE=ON);
# OUT: where logs, the calibration file and the execute results go;
# PARTS: comma-separated, in order, of
#   devices    the GPU, driver, CUDA and NCCL (stops the script when there is no GPU)
#   tests      the calibrate tests, GPU ones included
#   calibrate  GEMM, copy, PCIe and CPU curves -> OUT/h100.json (quick-calibrate: --quick);
#              curves already in OUT/h100.json (an interrupted call's) are kept, not re-measured
#   execute    a Mixtral-8x7B MoE layer at 1, 2, 4, 8 chunks, predicted vs measured
#   affinity   APTMoE's split vs loading every expert at 64 and 512 tokens, predicted vs
#              measured, after calibrating at MoE-S-8's shape (OUT/aptmoe.json)
#   gemm-dsv3  every GEMM type (block-scaled FP8 too) at DeepSeek-V3's shapes
#              (OUT/gemm-deepseek-v3.json)
#   host       what PyTorch's CPU spends issuing a layer's parts (tools/host_probe.py;
#              OUT/host-probe.json; needs python3 with PyTorch)
#   attention  fused causal attention's share of the BF16 peak, cuDNN and FlashAttention-2
#              (tools/attention_probe.py; OUT/attention-probe.json, and OUT/attention.json as a
#              calibration file for plan --calibration; PyTorch)
#   sustained  the GEMM curves again with each shape run back to back SUSTAIN seconds (default
#              10) first, the other curves copied from the calibration: OUT/h100-sustained.json;
#              the SM clock, power and temperature every 500 ms meanwhile in OUT/clocks.csv
#   execute-sustained
#              execute as above against OUT/h100-sustained.json (OUT/execute-sustained.json)
#   offload    copies to and from pinned host memory beside a GEMM and an HBM-bound add
#              (tools/offload_probe.py; OUT/offload-probe.json; PyTorch)
#   allocator  one retry of PyTorch's caching allocator (tools/allocator_probe.py;
#              OUT/allocator-probe.json; PyTorch)
#   power      GEMMs filling 25-100 % of the time, the rest idle or an HBM-bound add: their
#              rate, the SM clock and the power (tools/power_probe.py; OUT/power-probe.json;
#              PyTorch, nvidia-ml-py)
# (default: the first five). The calibration is used by the later parts when it exists, in OUT or
# as calibrate/data/h100.json. Each part's output is in OUT/PART.log; the summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tools/gpu_session.sh BUILD OUT [PARTS]}
out=${2:?usage: tools/gpu_session.sh BUILD OUT [PARTS]}
parts=${3:-devices,tests,calibrate,execute,affinity}
moeplan=$build/tools/moeplan/moeplan
cluster=topologies/h100-1.json
aptmoe=models/aptmoe-moe-s-8.json
mkdir -p "$out"
: > "$out/summary.txt"

# Runs one part, keeps its log, prints its tail and a summary line; returns its exit code.
part() {
  local name=$1
  shift
  local start=$SECONDS
  echo "== $name"
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  tail -n 30 "$out/$name.log"
  echo "$name: exit $rc, $((SECONDS - start)) s" | tee -a "$out/summary.txt"
  return $rc
}

# The calibration later parts use: this call's, else the committed one; nothing when neither is.
calibration_file() {
  if [ -f "$out/h100.json" ]; then
    echo "$out/h100.json"
  elif [ -f calibrate/data/h100.json ]; then
    echo calibrate/data/h100.json
  fi
}
calibration() {
  local file
  file=$(calibration_file)
  [ -n "$file" ] && echo "--calibration $file"
}

# The Mixtral-8x7B plan at EP = 2 whose MoE layer `execute` runs.
mixtral_plan() {
  part plan "$moeplan" plan --model models/mixtral-8x7b.json \
    --cluster topologies/megascale-h800-240.json --global-batch 256 --gpus 32 \
    --parallel ep=2 --save "$out/plan.json"
}

status=0
IFS=, read -ra wanted <<< "$parts"
for p in "${wanted[@]}"; do
  case $p in
    devices)
      part devices "$moeplan" devices || { cat "$out/summary.txt"; exit 1; } ;;
    tests)
      part tests "$build/tests/calibrate_tests" || status=1 ;;
    calibrate | quick-calibrate)
      quick=()
      [ "$p" = quick-calibrate ] && quick=(--quick)
      part "$p" "$moeplan" calibrate --cluster "$cluster" --model models/mixtral-8x7b.json \
        --out "$out/h100.json" --resume "${quick[@]}" || status=1 ;;
    execute)
      mixtral_plan || status=1
      # shellcheck disable=SC2046
      part execute "$moeplan" execute --model models/mixtral-8x7b.json --cluster "$cluster" \
        --plan "$out/plan.json" $(calibration) --json "$out/execute.json" || status=1 ;;
    affinity)
      # The CPU expert curve and the GEMMs at MoE-S-8's own shape: a curve measured on a wider
      # expert holds its smallest point's time for the few-token calls below it.
      part affinity-calibrate "$moeplan" calibrate --only gemm,pcie,cpu --cluster "$cluster" \
        --model "$aptmoe" --out "$out/aptmoe.json" --resume || status=1
      for tokens in 64 512; do
        part "affinity-$tokens" "$moeplan" affinity --model "$aptmoe" --cluster "$cluster" \
          --G 0.3 --tokens "$tokens" --dtype bf16 --execute --calibration "$out/aptmoe.json" \
          || status=1
      done ;;
    gemm-dsv3)
      part gemm-dsv3 "$moeplan" calibrate --only gemm --cluster "$cluster" \
        --model models/hf/deepseek-v3.config.json --out "$out/gemm-deepseek-v3.json" --resume \
        || status=1 ;;
    sustained)
      python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
d["curves"] = {k: v for k, v in d["curves"].items() if not k.startswith("gemm")}
json.dump(d, open(sys.argv[2], "w"), indent=2)' "$(calibration_file)" "$out/h100-sustained.json"
      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv \
        -lms 500 > "$out/clocks.csv" 2>&1 &
      smi=$!
      part sustained "$moeplan" calibrate --only gemm --sustain "${SUSTAIN:-10}" \
        --cluster "$cluster" --model models/mixtral-8x7b.json --out "$out/h100-sustained.json" \
        --resume || status=1
      kill $smi ;;
    execute-sustained)
      [ -f "$out/plan.json" ] || mixtral_plan || status=1
      part execute-sustained "$moeplan" execute --model models/mixtral-8x7b.json \
        --cluster "$cluster" --plan "$out/plan.json" --calibration "$out/h100-sustained.json" \
        --json "$out/execute-sustained.json" || status=1 ;;
    offload)
      part offload python3 tools/offload_probe.py "$out/offload-probe.json" || status=1 ;;
    allocator)
      part allocator python3 tools/allocator_probe.py "$out/allocator-probe.json" || status=1 ;;
    power)
      part power python3 tools/power_probe.py "$out/power-probe.json" || status=1 ;;
    host)
      part host python3 tools/host_probe.py "$out/host-probe.json" || status=1 ;;
    attention)
      part attention python3 tools/attention_probe.py "$out/attention-probe.json" \
        --calibration "$out/attention.json" || status=1 ;;
    *)
      echo "unknown part '$p' (devices, tests, calibrate, quick-calibrate, execute, affinity," \
        "gemm-dsv3, host, attention, sustained, execute-sustained, offload, allocator, power)" >&2
      exit 2 ;;
  esac
done
echo "== summary"
cat "$out/summary.txt"
exit $status
