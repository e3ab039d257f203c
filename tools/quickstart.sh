#!/usr/bin/env bash
# Installs what is missing, builds moeplan, and plans a default model on a default cluster:
# DeepSeekMoE-16B on one 8xH100 node, global batch 256 of 4,096-token sequences.
# Override with MODEL=... CLUSTER=... GBS=... SEQ=... (e.g. MODEL=models/mixtral-8x7b.json shows
# that Mixtral-8x7B fits one node only with its optimizer on the CPU, or APTMoE's offload).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target moeplan
model=${MODEL:-models/deepseekmoe-16b.json}
cluster=${CLUSTER:-topologies/h100-sxm-8.json}
moeplan=build/tools/moeplan/moeplan
echo
echo "== model =="
$moeplan info --model "$model"
echo "== plan =="
plan=$(mktemp --suffix=.json)
trap 'rm -f "$plan"' EXIT
$moeplan plan --model "$model" --cluster "$cluster" --global-batch "${GBS:-256}" --seq-len "${SEQ:-4096}" --top 5 --explain --save "$plan"
echo "== the best plan, simulated operator by operator =="
$moeplan simulate --model "$model" --cluster "$cluster" --plan "$plan"
