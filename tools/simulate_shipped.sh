#!/usr/bin/env bash
# Issue 4's acceptance run: plan every shipped model on each reference cluster, save the best
# plan (GPU-resident or APTMoE offload) and simulate it. Prints one line per pair and fails if
# any saved plan does not simulate. Pairs where nothing fits (exit 3) or no layout divides
# (exit 1) are listed, not failures: the planner has said why.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=build/tools/moeplan/moeplan
[ -x "$bin" ] || { cmake -S . -B build -G Ninja >/dev/null && cmake --build build --target moeplan; }
plan=$(mktemp --suffix=.json)
trap 'rm -f "$plan"' EXIT
simulated=0 failed=0
for model in models/*.json models/hf/*.json; do
  for pair in "topologies/h100-sxm-8.json 256" "topologies/megascale-h800-240.json 240" \
              "topologies/aptmoe-4x-a800-40gb-c1g4.json 256" "topologies/gb200-nvl72-4x72.json 288"; do
    set -- $pair
    rm -f "$plan"
    if ! "$bin" plan --model "$model" --cluster "$1" --global-batch "$2" --seq-len 4096 \
        --save "$plan" >/dev/null 2>&1; then
      echo "no plan   $model on $1"
      continue
    fi
    if out=$("$bin" simulate --model "$model" --cluster "$1" --plan "$plan" --json 2>&1); then
      simulated=$((simulated + 1))
      diff=$(printf '%s' "$out" | python3 -c 'import json,sys; print("%+.1f %%" % (100*json.load(sys.stdin)["relative_difference"]))')
      echo "simulated $model on $1: simulator vs planner $diff"
    else
      failed=$((failed + 1))
      echo "FAILED    $model on $1: $out"
    fi
  done
done
echo "$simulated plans simulated, $failed failed"
[ "$failed" -eq 0 ]
