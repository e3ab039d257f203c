#!/usr/bin/env bash
# The planner's time model on dense GPT models against Megatron-LM's published runs
# (Narayanan et al. 2021, arXiv 2104.04473, Table 1: A100 80GB on Selene, sequence 2048,
# full activation recomputation, 2021 kernels without TP overlap, attention unfused as
# FlashAttention came in 2022: --attention-kernel unfused; the loss is Megatron's own, its
# FP32 softmax kept, as Transformer Engine's came later: --cross-entropy native). The paper
# counts hardware FLOPs including the recomputed forward (4 passes); moeplan's MFU counts 3, so
# the predicted per-GPU rate is MFU x 4/3 x 312 TFLOP/s.
set -euo pipefail
cd "$(dirname "$0")/.."
moeplan=${MOEPLAN:-build/tools/moeplan/moeplan}
[ -x "$moeplan" ] || { echo "error: build moeplan first (tools/quickstart.sh)"; exit 1; }
printf "%-9s %6s %6s %-11s %10s %10s %8s\n" model GPUs batch layout paper_TF predicted error
while read -r model gpus batch layout paper; do
  predicted=$("$moeplan" plan --model "models/$model.json" --cluster topologies/selene-a100-3072.json \
    --gpus "$gpus" --global-batch "$batch" --seq-len 2048 --parallel "$layout,cp=1,vpp=1,mbs=1" \
    --recompute full --overlap off --attention tp --attention-kernel unfused --cross-entropy native --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["plans"][0]["predicted"]["mfu"] * 4 / 3 * 312)')
  python3 -c "p=$predicted; print('%-9s %6s %6s %-11s %10s %10.0f %+7.1f%%' % ('$model', $gpus, $batch, '$layout', $paper, p, 100 * (p / $paper - 1)))"
done <<'ROWS'
gpt-1.7b 32 512 tp=1,pp=1 137
gpt-18b 256 1024 tp=8,pp=1 135
gpt-39b 512 1536 tp=8,pp=2 138
gpt-145b 1536 2304 tp=8,pp=8 148
gpt-1t 3072 3072 tp=8,pp=64 163
ROWS
