#!/usr/bin/env bash
# Refactoring check: run one fixed set of 42 `moeplan` commands (plan, simulate, memory, info,
# topo, comm, a2a, affinity) with two binaries and diff what they print, the files they write
# (saved plans, traces) and their exit codes. A change meant to keep behaviour should show no
# difference; timings (search and simulation wall time) are masked. Covers the fallbacks
# (activation and optimizer offload, APTMoE), the no-fit line, bad options, --json, --explain,
# --verify, the cost and memory objectives, fixed layouts, resident and offload simulations,
# --every-gpu, --trace.
#
# Usage: tools/compare_binaries.sh OLD_MOEPLAN [NEW_MOEPLAN]   (new: build/tools/moeplan/moeplan)
# LINES_SHOWN=N shows N lines of the diff (default 60); the names of the files that differ follow.
# Build the old one from a worktree: git worktree add /tmp/old REV && cmake -S /tmp/old -B
# /tmp/old/build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C /tmp/old/build moeplan
set -uo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: tools/compare_binaries.sh OLD_MOEPLAN [NEW_MOEPLAN]}
new=${2:-build/tools/moeplan/moeplan}
for b in "$old" "$new"; do [ -x "$b" ] || { echo "error: $b is not an executable"; exit 2; }; done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
M=models T=topologies

# run DIR NAME ARGS...: the command's output, error and exit code under DIR, timings masked and
# DIR spelled as OUT so both runs compare.
run() {
  local dir=$1 name=$2 bin=$3; shift 3
  "$bin" "$@" > "$dir/$name.out" 2> "$dir/$name.err"
  echo "exit $?" >> "$dir/$name.out"
  sed -i -E "s#$dir#OUT#g; s/in [0-9.]+ s( \([0-9]+ events\/s\))?/in X s/; s/\"(seconds|wall_s)\": [0-9.e+-]+/\"\1\": X/" \
    "$dir/$name.out" "$dir/$name.err"
}

corpus() {
  local bin=$1 d=$2
  mkdir -p "$d"
  local p=(plan --global-batch)
  run "$d" plan01 "$bin" "${p[@]}" 64 --model $M/mixtral-8x7b.json --cluster $T/h100-sxm-8.json
  run "$d" plan02 "$bin" "${p[@]}" 512 --model $M/mixtral-8x7b.json --cluster $T/h100-256.json --explain --top 3
  run "$d" plan03 "$bin" "${p[@]}" 1024 --model $M/hf/qwen3-30b-a3b.config.json --cluster $T/h100-256.json --json --explain --top 2
  run "$d" plan04 "$bin" "${p[@]}" 256 --model $M/deepseekmoe-16b.json --cluster $T/h100-256.json --objective cost
  run "$d" plan05 "$bin" "${p[@]}" 240 --model $M/deepseekmoe-16b.json --cluster $T/megascale-h800-240.json --objective memory --top 3
  run "$d" plan06 "$bin" "${p[@]}" 240 --model $M/phi-3.5-moe.json --cluster $T/megascale-h800-240.json --verify 3 --top 4
  run "$d" plan07 "$bin" "${p[@]}" 512 --model $M/mixtral-8x22b.json --cluster $T/h100-256.json --parallel tp=2,pp=4 --explain
  run "$d" plan08 "$bin" "${p[@]}" 64 --model $M/hf/llama-3.1-405b.config.json --cluster $T/h100-sxm-8.json
  run "$d" plan09 "$bin" "${p[@]}" 128 --model $M/aptmoe-moe-s-16.json --cluster $T/aptmoe-4x-a800-40gb-c1g2.json --seq-len 32 --save "$d/apt.json"
  run "$d" plan10 "$bin" "${p[@]}" 128 --model $M/aptmoe-moe-s-16.json --cluster $T/aptmoe-4x-a800-40gb-c1g2.json --seq-len 32 --json
  run "$d" plan11 "$bin" "${p[@]}" 64 --model $M/mixtral-8x7b.json --cluster $T/h100-sxm-8.json --gpus 100000
  run "$d" plan12 "$bin" "${p[@]}" 64 --model $M/mixtral-8x7b.json --cluster $T/h100-256.json --dispatcher allgather --parallel ep=8,etp=2
  run "$d" plan13 "$bin" "${p[@]}" 64 --model $M/mixtral-8x7b.json --cluster $T/h100-256.json --fp8-recipe blockwise
  run "$d" plan14 "$bin" "${p[@]}" 128 --model $M/hf/llama-3-8b.config.json --cluster $T/h100-sxm-8.json --seq-len 8192 --explain
  run "$d" plan15 "$bin" "${p[@]}" 256 --model $M/mixtral-8x7b.json --cluster $T/h100-256.json --save "$d/mix.json" --offload-modules search
  run "$d" plan16 "$bin" "${p[@]}" 256 --model $M/mixtral-8x7b.json --cluster $T/h100-256.json --optimizer-offload 0.5 --top 2
  run "$d" plan17 "$bin" "${p[@]}" 128 --model $M/memfine-model-1.json --cluster $T/memfine-128x64gb.json --parallel tp=1,pp=4,ep=32,dp=32 --explain --save "$d/memfine.json"
  run "$d" plan18 "$bin" "${p[@]}" 15360 --model $M/hf/deepseek-v3.config.json --cluster $T/h800-2048.json --top 3 --explain
  run "$d" plan19 "$bin" "${p[@]}" 64 --model $M/hf/llama-3-70b.config.json --cluster $T/h100-sxm-8.json --parallel tp=1,cp=1
  run "$d" plan20 "$bin" "${p[@]}" 16 --model $M/monta-2x70b.json --cluster $T/monta-2x8-a800.json --seq-len 32768 --parallel tp=8,ep=2 --explain
  run "$d" plan21 "$bin" "${p[@]}" 1280 --model $M/hf/gpt-oss-120b.config.json --cluster $T/gb200-nvl72-4x64.json --precision fp8 --fp8-recipe mxfp8 --cuda-graph full --explain
  run "$d" plan22 "$bin" "${p[@]}" 64 --model $M/deepseekmoe-16b.json --cluster $T/h100-256.json --parallel tp=1,cp=1 --seq-len 32768 --gpus 8
  local s=(simulate --model $M/mixtral-8x7b.json --cluster $T/h100-256.json --plan "$d/mix.json")
  run "$d" sim01 "$bin" "${s[@]}"
  run "$d" sim02 "$bin" "${s[@]}" --json --iterations 2
  run "$d" sim03 "$bin" "${s[@]}" --every-gpu --skew G=0.5 --iterations 2
  run "$d" sim04 "$bin" "${s[@]}" --every-gpu --json --pxn off
  run "$d" sim05 "$bin" "${s[@]}" --trace "$d/trace.json" --alpha 0.5
  run "$d" sim06 "$bin" "${s[@]}" --predictor-accuracy 0.5
  run "$d" sim07 "$bin" simulate --model $M/memfine-model-1.json --cluster $T/memfine-128x64gb.json --plan "$d/memfine.json" --iterations 3
  run "$d" sim08 "$bin" simulate --model $M/aptmoe-moe-s-16.json --cluster $T/aptmoe-4x-a800-40gb-c1g2.json --plan "$d/apt.json" --json
  run "$d" sim09 "$bin" simulate --model $M/aptmoe-moe-s-16.json --cluster $T/aptmoe-4x-a800-40gb-c1g2.json --plan "$d/apt.json" --iterations 3
  local mem=(memory --model $M/memfine-model-1.json --cluster $T/memfine-128x64gb.json --parallel tp=1,pp=4,ep=32,dp=32)
  run "$d" mem01 "$bin" "${mem[@]}" --explain
  run "$d" mem02 "$bin" "${mem[@]}" --json --skew worst
  run "$d" mem03 "$bin" "${mem[@]}" --chunks 8 --recompute selective --offload-modules expert_fc1
  run "$d" mem04 "$bin" "${mem[@]}" --chunks zero
  run "$d" mem05 "$bin" memory --model $M/hf/llama-3-70b.config.json --cluster $T/h100-sxm-8.json --parallel tp=8,pp=1 --optimizer-offload 0.5 --explain
  run "$d" other01 "$bin" info --model $M/hf/deepseek-v3.config.json
  run "$d" other02 "$bin" topo --cluster $T/aptmoe-4x-a800-40gb-c1g4.json
  run "$d" other03 "$bin" comm --model $M/mixtral-8x7b.json --cluster $T/megascale-h800-240.json --parallel tp=8,ep=8,dp=30 --explain
  run "$d" other04 "$bin" a2a --cluster $T/monta-2x8-a800.json --bytes "256 MiB" --tp 8 --ep 2 --explain
  run "$d" other05 "$bin" affinity --model $M/aptmoe-moe-s-16.json --cluster $T/aptmoe-4x-a800-40gb-c1g2.json --G 0.3 --tokens 4096 --dtype fp32
  run "$d" other06 "$bin" affinity --model $M/aptmoe-moe-s-16.json --cluster $T/aptmoe-4x-a800-40gb-c1g2.json --table
}

echo "running the corpus with $old"
corpus "$old" "$work/old"
echo "running the corpus with $new"
corpus "$new" "$work/new"
# The saved files embed nothing run-specific; the outputs name OUT for their directory.
if diff -r "$work/old" "$work/new" > "$work/diff.txt"; then
  echo "same: $(ls "$work/old" | wc -l) files, every output, saved plan, trace and exit code"
else
  head -n "${LINES_SHOWN:-60}" "$work/diff.txt"
  echo "different: $(grep -c '^diff\|^Only' "$work/diff.txt") files differ (first ${LINES_SHOWN:-60} lines above):"
  grep '^diff\|^Only' "$work/diff.txt" | sed -E "s#.*/new/##; s#^Only in .*: #only in one: #" | tr '\n' ' '
  echo
  exit 1
fi
