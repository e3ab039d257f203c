#!/usr/bin/env bash
# Installs what is missing, builds moeplan, and prints a plan-style summary of a default model
# on a default cluster (Mixtral-8x7B on one 8xH100 node; override with MODEL=... CLUSTER=...
# PARALLEL=...).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target moeplan
model=${MODEL:-models/mixtral-8x7b.json}
cluster=${CLUSTER:-topologies/h100-sxm-8.json}
parallel=${PARALLEL:-tp=1,ep=8,dp=8,pp=1,mbs=1}
moeplan=build/tools/moeplan/moeplan
echo
echo "== model ==";   $moeplan info --model "$model"
echo "== cluster =="; $moeplan topo --cluster "$cluster"
echo "== memory per GPU, layout $parallel =="
$moeplan memory --model "$model" --cluster "$cluster" --parallel "$parallel" --recompute selective
echo "== communication (MegaScale-MoE) =="
$moeplan comm --model "$model" --cluster "$cluster" --parallel "$parallel"
