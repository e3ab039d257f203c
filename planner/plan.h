// Plan: the contract between the planner and everything that consumes a layout (simulator,
// executor, what-if reports). It carries the choices (parallel sizes, schedule, per-technique
// switches) and the predicted numbers with their breakdown, so a consumer can put the
// prediction beside its own result. planner/io/plan_io.h writes and reads it (schema
// "moeplan-plan/1", documented in README).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "planner/megascale.h"
#include "planner/memory_model.h"
#include "planner/monta.h"
#include "planner/parallel.h"
#include "planner/units.h"

namespace moe {

enum class AttentionMode { kTensor, kUlysses };  // Megatron TP+SP, or MegaScale's Ulysses SP
// The core-attention kernel. Fused: FlashAttention or cuDNN (Megatron-Core's default backends),
// causal blocks skipped, no score matrix in memory. Unfused: Megatron's own DotProductAttention
// (`--attention-backend unfused`, and every Megatron-LM run before FlashAttention, 2022): two
// batched GEMMs over the whole s x s score matrix, a fused scale-mask-softmax kernel and
// attention dropout between them, and the softmax output, dropout mask and output kept for
// backward (Korthikanti et al. 2022: 5 a s^2 b bytes per layer) unless the layer is recomputed.
enum class AttentionKernel { kFused, kUnfused };
enum class Schedule { kOneFOneB, kInterleaved, kGPipe };
// BF16 mixed precision; FP32 (APTMoE fine-tuning); FP8 (MegaScale-MoE Sec. 5, Transformer
// Engine): linear-layer GEMMs in FP8, core attention and the output head in BF16, FP8 weights
// gathered over DP, TP collectives and the expert dispatch moved in FP8 (combine stays BF16).
enum class Precision { kBf16, kFp32, kFp8 };
// How an FP8 plan's GEMMs scale their operands (Megatron's --fp8-recipe): one factor per tensor,
// from past amax values (delayed, Megatron's default) or the current one (tensorwise); per 128 x
// 128 weight block and 128 activation elements (blockwise: DeepSeek-V3's recipe, Hopper); per 32
// elements in hardware (mxfp8, Blackwell). Each reads its own GEMM curve (Efficiencies::gemm_for).
enum class Fp8Recipe { kDelayed, kTensorwise, kBlockwise, kMxfp8 };
// CUDA graphs (Megatron's --cuda-graph-impl and --cuda-graph-scope): captured kernels replay
// without the framework's per-op host work (planner/host_time.h). kAttention: attention, router
// and the MoE preprocessing (transformer_engine, scopes attn moe_router moe_preprocess); the
// dispatch, experts and combine stay eager, their token counts vary. kFullIteration: the whole
// iteration (local, full_iteration), which needs a MoE path without host syncs.
enum class CudaGraph { kNone, kAttention, kFullIteration };
// The loss over the vocabulary after the output head (Megatron's --cross-entropy-loss-fusion
// --cross-entropy-fusion-impl). kTe: Transformer Engine's Triton kernels, as NVIDIA's
// performance recipes run them: an online-softmax pass and a pass that writes the gradient into
// the BF16 logits in place, then one scaling pass in backward; the logits (2 bytes a vocabulary
// entry a token) are all it keeps. kNative: Megatron's own fused (jit) kernels: the logits are
// copied to FP32, shifted, exponentiated and normalised in place, and those FP32 softmax values
// (4 bytes) stay for backward beside the BF16 logits while the forward runs.
enum class CrossEntropy { kTe, kNative };
// The storage type of an Adam state under Megatron's precision-aware optimizer
// (--main-params-dtype, --exp-avg-dtype, --exp-avg-sq-dtype): 4, 2, 2 or 1 bytes an element.
enum class StateDtype { kFp32, kBf16, kFp16, kFp8 };
// Megatron's precision-aware optimizer (--use-precision-aware-optimizer, Transformer Engine's
// FusedAdam; it needs the distributed optimizer): the master weights and the two Adam moments
// in the types given (DeepSeek-V3 kept its moments in BF16). Off, Megatron's Adam keeps all
// three in FP32, 12 bytes a parameter. On, Megatron also asks FusedAdam to store FP32 master
// weights as the 16 bits BF16 weights lack (store_param_remainders, Transformer Engine 2.1+),
// which works only where the weights are BF16: FP8 weights (--fp8-param-gather) keep all 4.
struct AdamStates {
  bool precision_aware = false;
  StateDtype main_params = StateDtype::kFp32;  // Megatron allows fp32 or fp16
  StateDtype exp_avg = StateDtype::kFp32, exp_avg_sq = StateDtype::kFp32;
  bool operator==(const AdamStates&) const = default;
};
// A switch's names as plan files, command-line options and labels spell them, one table each
// (the readers and the name functions below use the same one).
template <class E>
struct EnumName {
  const char* name;
  E value;
};
std::span<const EnumName<Precision>> precision_names();               // "bf16", "fp32", "fp8"
std::span<const EnumName<Fp8Recipe>> fp8_recipe_names();              // Megatron's: "delayed", ...
std::span<const EnumName<CudaGraph>> cuda_graph_names();              // "none", "attn", "full"
std::span<const EnumName<AttentionKernel>> attention_kernel_names();  // "fused", "unfused"
std::span<const EnumName<CrossEntropy>> cross_entropy_names();        // Megatron's: "te", "native"
std::span<const EnumName<StateDtype>> state_dtype_names();  // Megatron's: "fp32", "bf16", ...
template <class E>
const char* name_in(std::span<const EnumName<E>> names, E value) {
  for (const EnumName<E>& n : names)
    if (n.value == value) return n.name;
  return "?";
}
const char* attention_mode_name(AttentionMode a);
const char* cuda_graph_name(CudaGraph g);
const char* attention_kernel_name(AttentionKernel k);
const char* cross_entropy_name(CrossEntropy k);
const char* state_dtype_name(StateDtype d);
double state_dtype_bytes(StateDtype d);
const char* schedule_name(Schedule s);
const char* precision_name(Precision p);
const char* fp8_recipe_name(Fp8Recipe r);

struct PlanChoice {
  ParallelConfig parallel;  // complete, gbs included
  Recompute recompute = Recompute::kNone;
  // Megatron's --recompute-modules (RecomputeModule bits) under kSelective.
  uint32_t recompute_modules = kDefaultRecomputeModules;
  // Megatron's --fine-grained-activation-offloading --offload-modules (OffloadModule bits; 0:
  // off): these modules' saved inputs go to host memory over the GPU's host link in forward and
  // come back before backward, on copy streams beside compute.
  uint32_t offload_modules = 0;
  // Megatron's --optimizer-cpu-offload --optimizer-offload-fraction: this share of each GPU's
  // optimizer shard (FP32 master weights and Adam states) lives in host memory and steps on the
  // CPU while the GPU steps the rest (HybridDeviceOptimizer); 0: off.
  double optimizer_offload = 0;
  AttentionMode attention = AttentionMode::kTensor;
  AttentionKernel attention_kernel = AttentionKernel::kFused;
  megascale::Dispatcher dispatcher = megascale::Dispatcher::kAllToAll;
  monta::Strategy alltoall = monta::Strategy::kBaseline;  // MoNTA, when etp > 1 spans nodes
  int64_t alltoall_chunks = 1;
  bool mact = false;        // MemFine chunking by MACT (else one chunk)
  int64_t fcda_chunks = 1;  // the chunk count MACT settled on (the largest any stage needs)
  // MACT's count on each pipeline stage (MemFine eq. 9 on the stage's own memory): a stage with
  // headroom runs its MoE layers whole while a full one chunks, as the simulator's MACT does.
  // Empty: every stage at fcda_chunks.
  std::vector<int64_t> stage_chunks;
  // The chunk count stage `stage` runs its MoE layers at.
  int64_t chunks_on_stage(int64_t stage) const {
    return stage_chunks.size() == static_cast<size_t>(parallel.pp.value_or(1))
               ? stage_chunks[static_cast<size_t>(stage)]
               : fcda_chunks;
  }
  // Megatron's --grad-reduce-in-bf16 (MegaScale-MoE Sec. 5's BF16 gradient communication):
  // the DP reduce-scatter moves BF16, and Megatron's gradient buffer, in the weights' BF16 type
  // rather than FP32, accumulates the micro-batches' gradients in BF16 (2 bytes a parameter).
  bool dp_bf16_compression = false;
  AdamStates adam;
  bool overlap = true;  // inter-operator overlap of communication with independent compute
  // MegaScale-MoE Sec. 4.2 intra-operator overlap: TP/SP and expert communication fused with
  // their GEMMs tile by tile on a few SMs (a MegaScale system feature Megatron-LM lacks).
  bool intra_overlap = false;
  // Megatron-Core's --moe-permute-fusion (Transformer Engine's fused permute and unpermute, in
  // Megatron-Core since core_r0.10): each routed row read and written once each way. Without it
  // the token dispatcher's index_select, index_copy, probability scaling and top-k sum touch
  // every routed row about twice as often (layer_ops.cpp).
  bool permute_fusion = true;
  CrossEntropy cross_entropy = CrossEntropy::kTe;
  // APTMoE: weights live in host memory; each stage's attention, gate and hot experts are
  // loaded over PCIe, cold experts run on the CPU (planner/offload.h). pp counts stages, which
  // may exceed the GPUs (Mobius-style cross mapping).
  bool offload = false;
  // How an offload plan's loads are scheduled (simulator/offload_sim.h has the meanings):
  // APTMoE's predictor and historical popularity accuracies, and its launch window (0: ideal).
  double predictor_accuracy = 1.0;
  double historical_accuracy = 1.0;
  int64_t load_window = 0;
  bool gpipe = false;        // GPipe instead of 1F1B: same bubble, every micro-batch held
  int64_t offload_gpus = 0;  // GPUs an offload plan runs on

  int64_t gpus() const { return offload ? offload_gpus : parallel.world(); }
  int zero_stage = 1;
  Precision precision = Precision::kBf16;
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;  // read under Precision::kFp8 alone
  CudaGraph cuda_graph = CudaGraph::kNone;
  int64_t seq_len = 4096;
  // The share of its full-clock compute rate each GPU keeps under its power limit at this plan's
  // duty (planner/power_limit.h): what its GEMMs and fused attention run at. Not a switch: the
  // planner derives it, and the simulator, executing the plan, reads it.
  double compute_clock = 1;
  // A power cap the plan sets on its GPUs (nvidia-smi -pl) below their board's limit; 0: the
  // board's own. The energy objective chooses it (planner/power_limit.h); a lower cap trades
  // compute clock for joules per token.
  double power_cap_w = 0;

  Schedule schedule() const {
    if (offload || gpipe)
      return Schedule::kGPipe;  // APTMoE runs every micro-batch of a stage at once

    return parallel.vpp.value_or(1) > 1 ? Schedule::kInterleaved : Schedule::kOneFOneB;
  }
  std::string describe() const;  // one line: "tp=8,pp=1,... recompute=selective attn=ulysses ..."
};

// A MACT plan's chunk counts from its memory estimate: the largest any stage needs
// (fcda_chunks) and each stage's own (stage_chunks, kept only where stages differ). A plan
// without MACT keeps its fixed count.
void settle_mact_chunks(PlanChoice& c, const MemoryReport& memory);

// What a plan's activations take as its precision and attention kernel keep them: bytes an
// element (4 under FP32, else 2), bytes of a linear layer's saved input (1 under FP8, where
// Transformer Engine keeps its FP8 copy; 0: the element's), bytes an attention score (an
// unfused kernel's, 0 fused). memory_request and activation_shape both read them here.
struct ActivationBytes {
  double per_element = 2, gemm_input = 0, score = 0;
};
ActivationBytes activation_bytes(const PlanChoice& c);
// Whether an FP8 plan stores its weights in FP8 (Megatron's --fp8-param-gather). Megatron
// refuses it beside the optimizer's CPU offload unless the recipe is delayed scaling
// (arguments.py: "When --fp8-param-gather is enabled, the optimizer cpu offload must be used in
// conjunction with --fp8-recipe delayed"), so such plans keep BF16 weights.
bool fp8_param_gather(const PlanChoice& c);
// Bytes a parameter of a plan's master weights and Adam moments (12: Megatron's FP32 Adam; 6
// for BF16 moments over BF16 weights with master remainders, 8 over FP8 weights) and of its
// gradient buffer (4: FP32 main gradients; 2 where they reduce in BF16).
double optimizer_state_bytes(const PlanChoice& c);
double gradient_bytes(const PlanChoice& c);
// Why Megatron would refuse a plan's Adam states (empty when it runs them): the precision-aware
// optimizer, and the optimizer's CPU offload that runs on it, need the distributed optimizer
// (ZeRO 1-3); it needs mixed precision; master weights are FP32 or FP16; and without it every
// state is FP32.
std::string adam_states_problem(const PlanChoice& c);
// The Adam states `--adam-moments` names: Megatron's Adam for fp32, else the precision-aware
// optimizer with both moments in that type and FP32 master weights.
AdamStates adam_states_for(StateDtype moments);
// The MemFine layer shape of a plan's layers with those bytes, for what prices activations
// outside the memory model.
memfine::LayerShape activation_shape(const ModelSpec& m, const PlanChoice& c, int64_t seq_len);

// Iteration time by kind; exposed communication only (what overlap did not hide).
struct TimeBreakdown {
  Seconds compute;    // forward + backward GEMMs, attention and memory-bound ops, all micro-batches
  Seconds recompute;  // forward work redone in backward
  Seconds tp_comm;    // TP all-gather/reduce-scatter or Ulysses all-to-all
  Seconds ep_comm;    // dispatch and combine
  Seconds ep_held_sms;      // the part of ep_comm that is compute slowed by their kernels' SMs
  Seconds cp_comm;          // ring attention K/V exchange
  Seconds pp_comm;          // pipeline sends: fill and drain, and the passes they slow beside them
  Seconds pp_send_stretch;  // the part of pp_comm that is passes slowed beside the sends
  Seconds dp_comm;          // gradient reduce-scatter and parameter all-gather
  // The pipeline stage whose once-per-iteration gradient reduce-scatter (ZeRO 0-1) and
  // parameter all-gather (ZeRO 0-2) show most, and how long each takes; -1 when none runs.
  int64_t dp_reduce_stage = -1, dp_gather_stage = -1;
  Seconds dp_reduce_scatter, dp_all_gather;
  // What dp_comm sums, for --explain (SyncPricing::add_to): the once-per-iteration syncs beyond
  // their windows, with the pipeline hops they slow; the passes of the stage that paces the
  // pipeline (dp_paced_stage) stretched by the syncs sharing their links, every micro-batch
  // (ZeRO-2 and -3's own syncs among them); the DP link's load beyond the rest of the
  // iteration; and ZeRO-2/3's reduce-scatters queued on the DP stream running past all that.
  Seconds dp_once, dp_paced, dp_link, dp_stream;
  int64_t dp_paced_stage = -1;
  // That stage's own syncs a micro-batch under ZeRO-2 (reduce-scatter) and -3 (and gathers).
  Seconds dp_paced_reduce_scatter, dp_paced_all_gather;
  Seconds bubble;              // pipeline bubble
  Seconds optimizer;           // Adam step (on the CPU when offloading)
  Seconds pcie_load;           // offload: PCIe loading not hidden behind compute
  Seconds cpu_experts;         // offload: CPU expert time not hidden behind GPU work
  Seconds host;                // GPUs waiting for the host to issue kernels (planner/host_time.h)
  Seconds activation_offload;  // waiting for activation offloading's copies (not hidden)
  Seconds iteration;
  int64_t microbatches = 0;
};

struct PlanScore {
  TimeBreakdown time;
  MemoryReport memory;
  double tokens_per_second = 0;
  double mfu = 0;    // model FLOPs over peak BF16 (FP32 for FP32 plans)
  double tgs = 0;    // MemFine eq. (10)
  Bytes peak_bytes;  // largest stage total
  Bytes headroom;    // alpha x capacity - peak
  double alpha = 1;  // MemFine eq. (3): the share of GPU memory the plan was sized to
  // s'' at which the tightest stage runs out: eq. (8)'s per-chunk s'_max times the plan's FCDA
  // chunks, or MACT's largest bin.
  double oom_received_tokens = 0;
  Bytes host_bytes;  // offload: weights and optimizer states per node in host memory
  // The compute clock `time` was priced at (PlanChoice::compute_clock): score_plan derives it
  // for its context, which a caller that runs the plan elsewhere (the simulator) takes.
  double compute_clock = 1;
};

struct Plan {
  PlanChoice choice;
  PlanScore score;
};

// The Megatron-LM flags that turn a layout's communication overlap (PlanChoice::overlap):
// --overlap-moe-expert-parallel-comm where experts are split over EP ranks, --tp-comm-overlap
// where attention is tensor-parallel. Neither applies to a layout without that communication.
struct MegatronOverlapFlags {
  bool expert = false, tensor = false;
  bool any() const { return expert || tensor; }
};
MegatronOverlapFlags megatron_overlap_flags(const ModelSpec& m, const PlanChoice& c);

// Megatron-LM / Megatron-Core arguments for a plan (names from megatron/training/arguments.py).
// `nvlink_domain`: GPUs one NVLink domain holds. DeepEP's kernels forward inside 8-GPU nodes; on
// larger domains (GB200/GB300 NVL72) Megatron's flex dispatcher runs the HybridEP backend, which
// prices the same (a token once per destination domain and rank).
std::vector<std::string> megatron_arguments(const Plan& p, const ModelSpec& m,
                                            int nvlink_domain = 8);
// What those arguments cannot say: parts of the model Megatron-LM has no argument for (Llama 4's
// chunked attention, Kimi Delta Attention) and MegaScale-MoE mechanisms the plan uses
// (rematerialization, intra-operator overlap), one sentence each; empty when they say it all.
std::vector<std::string> megatron_gaps(const Plan& p, const ModelSpec& m);

}  // namespace moe
