// The planner's search over the whole parallelism space.
//
// Outer loop: layouts (tp, cp, pp, vpp, ep, etp, mbs; dp and edp follow from the GPU count),
// each checked against the model (heads, KV heads, experts, layers, batch). A memory lower
// bound prunes a layout before any timing: if it does not fit with full recompute and the most
// FCDA chunks, no inner choice can make it fit. Inner loop: recompute, attention as TP or
// Ulysses SP, dispatcher, MoNTA AllToAll strategy, MemFine MACT chunking, BF16 DP gradient
// compression, communication overlap. Any size fixed in `fixed` is kept as given. Layouts are
// split over threads; ties in score break by enumeration order, so results are deterministic.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "planner/time_model.h"

namespace moe {

// kEnergy: the fewest joules a trained token on the GPU boards (planner/power_limit.h), with
// the power cap (SearchRequest::power_caps) a dimension of the search.
enum class Objective { kThroughput, kMemory, kCost, kEnergy };
// Under the memory objective, peaks within this share of the least rank by iteration time.
inline constexpr double kMemoryTie = 0.005;
const char* objective_name(Objective o);

struct SearchRequest {
  int64_t num_gpus = 0;
  int64_t global_batch = 0;
  ParallelConfig fixed;  // any subset; unset sizes are searched
  // The layers split evenly over the pipeline's stages (and virtual stages), as a Megatron
  // launch without --decoder-first/last-pipeline-num-layers or a layout runs them: no lighter
  // end stages tried.
  bool even_split = false;
  std::optional<Recompute> recompute;  // fixed, or searched
  // Search only what Megatron-Core runs: MegaScale-MoE's rematerialization and MemFine's FCDA
  // chunking are left out (the intra-operator overlap is off unless asked anyway).
  bool megatron_only = false;
  // Megatron's --recompute-modules that selective recompute stands for (memory_model.h).
  uint32_t recompute_modules = kDefaultRecomputeModules;
  // Megatron's --offload-modules every candidate runs with (PlanChoice::offload_modules); with
  // any, the search keeps to the recompute modes that offload (none, selective).
  uint32_t offload_modules = 0;
  // Offload only where needed: a candidate that fits at no ZeRO stage under recompute none or
  // selective tries the experts' rows (expert_fc1, moe_act), then every module, and keeps the
  // first that fits.
  bool search_offload = false;
  // Megatron's optimizer CPU offload every candidate runs with (PlanChoice::optimizer_offload).
  double optimizer_offload = 0;
  std::optional<bool> overlap;  // fixed, or searched
  // MegaScale's intra-operator overlap: off unless asked (Megatron-LM has no such kernels);
  // nullopt searches it.
  std::optional<bool> intra_overlap = false;
  // Megatron-Core's fused permutation (PlanChoice::permute_fusion): on unless the user's
  // Megatron predates it; never searched, since fused is never slower.
  bool permute_fusion = true;
  // CUDA graphs every candidate runs with (PlanChoice::cuda_graph): none unless the user's run
  // captures them; not searched, since they cost memory and static shapes the model ignores.
  CudaGraph cuda_graph = CudaGraph::kNone;
  // The core-attention kernel every candidate uses (PlanChoice::attention_kernel): fused unless
  // the user runs Megatron's unfused attention (the search never picks the slower kernel).
  AttentionKernel attention_kernel = AttentionKernel::kFused;
  // The loss kernel every candidate uses (PlanChoice::cross_entropy): Transformer Engine's
  // unless the user runs Megatron's native one (never searched: TE's is never slower or larger).
  CrossEntropy cross_entropy = CrossEntropy::kTe;
  std::optional<AttentionMode> attention;  // fixed, or searched
  // The MoE token dispatcher, fixed or searched; a fixed one rules out the layouts where it is
  // not priced (megascale::dispatcher_priced). The search tries all-to-all and all-gather, which
  // every Megatron-Core has; DeepEP only when fixed, as it needs its own library and NVSHMEM.
  std::optional<megascale::Dispatcher> dispatcher;
  std::optional<int> zero;  // ZeRO stage 0-3 fixed; else the lowest of 1-3 that fits
  // DP gradients sent in BF16 (Megatron's --grad-reduce-in-bf16, MegaScale-MoE's Sec. 5
  // compression) or in FP32 (Megatron's default), fixed; nullopt tries both where DP syncs.
  std::optional<bool> dp_bf16_compression;
  // Megatron's precision-aware optimizer and its Adam state types (PlanChoice::adam): a numeric
  // choice the user makes, as FP8 is, so every candidate takes it as given.
  AdamStates adam;
  bool gpipe = false;  // GPipe schedule instead of (interleaved) 1F1B
  Objective objective = Objective::kThroughput;
  // Under the energy objective, the caps below the board's limit each candidate weighs
  // (energy_power_caps); empty: the board's limit alone.
  std::vector<double> power_caps;
  // No plan slower than this is kept (the energy objective's time budget; 0: none).
  Seconds time_limit;
  Precision precision = Precision::kBf16;
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;  // FP8 plans' scaling (PlanChoice::fp8_recipe)
  int top_k = 5;
  double alpha = 1.0;
  // A measured static memory (MemFine Table 4 style) that replaces the computed one.
  std::optional<Bytes> static_override;
  int threads = 2;
  // Called now and then with the share of layouts done (from one thread at a time).
  std::function<void(double)> progress;
};

struct SearchStats {
  int64_t layouts = 0;           // valid layouts considered
  int64_t pruned_by_memory = 0;  // layouts cut by the memory lower bound
  int64_t evaluated = 0;         // candidates timed
  int64_t bounded = 0;  // of those, ruled out before their DP syncs were priced (time bound)
  double seconds = 0;
};

struct NoFit {
  std::string layout;  // the closest candidate
  int64_t stage = 0;
  Bytes needed;         // its tightest stage's total
  Bytes capacity;       // alpha x HBM
  std::string binding;  // what dominates: static memory or activations
  // Whose capacity `capacity` is: the GPU's, or (optimizer offload) a GPU's share of host memory.
  std::string holder = "GPU";
};

// APTMoE offload plans for `gpus` GPUs (stages from G to the layer count, micro-batches that
// divide the batch), best first; only those whose GPU and host memory hold. A fixed pp or mbs
// is kept; a fixed size other than 1 for tp, cp, dp, ep, etp or vpp leaves no offload plan.
std::vector<Plan> offload_plans(const TimeContext& ctx, const ClusterSpec& cluster,
                                const SearchRequest& req);

struct SearchResult {
  std::vector<Plan> ranked;  // best first, at most top_k
  SearchStats stats;
  std::optional<NoFit> closest;  // set when nothing fits
};

// The memory question a choice asks: its recompute, ZeRO stage, precision, attention mode,
// schedule and the context's skew, on a GPU of `capacity`.
MemoryRequest memory_request(const TimeContext& ctx, const PlanChoice& c, Bytes capacity,
                             double alpha, std::optional<Bytes> static_override = {});

// Scores one fully specified choice (memory, time, MFU, TGS, headroom), at the clock its GPUs'
// power limit leaves it (planner/power_limit.h), as the search does, whatever c.compute_clock
// says: the clock is the hardware's answer to the plan, not a choice.
PlanScore score_plan(const TimeContext& ctx, const PlanChoice& c, Bytes capacity, double alpha,
                     std::optional<Bytes> static_override = {});

// The derived numbers (tokens/s, MFU, TGS, peak, headroom, OOM point) from memory and time
// already computed for a choice.
PlanScore complete_score(const TimeContext& ctx, const PlanChoice& c, const MemoryReport& memory,
                         const TimeBreakdown& time, Bytes capacity, double alpha);

// Why Megatron would refuse the request's Adam states or optimizer offload at its ZeRO stage
// (the lowest the search tries where none is fixed) and precision: adam_states_problem's
// reason, empty when it runs them. search_plans throws it as a ConfigError.
std::string adam_states_problem(const SearchRequest& req);

SearchResult search_plans(const TimeContext& ctx, const SearchRequest& req);

// Adds one search's counts to `into`'s, and its closest miss where it is the closer (a search
// over several sizes or caps reports them as one).
void add_search_counts(SearchResult& into, const SearchResult& one);

// The cost objective over several cluster sizes: searches each GPU count and ranks every plan
// by GPU-seconds per token. Counts with no valid layout are skipped; ConfigError if none has one.
SearchResult search_gpu_counts(const TimeContext& ctx, const SearchRequest& req,
                               const std::vector<int64_t>& counts);

}  // namespace moe
