#!/usr/bin/env bash
# The planner's time model on a MoE model against Megatron-Core's published runs: Qwen3-235B-A22B
# (models/hf/qwen3-235b-a22b.config.json) on 256 H100 (topologies/h100-256.json: 32 nodes,
# NVLink 4, InfiniBand 8 x 50 GB/s), sequence 4,096, global batch 2,048, BF16, from the
# Megatron-MoE-ModelZoo table (github.com/yanring/Megatron-MoE-ModelZoo,
# best_practice/Qwen3/readme.md): step time and "Per GPU TF" as Megatron's log prints them.
# Mapping: DeepEP's flex dispatcher is priced as all-to-all; "norm, act" recompute (layer norms
# and the activation, a few percent of a layer's FLOPs) as none; "1f1b overlap" (the EP
# all-to-all hidden behind another micro-batch's compute) as --overlap on; FSDP as ZeRO-3. The
# virtual stages (vpp 3-4) do not split Qwen3's 94 layers evenly (the runs used Megatron's
# flexible pipeline layout), so we price vpp = 1 with the planner's uneven end stages, which
# overstates the bubble by a few percent.
set -euo pipefail
cd "$(dirname "$0")/.."
moeplan=${MOEPLAN:-build/tools/moeplan/moeplan}
[ -x "$moeplan" ] || { echo "error: build moeplan first (tools/quickstart.sh)"; exit 1; }
printf "%-8s %-26s %-34s %8s %9s %8s %9s %8s\n" code layout switches paper_s predicted paper_TF predicted error
while read -r code layout flags paper_s paper_tf; do
  read -r predicted_s predicted_tf < <("$moeplan" plan --model models/hf/qwen3-235b-a22b.config.json \
    --cluster topologies/h100-256.json --global-batch 2048 --seq-len 4096 \
    --parallel "$layout,cp=1" --top 1 --json ${flags//,/ } 2>/dev/null |
    python3 -c 'import json,sys; p=json.load(sys.stdin)["plans"][0]["predicted"]; print(p["iteration_s"], p["megatron_log"]["throughput_per_gpu_tflops"])')
  python3 -c "print('%-8s %-26s %-34s %8s %9.1f %8s %9.0f %+7.1f%%' % ('$code', '$layout', '$flags', $paper_s, $predicted_s, $paper_tf, $predicted_tf, 100 * ($predicted_tf / $paper_tf - 1)))"
done <<'ROWS'
moe_dev tp=2,pp=8,ep=32,mbs=1 --recompute,none,--overlap,off,--dispatcher,alltoall 19.7 245
moe_dev tp=2,pp=8,ep=32,mbs=1 --recompute,none,--overlap,on,--dispatcher,alltoall 17.6 276
main tp=2,pp=1,ep=8,mbs=4 --recompute,full,--zero,3,--dispatcher,alltoall 17.6 276
main tp=2,pp=32,ep=8,mbs=1 --recompute,none,--overlap,off,--dispatcher,alltoall 24.2 200
main tp=4,pp=8,ep=8,mbs=1 --recompute,none,--overlap,off,--dispatcher,alltoall 29.0 167
ROWS
