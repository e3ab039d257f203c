#!/usr/bin/env bash
# The planner's time model on MoE models against Megatron-Core's published runs on H100
# (NVLink 4, InfiniBand 8 x 50 GB/s a node):
#   Qwen3-235B-A22B (models/hf/qwen3-235b-a22b.config.json) on 256 H100
#     (topologies/h100-256.json), sequence 4,096, global batch 2,048, BF16: the
#     Megatron-MoE-ModelZoo table (github.com/yanring/Megatron-MoE-ModelZoo,
#     best_practice/Qwen3/readme.md), step time and "Per GPU TF" as Megatron's log prints them;
#   the same model's long-context runs (the readme's second table: sequence 16K-128K, TP 4, CP
#     1-8, EP 8, PP 8, global batch 256, DeepEP, no EP overlap, --recompute-modules layernorm
#     moe), forced balance as the readme gives it, TFLOP/s only;
#   DeepSeek-V3 (models/hf/deepseek-v3.config.json) on 1,024 H100 (topologies/h100-1024.json),
#     sequence 4,096, global batch 8,192, FP8 (--fp8-recipe blockwise, priced on the block-scaled
#     GEMM curve measured on a lent H200), TP 2, PP 8 (VPP 4 by Megatron-Bridge's H100 layout
#     Et|(tt|)*30mL), EP 64, DeepEP, EP overlap: 368 TFLOP/s and 1,412 tokens/s per GPU (the Megatron-Core MoE report's results
#     table; the layout and switches from the model zoo's best_practice/DeepSeekV3/run.sh, which
#     trains the MTP module, --mtp-num-layers 1, as the model file's one module prices it, and
#     recomputes mla_up_proj and mlp alone: its --recompute-modules replaces the config's; the
#     GB200 row below is priced with it too, which its recipe's card does not state);
#   Qwen3-235B-A22B on Blackwell racks, the model zoo's best_practice/qwen3 GB200 and GB300
#     tables: 256 GPUs as 4 racks of 64 (topologies/gb200-nvl72-4x64.json, gb300-...; the 128K
#     run on 128 of them), HybridEP priced as DeepEP, forced balance, CUDA graphs for attention
#     and the router, MXFP8 (--fp8-recipe mxfp8) priced on the per-tensor FP8 curve; the GB200
#     MXFP8 run also offloaded expert_fc1 and moe_act activations to the host
#     (--offload-modules expert_fc1 moe_act, priced over NVLink-C2C);
#   DeepSeek-V3 on 256 GB200 (the same racks), MXFP8, TP 1, PP 4 (VPP 4 by the recipe's layout
#     Et*4|(t*4|)*14tmL), EP 64, HybridEP, EP
#     overlap, --recompute-modules mla_up_proj, full-iteration CUDA graph, global batch 4,096:
#     12.94 s and 1,316 TFLOP/s per GPU (Megatron-Bridge's DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2,
#     as measured in its pull request 4226).
#   DeepSeek-V3 on 256 GB200 as Megatron-LM's DeepSeek-V3 GB200 guide ran it last
#     (docs/discussions/deepseek-v3-gb200-optimization; its launch is
#     tests/data/megatron-deepseek-v3-gb200-launch.sh): no MTP, MXFP8 with BF16 Adam moments,
#     TP 1, PP 8 (VPP 4 by Et|(tt|)*30L), EP 32 in racks of 32, HybridEP, no EP overlap,
#     --recompute-modules moe_act mlp, CUDA graphs of attention and the router, global batch
#     2,048: 970 TFLOP/s per GPU (the guide's table; "guide" below). The guide puts at least 10 %
#     more in the experts' host syncs, which a full-iteration graph would remove.
#   Qwen3-235B-A22B on 256 H800 (topologies/h800-2048.json), sequence 4,096, forced balance,
#     no CUDA graphs: the four runs of Pai-Megatron-Patch issue 658 (TP 1-2, PP 32, VPP 3, EP 8,
#     micro-batch 4 with full recompute at global batch 4,096, micro-batch 1 with
#     selective recompute at 2,048), step times only; the dispatcher as the Qwen3 example
#     script names it (alltoall).
# Host time (planner/host_time.h): the H100 and H800 runs captured no CUDA graphs; the Blackwell
# runs captured attention and the router (--cuda-graph attn), the DeepSeek-V3 GB200 run the whole
# iteration (--cuda-graph full). Its defaults are fitted to the micro-batch 1 rows here (main
# tp=2,pp=32 and pai tp=2 for the all-to-all dispatcher, main tp=4 for DeepEP); the others test it.
# Every run is Megatron-Core's with TP attention (sequence parallel where TP > 1): every row is
# priced with --megatron-only and --attention tp, which keep the search to that (it would otherwise price Ulysses attention or
# MegaScale-MoE's techniques where they are faster: up to 3 points on the long-context rows).
# Mapping: each run's dispatcher as it names it (DeepEP: --dispatcher deepep, a token sent once
# per destination node and rank; A2A: alltoall); "norm, act" recompute as none, the modules a
# run names as --recompute-modules; "1f1b overlap" (the EP all-to-all
# hidden behind another micro-batch's compute) as --overlap on; FSDP as ZeRO-3; routing
# balanced (the runs are dropless; Megatron's long-context table measures dropless at 0.80-0.92
# of forced balance). The DeepSeek-V3 runs give their flexible pipeline layouts as Megatron
# takes them (layout= in --parallel). Every other run is priced at the VPP it published (the
# model zoo's tables and command lines: 4, 3 for the PP 32 runs, 1, 6 and 12 on Blackwell; the
# GB200 MXFP8 run's VPP 6 fits 186 GB only with the activation offload it used: 162.5 GB with
# it, 225.6 GB without, even at ZeRO-3); Qwen3's 94 layers divide
# over no pp x vpp there, so the search builds the layout Megatron's recipes use (equal middle
# chunks, the ends lighter), as its own layouts are not published. (Before session 28 these
# rows were priced at vpp = 1, whose bubble, 16 points larger for the long-context runs, hid
# that much of the model's optimism.)
set -euo pipefail
cd "$(dirname "$0")/.."
moeplan=${MOEPLAN:-build/tools/moeplan/moeplan}
[ -x "$moeplan" ] || { echo "error: build moeplan first (tools/quickstart.sh)"; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# DeepSeek-V3 without its multi-token-prediction module, for the run that trains none.
python3 -c "
import json; c = json.load(open('models/hf/deepseek-v3.config.json'))
c['num_nextn_predict_layers'] = 0
json.dump(c, open('$scratch/deepseek-v3-no-mtp.config.json', 'w'))"
printf "%-8s %-6s %-26s %-62s %8s %9s %8s %9s %8s\n" run seq layout switches paper_s predicted paper_TF predicted error
while read -r run model cluster gbs seq layout flags paper_s paper_tf; do
  model=${model/SCRATCH/$scratch}
  read -r predicted_s predicted_tf < <("$moeplan" plan --model "$model" --cluster "$cluster" \
    --global-batch "$gbs" --seq-len "$seq" --parallel "$layout" --megatron-only --attention tp \
    --top 1 --json ${flags//,/ } 2>/dev/null |
    python3 -c 'import json,sys; p=json.load(sys.stdin)["plans"][0]["predicted"]; print(p["iteration_s"], p["megatron_log"]["throughput_per_gpu_tflops"])')
  # Error as throughput, positive where we predict faster: by TFLOP/s where the run gives them,
  # else by step time.
  python3 -c "
tf, s = '$paper_tf', '$paper_s'
error = $predicted_tf / float(tf) - 1 if tf != '-' else float(s) / $predicted_s - 1
print('%-8s %-6s %-26s %-62s %8s %9.1f %8s %9.0f %+7.1f%%' % ('$run', '$seq', '$layout', '$flags', s, $predicted_s, tf, $predicted_tf, 100 * error))"
done <<'ROWS'
moe_dev models/hf/qwen3-235b-a22b.config.json topologies/h100-256.json 2048 4096 tp=2,pp=8,ep=32,cp=1,mbs=1,vpp=4 --recompute,none,--overlap,off,--dispatcher,deepep 19.7 245
moe_dev models/hf/qwen3-235b-a22b.config.json topologies/h100-256.json 2048 4096 tp=2,pp=8,ep=32,cp=1,mbs=1,vpp=4 --recompute,none,--overlap,on,--dispatcher,deepep 17.6 276
main models/hf/qwen3-235b-a22b.config.json topologies/h100-256.json 2048 4096 tp=2,pp=1,ep=8,cp=1,mbs=4 --recompute,full,--zero,3,--dispatcher,deepep 17.6 276
main models/hf/qwen3-235b-a22b.config.json topologies/h100-256.json 2048 4096 tp=2,pp=32,ep=8,cp=1,mbs=1,vpp=3 --recompute,none,--overlap,off,--dispatcher,alltoall 24.2 200
main models/hf/qwen3-235b-a22b.config.json topologies/h100-256.json 2048 4096 tp=4,pp=8,ep=8,cp=1,mbs=1,vpp=4 --recompute,none,--overlap,off,--dispatcher,deepep 29.0 167
long models/hf/qwen3-235b-a22b.config.json topologies/h100-256.json 256 16384 tp=4,pp=8,ep=8,cp=1,mbs=1,vpp=4 --recompute-modules,layernorm,moe,--overlap,off,--dispatcher,deepep - 295
long models/hf/qwen3-235b-a22b.config.json topologies/h100-256.json 256 32768 tp=4,pp=8,ep=8,cp=2,mbs=1,vpp=4 --recompute-modules,layernorm,moe,--overlap,off,--dispatcher,deepep - 335
long models/hf/qwen3-235b-a22b.config.json topologies/h100-256.json 256 65536 tp=4,pp=8,ep=8,cp=4,mbs=1,vpp=4 --recompute-modules,layernorm,moe,--overlap,off,--dispatcher,deepep - 368
long models/hf/qwen3-235b-a22b.config.json topologies/h100-256.json 256 131072 tp=4,pp=8,ep=8,cp=8,mbs=1,vpp=4 --recompute-modules,layernorm,moe,--overlap,off,--dispatcher,deepep - 389
gb200 models/hf/qwen3-235b-a22b.config.json topologies/gb200-nvl72-4x64.json 8192 4096 tp=1,pp=8,ep=8,cp=1,mbs=1,vpp=1 --cuda-graph,attn,--recompute,none,--overlap,off,--dispatcher,deepep - 750
gb200 models/hf/qwen3-235b-a22b.config.json topologies/gb200-nvl72-4x64.json 3072 4096 tp=1,pp=4,ep=64,cp=1,mbs=3,vpp=6 --cuda-graph,attn,--precision,fp8,--fp8-recipe,mxfp8,--recompute-modules,moe_act,layernorm,--offload-modules,expert_fc1,moe_act,--overlap,on,--dispatcher,deepep - 919
gb300 models/hf/qwen3-235b-a22b.config.json topologies/gb300-nvl72-4x64.json 8192 4096 tp=1,pp=4,ep=32,cp=1,mbs=2,vpp=1 --cuda-graph,attn,--precision,fp8,--fp8-recipe,mxfp8,--recompute,none,--overlap,off,--dispatcher,deepep - 974
gb300 models/hf/qwen3-235b-a22b.config.json topologies/gb300-nvl72-4x64.json 1024 131072 tp=4,pp=4,ep=32,cp=4,mbs=1,vpp=12 --gpus,128,--cuda-graph,attn,--precision,fp8,--fp8-recipe,mxfp8,--recompute-modules,moe_act,layernorm,--overlap,off,--dispatcher,deepep - 1150
gb200 models/hf/deepseek-v3.config.json topologies/gb200-nvl72-4x64.json 4096 4096 tp=1,pp=4,ep=64,cp=1,mbs=1,layout=Et*4|(t*4|)*14tmL --cuda-graph,full,--precision,fp8,--fp8-recipe,mxfp8,--recompute-modules,mla_up_proj,--overlap,on,--dispatcher,deepep 12.94 1316
guide SCRATCH/deepseek-v3-no-mtp.config.json topologies/gb200-nvl72-4x64.json 2048 4096 tp=1,pp=8,ep=32,cp=1,mbs=1,layout=Et|(tt|)*30L --cuda-graph,attn,--precision,fp8,--fp8-recipe,mxfp8,--recompute-modules,moe_act,mlp,--overlap,off,--dispatcher,deepep,--adam-moments,bf16 - 970
mcore models/hf/deepseek-v3.config.json topologies/h100-1024.json 8192 4096 tp=2,pp=8,ep=64,cp=1,mbs=1,layout=Et|(tt|)*30mL --precision,fp8,--fp8-recipe,blockwise,--recompute-modules,mlp,mla_up_proj,--overlap,on,--dispatcher,deepep 23.2 368
pai models/hf/qwen3-235b-a22b.config.json topologies/h800-2048.json 4096 4096 tp=1,pp=32,ep=8,cp=1,mbs=4,vpp=3 --gpus,256,--recompute,full,--overlap,off,--dispatcher,alltoall 42.54 -
pai models/hf/qwen3-235b-a22b.config.json topologies/h800-2048.json 4096 4096 tp=2,pp=32,ep=8,cp=1,mbs=4,vpp=3 --gpus,256,--recompute,full,--overlap,off,--dispatcher,alltoall 43.50 -
pai models/hf/qwen3-235b-a22b.config.json topologies/h800-2048.json 2048 4096 tp=2,pp=32,ep=8,cp=1,mbs=1,vpp=3 --gpus,256,--recompute-modules,moe_act,layernorm,--overlap,off,--dispatcher,alltoall 22.42 -
pai models/hf/qwen3-235b-a22b.config.json topologies/h800-2048.json 2048 4096 tp=1,pp=32,ep=8,cp=1,mbs=1,vpp=3 --gpus,256,--recompute-modules,moe,layernorm,--overlap,off,--dispatcher,alltoall 22.95 -
ROWS
