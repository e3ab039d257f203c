#!/usr/bin/env bash
# The planner's time model against NVIDIA's published Megatron-Bridge runs: the performance
# summary tables of the NeMo 25.09, 25.11 and 26.02 containers
# (github.com/NVIDIA-NeMo/Megatron-Bridge, docs/performance-summary-archive.md), on DGX-H100,
# DGX-GB200 and DGX-GB300, for the models moeplan ships a file for (Llama 3 8B and 70B,
# Llama 3.1 405B, GPT-OSS 120B, Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3). NVFP4 rows and
# B200/B300 systems are left out (no NVFP4 GEMM rate, no DGX-B200 cluster file).
#
# Each row is priced at its published layout and precision (FP8-CS: --fp8-recipe tensorwise;
# FP8-MX: mxfp8; 26.02's H100 "FP8" as current scaling; FSDP > 0 as ZeRO-3), as Megatron-Core
# runs it (--megatron-only, TP attention). The tables publish no switches: where the recipe file
# (scripts/performance/configs/*/..._workload_base_configs.py) has a preset with the same layout,
# its recompute modules, dispatcher (HybridEP and DeepEP as --dispatcher deepep), EP overlap
# (moe_a2a_overlap) and CUDA graphs (attn, or full_iteration as full) are passed; otherwise the
# search picks them (`searched`), and the Blackwell MoE rows take HybridEP, which the Blackwell
# Qwen3 and DeepSeek-V3 presets use. A run whose preset names no flex backend dispatches as its
# model provider says: all-to-all (moe_token_dispatcher_type of the GPT-OSS, Qwen3 MoE and
# DeepSeek providers; GPT-OSS's H100 and GB300 presets add none, its GB200 GBS-1280 one adds
# HybridEP). The presets are today's where one still matches the layout, else an earlier
# version's (Qwen3-30B-A3B's H100 FP8-CS preset had pp 2, vpp 12, EP 8, the all-to-all
# dispatcher and moe_a2a_overlap before it moved to EP 16 and HybridEP): a preset with the
# run's layout is the nearest record of what ran. Routing is balanced: the MoE runs
# force-balance their tokens (the tables' footnote). "w/o MTP" rows price DeepSeek-V3 without
# its MTP module.
#
# The error is on tokens/s per GPU, which the tables and moeplan count alike (positive: moeplan
# predicts faster); the tables' TFLOP/s come from Megatron-Bridge's own FLOP formula.
set -euo pipefail
cd "$(dirname "$0")/.."
moeplan=${MOEPLAN:-build/tools/moeplan/moeplan}
[ -x "$moeplan" ] || { echo "error: build moeplan first (tools/quickstart.sh)"; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# DeepSeek-V3 without its multi-token-prediction module.
python3 -c "
import json; c = json.load(open('models/hf/deepseek-v3.config.json'))
c['num_nextn_predict_layers'] = 0
json.dump(c, open('$scratch/deepseek-v3-no-mtp.config.json', 'w'))"

declare -A model_file=(
  [llama3-8b]=models/hf/llama-3-8b.config.json
  [llama3-70b]=models/hf/llama-3-70b.config.json
  [llama3.1-405b]=models/hf/llama-3.1-405b.config.json
  [gpt-oss-120b]=models/hf/gpt-oss-120b.config.json
  [qwen3-30b]=models/hf/qwen3-30b-a3b.config.json
  [qwen3-235b]=models/hf/qwen3-235b-a22b.config.json
  [dsv3]=models/hf/deepseek-v3.config.json
  [dsv3-no-mtp]=$scratch/deepseek-v3-no-mtp.config.json
)

# cluster_of SYSTEM GPUS: the cluster file a row runs on.
cluster_of() {
  case $1 in
    H100) [ "$2" -gt 256 ] && echo topologies/h100-1024.json || echo topologies/h100-256.json ;;
    GB200) echo topologies/gb200-nvl72-4x64.json ;;
    GB300) echo topologies/gb300-nvl72-4x64.json ;;
  esac
}
# plan_row ROW [CALIBRATION [SAVE]]: the row's predicted tokens/s per GPU and TFLOP/s ("nan nan"
# when it does not plan), priced as above; with SAVE, the plan is saved there too.
plan_row() {
  local release system model gpus prec gbs mbs seq fsdp tp pp cp vp ep tokens tflops flags
  read -r release system model gpus prec gbs mbs seq fsdp tp pp cp vp ep tokens tflops flags <<< "$1"
  local precision=() switches=() extra=()
  case $prec in
    FP8-CS) precision=(--precision fp8 --fp8-recipe tensorwise) ;;
    FP8-MX) precision=(--precision fp8 --fp8-recipe mxfp8) ;;
  esac
  [ "$fsdp" -gt 0 ] && switches+=(--zero 3)
  if [ "$flags" != - ]; then
    read -r -a extra <<< "${flags//,/ }"
    switches+=("${extra[@]}")
  elif [[ $system == GB* && $ep -gt 1 ]]; then
    switches+=(--dispatcher deepep)
  fi
  # A run whose preset names no flex backend dispatches as its model provider says: all-to-all
  # for every MoE provider here (moe_token_dispatcher_type = "alltoall").
  if [[ $ep -gt 1 && " ${switches[*]} " != *" --dispatcher "* ]]; then
    switches+=(--dispatcher alltoall)
  fi
  if [ -n "${2:-}" ]; then
    switches+=(--calibration "$2")
  elif [[ $system == H100 && -n ${H100_CALIBRATION:-} ]]; then
    switches+=(--calibration "$H100_CALIBRATION")
  fi
  [ -n "${3:-}" ] && switches+=(--save "$3")
  "$moeplan" plan --model "${model_file[$model]}" --cluster "$(cluster_of "$system" "$gpus")" --gpus "$gpus" \
    --global-batch "$gbs" --seq-len "$seq" --parallel "$(row_layout "$1")" --megatron-only \
    --attention tp --top 1 --json "${precision[@]}" "${switches[@]}" 2>/dev/null |
    python3 -c 'import json,sys; p=json.load(sys.stdin)["plans"][0]["predicted"]; print(p["tokens_per_s"] / '"$gpus"', p["megatron_log"]["throughput_per_gpu_tflops"])' ||
    echo "nan nan"
}
row_layout() {
  local release system model gpus prec gbs mbs seq fsdp tp pp cp vp ep rest
  read -r release system model gpus prec gbs mbs seq fsdp tp pp cp vp ep rest <<< "$1"
  local layout="tp=$tp,pp=$pp,cp=$cp,ep=$ep,mbs=$mbs"
  [ "$ep" -gt 1 ] && layout+=",etp=1"
  [[ $vp == n/a || $vp == 1 ]] && layout+=",vpp=1" || layout+=",vpp=$vp"
  echo "$layout"
}
error_of() { python3 -c "print('%+.1f' % (100 * ($1 / $2 - 1)) if '$1' != 'nan' else 'nan')"; }

mapfile -t rows < <(sed -n '/^ROWS_BEGIN$/,/^ROWS_END$/p' "$0" | sed '1d;$d')
# ANCHOR=1: fit each system's efficiencies to its Llama 3 70B run (moeplan anchor, one factor
# on every efficiency) and price the system's other rows from that calibration as well.
declare -A anchor_of=()
if [ "${ANCHOR:-0}" = 1 ]; then
  for row in "${rows[@]}"; do
    read -r release system model gpus prec gbs mbs seq _ _ _ _ _ _ tokens _ <<< "$row"
    [[ $release == 25.11 && $model == llama3-70b ]] || continue
    cluster=$(cluster_of "$system" "$gpus")
    plan_row "$row" "" "$scratch/$system.plan.json" > /dev/null
    measured_ms=$(python3 -c "print($gbs * $seq / ($tokens * $gpus) * 1e3)")
    "$moeplan" anchor --model "${model_file[$model]}" --cluster "$cluster" \
      --plan "$scratch/$system.plan.json" --measured-ms "$measured_ms" \
      --out "$scratch/$system.calibration.json" > /dev/null
    anchor_of[$system]=$scratch/$system.calibration.json
  done
fi

printf "%-6s %-6s %-14s %5s %-6s %5s %-52s %-8s %8s %9s %7s %8s%s\n" release system model GPUs \
  prec GBS layout switches paper_tok predicted paper_TF error \
  "$([ ${#anchor_of[@]} -gt 0 ] && printf ' %9s %8s' anchored error)"
errors=() anchored_errors=()
for row in "${rows[@]}"; do
  read -r release system model gpus prec gbs mbs seq fsdp tp pp cp vp ep tokens tflops flags <<< "$row"
  shown=searched
  [ "$flags" != - ] && shown=preset
  read -r predicted _ < <(plan_row "$row")
  error=$(error_of "$predicted" "$tokens")
  errors+=("$error")
  anchored=""
  if [ -n "${anchor_of[$system]:-}" ]; then
    read -r with_anchor _ < <(plan_row "$row" "${anchor_of[$system]}")
    anchored_error=$(error_of "$with_anchor" "$tokens")
    [[ $model == llama3-70b && $release == 25.11 ]] || anchored_errors+=("$anchored_error")
    anchored=$(printf " %9.0f %7s%%" "$with_anchor" "$anchored_error")
  fi
  printf "%-6s %-6s %-14s %5s %-6s %5s %-52s %-8s %8s %9.0f %7s %7s%%%s\n" "$release" \
    "$system" "$model" "$gpus" "$prec" "$gbs" "$(row_layout "$row"),seq=$seq" "$shown" \
    "$tokens" "$predicted" "$tflops" "$error" "$anchored"
done
summary() {
  python3 -c "
import statistics, sys
e = [float(x) for x in sys.argv[2:] if x != 'nan']
a = [abs(x) for x in e]
print(f'{sys.argv[1]}: {len(e)} rows, error median {statistics.median(e):+.1f} %, mean |error| {statistics.mean(a):.1f} %, within 20 %: {sum(x <= 20 for x in a)}')
" "$@"
}
summary "as shipped" "${errors[@]}"
[ ${#anchored_errors[@]} -gt 0 ] && summary "anchored per system on its Llama 3 70B run (that row left out)" "${anchored_errors[@]}"
exit 0
ROWS_BEGIN
25.11 H100 llama3-8b 8 FP8-CS 128 1 8192 8 1 1 1 n/a 1 14451 744 -
25.11 H100 llama3-70b 64 FP8-CS 128 1 8192 0 4 8 1 5 1 1602 719 -
26.02 H100 llama3-70b 64 FP8-CS 256 1 8192 0 4 8 1 5 1 1621 728 -
25.11 H100 llama3.1-405b 1024 FP8-CS 512 1 8192 0 8 8 2 8 1 292 737 -
26.02 H100 llama3.1-405b 1024 FP8-CS 1536 1 8192 0 8 8 2 8 1 311 784 -
25.11 H100 gpt-oss-120b 64 BF16 512 4 4096 0 1 4 1 1 8 5630 153 -
26.02 H100 gpt-oss-120b 64 BF16 1280 1 4096 0 1 4 1 1 8 5993 163 --recompute-modules,layernorm,moe_act
25.11 H100 qwen3-30b 16 FP8-CS 512 2 4096 0 1 2 1 24 8 5275 121 -
26.02 H100 qwen3-30b 16 FP8-CS 1024 1 4096 0 1 2 1 12 8 5113 118 --dispatcher,alltoall,--overlap,on
25.11 H100 qwen3-235b 256 FP8-CS 2048 1 4096 0 2 8 1 4 32 1575 233 --dispatcher,alltoall,--overlap,on
26.02 H100 qwen3-235b 256 FP8-CS 8192 1 4096 0 2 8 1 4 32 1633 242 --dispatcher,alltoall,--overlap,on
25.09 H100 dsv3 1024 FP8-CS 8192 1 4096 0 2 8 1 4 64 1297 338 --recompute-modules,mla_up_proj,mlp,--dispatcher,deepep,--overlap,off
25.11 GB200 llama3-8b 8 FP8-CS 128 2 8192 0 1 1 1 n/a 1 31508 1622 -
25.11 GB200 llama3-70b 64 FP8-CS 256 2 8192 64 1 1 1 1 1 4312 1937 -
25.11 GB200 llama3.1-405b 256 FP8-CS 1536 1 8192 0 4 16 1 4 1 813 2053 -
26.02 GB200 llama3.1-405b 256 FP8-MX 1536 1 8192 0 4 16 1 8 1 786 1983 -
25.11 GB200 dsv3-no-mtp 256 BF16 4096 1 4096 0 1 4 1 4 64 3139 782 --recompute-modules,mla_up_proj,--dispatcher,deepep,--overlap,off,--cuda-graph,attn
25.11 GB200 dsv3-no-mtp 256 FP8-MX 4096 1 4096 0 1 8 1 4 32 4018 1003 -
26.02 GB200 dsv3 256 FP8-MX 4096 1 4096 0 1 4 1 4 64 3955 1028 --recompute-modules,mla_up_proj,--dispatcher,deepep,--overlap,on,--cuda-graph,full
25.11 GB200 gpt-oss-120b 64 BF16 1280 1 8192 0 1 1 1 1 64 15876 488 -
26.02 GB200 gpt-oss-120b 64 BF16 1280 4 4096 0 1 1 1 1 64 15784 428 --recompute-modules,layernorm,moe_act,--dispatcher,deepep,--overlap,on
25.11 GB200 qwen3-30b 8 FP8-MX 512 4 4096 0 1 1 1 1 8 23766 547 --dispatcher,deepep
25.11 GB200 qwen3-235b 256 BF16 8192 1 4096 0 1 8 1 3 32 4916 728 --dispatcher,deepep,--cuda-graph,attn
25.11 GB300 llama3-8b 8 FP8-CS 128 2 8192 0 1 1 1 n/a 1 37556 1933 -
25.11 GB300 llama3-70b 64 FP8-CS 256 2 8192 64 1 1 1 1 1 4520 2030 -
25.11 GB300 llama3.1-405b 256 FP8-CS 1536 1 8192 0 2 8 2 4 1 999 2522 -
25.11 GB300 dsv3-no-mtp 256 BF16 4096 1 4096 0 1 2 1 4 32 3848 961 -
25.11 GB300 dsv3-no-mtp 256 FP8-MX 4096 1 4096 0 1 2 1 4 32 4357 1088 -
25.11 GB300 gpt-oss-120b 64 BF16 1280 2 8192 0 1 1 1 1 64 18347 565 -
26.02 GB300 gpt-oss-120b 64 BF16 1280 4 4096 0 1 1 1 1 64 19412 527 --cuda-graph,attn
25.11 GB300 qwen3-30b 8 FP8-MX 512 4 4096 0 1 1 1 1 8 28934 666 -
25.11 GB300 qwen3-235b 256 BF16 8192 2 4096 0 1 4 1 12 16 6131 907 -
ROWS_END
