#!/bin/bash
# DeepSeek-V3 pre-training on 256 GB200 (racks of 32 GPUs in one NVLink domain), as Megatron-LM's
# discussion "A Guide to Reproduce DeepSeek-V3 Pre-training Performance on GB200"
# (docs/discussions/deepseek-v3-gb200-optimization) runs it at 970 TFLOP/s per GPU: its
# parallelism, precision, recompute, CUDA graph, dispatcher and optimizer flags, the model flags
# it checks, and a few of its data and logging flags, arranged here as a plain srun launch.
# No --mtp-num-layers: the run trains no multi-token prediction module.
MODEL=(
  --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128
  --kv-channels 128 --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512
  --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --qk-layernorm
  --num-experts 256 --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048
  --moe-layer-freq "([0]*3+[1]*58)" --moe-router-topk 8 --moe-router-num-groups 8
  --moe-router-group-topk 4 --moe-router-score-function sigmoid --moe-router-enable-expert-bias
  --make-vocab-size-divisible-by 3232 --untie-embeddings-and-output-weights --swiglu
  --normalization RMSNorm --position-embedding-type rope --max-position-embeddings 4096
)
PARALLEL=(
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 8
  --expert-model-parallel-size 32 --expert-tensor-parallel-size 1 --context-parallel-size 1
  --pipeline-model-parallel-layout "Et|(tt|)*30L" --sequence-parallel
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
  --micro-batch-size 1 --global-batch-size 2048 --seq-length 4096
)
PERFORMANCE=(
  --bf16 --fp8-recipe mxfp8 --fp8-format e4m3 --fp8-param-gather
  --reuse-grad-buf-for-mxfp8-param-ag
  --use-precision-aware-optimizer --main-grads-dtype fp32 --main-params-dtype fp32
  --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16
  --recompute-granularity selective --recompute-modules moe_act mlp
  --cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router moe_preprocess
  --te-rng-tracker
  --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep
  --moe-hybridep-num-sms 32 --moe-router-force-load-balancing
  --moe-grouped-gemm --moe-permute-fusion --moe-router-fusion
  --cross-entropy-loss-fusion --cross-entropy-fusion-impl te
)
srun /path/to/bindpcie /path/to/megatron-lm/pretrain_gpt.py "${MODEL[@]}" "${PARALLEL[@]}" \
  "${PERFORMANCE[@]}" --manual-gc --manual-gc-interval 10 --lr 3.9e-6 --min-lr 3.9e-7 \
  --log-throughput --log-interval 1
