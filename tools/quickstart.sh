#!/usr/bin/env bash
# Installs what is missing, builds moeplan, and prints a plan-style summary of a default model
# on a default cluster: DeepSeekMoE-16B on one 8xH100 node, EP = 8 with selective recompute.
# Override with MODEL=... CLUSTER=... PARALLEL=... RECOMPUTE=...
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target moeplan
model=${MODEL:-models/deepseekmoe-16b.json}
cluster=${CLUSTER:-topologies/h100-sxm-8.json}
parallel=${PARALLEL:-tp=1,ep=8,dp=8,pp=1,mbs=1}
moeplan=build/tools/moeplan/moeplan
echo
echo "== model ==";   $moeplan info --model "$model"
echo "== cluster =="; $moeplan topo --cluster "$cluster"
echo "== memory per GPU, layout $parallel =="
$moeplan memory --model "$model" --cluster "$cluster" --parallel "$parallel" --recompute "${RECOMPUTE:-selective}"
echo "== communication (MegaScale-MoE) =="
$moeplan comm --model "$model" --cluster "$cluster" --parallel "$parallel"
