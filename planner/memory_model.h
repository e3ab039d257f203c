// Per-GPU memory of every pipeline stage for a model, a layout and a routing load.
//
// Static memory is MemFine eq. (1) over the weights a stage's GPU holds: its layers' attention,
// norms, router, shared experts and dense FFNs sharded by TP, its routed experts by EP x ETP,
// the embedding on the first stage and the head on the last (vocab-parallel over TP), with
// optimizer states (and, for higher ZeRO stages, gradients and weights) sharded over the data-
// parallel group (DP for dense weights, expert-DP for experts). Activation memory is MemFine
// eq. (2) per layer with FCDA chunking; the pipeline schedule sets how many micro-batch chunks
// are in flight (m_g). MACT (eq. 8-9) gives the chunk count per stage.
//
// Recompute modes: none; selective = Megatron's --recompute-granularity selective with its
// --recompute-modules (by default moe_act layernorm: the norm inputs and one of the two
// g_e-wide expert activations are recomputed); full = MemFine's m_g = 1 (one layer's
// activations at a time) plus the layer inputs it checkpoints.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/memfine.h"
#include "planner/model_spec.h"
#include "planner/model_stats.h"
#include "planner/parallel.h"
#include "planner/units.h"

namespace moe {

// kRematerialize: MegaScale-MoE's selective activation rematerialization (App. A.2): keep only
// what is expensive to recompute and replay norms, activations, scatter/gather and the
// all-gather in backward, overlapped with other work.
enum class Recompute { kNone, kSelective, kFull, kRematerialize };
const char* recompute_name(Recompute r);
// "none", "selective", "full", "sar"; nullopt for anything else.
std::optional<Recompute> recompute_from_name(const std::string& name);

// Megatron-Core's --recompute-modules, as bits of a mask. What each drops from eq. (2) and what
// it replays in backward: layernorm, the two norms' outputs (8h bytes a token of HBM traffic);
// moe_act, the expert activation's input (6 k g_e bytes); core_attn, an unfused kernel's
// scores (the core kernel again); mla_up_proj, MLA's full-width Q, K and V, kept as their
// latents (the two up-projection GEMMs); mlp, a dense layer's FFN activations (the FFN and its
// TP collectives); moe, the MoE block's routed-token activations and router logits (router,
// dispatch, experts, combine, shared experts, permutation: the EP all-to-all runs again).
// Megatron's shared_experts is not offered: eq. (2) holds no shared-expert activations to save.
enum RecomputeModule : uint32_t {
  kRecomputeCoreAttn = 1u << 0,
  kRecomputeMoeAct = 1u << 1,
  kRecomputeLayernorm = 1u << 2,
  kRecomputeMlaUpProj = 1u << 3,
  kRecomputeMlp = 1u << 4,
  kRecomputeMoe = 1u << 5,
};
constexpr uint32_t kDefaultRecomputeModules = kRecomputeMoeAct | kRecomputeLayernorm;
constexpr uint32_t kAllRecomputeModules = (kRecomputeMoe << 1) - 1;
// Megatron's names in its order ("moe_act layernorm"); one mask from names, nullopt with the
// first unknown name in `unknown`.
std::vector<std::string> recompute_module_names(uint32_t modules);
std::optional<uint32_t> recompute_modules_from_names(const std::vector<std::string>& names,
                                                     std::string* unknown = nullptr);

// Megatron-Core's fine-grained activation offloading (--fine-grained-activation-offloading
// --offload-modules): each named module's saved input goes to host memory over the GPU's host
// link during forward and comes back before the module's backward (megatron/core/pipeline_
// parallel/fine_grained_activation_offload.py). attn_norm and mlp_norm: the two norms' inputs
// (h a token); core_attn: q, k and v; attn_proj: the output projection's input; expert_fc1: the
// routed tokens into FC1 (h a received token); moe_act: FC1's output (g_e a received token).
// Only under recompute none or selective (full recompute saves layer inputs alone, and
// MegaScale's rematerialization is not Megatron's).
enum OffloadModule : uint32_t {
  kOffloadAttnNorm = 1u << 0,
  kOffloadCoreAttn = 1u << 1,
  kOffloadAttnProj = 1u << 2,
  kOffloadMlpNorm = 1u << 3,
  kOffloadExpertFc1 = 1u << 4,
  kOffloadMoeAct = 1u << 5,
};
constexpr uint32_t kAllOffloadModules = (kOffloadMoeAct << 1) - 1;
// Megatron's names in its order; one mask from names, nullopt with the first unknown name in
// `unknown`.
std::vector<std::string> offload_module_names(uint32_t modules);
std::optional<uint32_t> offload_modules_from_names(const std::vector<std::string>& names,
                                                   std::string* unknown = nullptr);
// Whether a recompute mode lets Megatron offload activations.
bool offload_allowed(Recompute r);

struct MemoryRequest {
  int64_t seq_len = 4096;
  Recompute recompute = Recompute::kNone;
  uint32_t recompute_modules = kDefaultRecomputeModules;  // with kSelective
  uint32_t offload_modules = 0;  // OffloadModule bits, where offload_allowed(recompute)
  double optimizer_offload = 0;  // share of the optimizer states in host memory (0-1)
  // What a GPU's offloaded optimizer states may take of host memory (its share of the node's);
  // zero leaves it unchecked.
  Bytes host_capacity;
  double bytes_per_element = 2;  // D_t of activations
  double gemm_input_bytes = 0;   // of activations kept for FP8 GEMMs' backward; 0: D_t
  double score_bytes = 0;        // per attention score, unfused attention (LayerShape)
  memfine::StaticBytesPerParam static_bytes;
  int zero_stage = 1;  // 0: replicated; 1: optimizer sharded (distributed optimizer); 2; 3
  // s'': tokens one GPU's MoE layer receives; unset means balanced routing (s x top-k).
  std::optional<double> received_tokens;
  // FCDA chunks; unset means MACT picks per stage from `chunk_bins`.
  std::optional<int64_t> chunks;
  std::vector<int64_t> chunk_bins = {1, 2, 4, 8};
  // MemFine Table 4 reports measured static memory: it replaces the computed static memory
  // and the checkpoint term (the measurement holds whatever is not eq. 2).
  std::optional<Bytes> static_override;
  Bytes gpu_capacity;
  double alpha = 1.0;  // eq. (3)
  // Ulysses SP (MegaScale-MoE) keeps whole attention weights on each rank of the TP slot.
  bool attention_replicated = false;
  // GPipe runs every micro-batch's forward before any backward: each stage holds all of them
  // (this count) instead of 1F1B's in-flight few.
  std::optional<int64_t> gpipe_microbatches;
  // What one micro-batch's loss keeps of its logits between its forward and backward, per
  // output head (planner/layer_ops.h, cross_entropy_passes): the last stage's and each MTP
  // module's. The last stage runs a micro-batch's backward right after its forward, so it holds
  // one micro-batch's (GPipe: all of them).
  Bytes loss_bytes;
};

struct StageMemory {
  int64_t stage = 0;
  int64_t first_layer = 0;  // the lowest layer it holds (stage_layer_label lists them all)
  int64_t num_layers = 0;
  int64_t num_moe_layers = 0;
  double params_per_gpu = 0;
  double expert_params_per_gpu = 0;
  Bytes static_bytes;
  Bytes activation_bytes;  // eq. (2) at the chosen chunk count, times layers held
  // Of one micro-batch and layer, what activation offloading sends to the host (the largest
  // layer's; activation_bytes holds it back for the two layers Megatron keeps on the GPU).
  Bytes offloaded_per_layer;
  Bytes checkpoint_bytes;  // full recompute's stored layer inputs
  Bytes total_bytes;
  Bytes host_bytes;  // the optimizer states a GPU offloads to host memory
  bool fits = false;
  bool host_fits = true;  // host_bytes within MemoryRequest::host_capacity
  double m_g = 0;
  double max_received_tokens = 0;  // eq. (8)
  int64_t mact_chunks = 0;         // eq. (9) then the bin; 0: no bin fits
  int64_t chunks = 1;              // the chunk count used for activation_bytes
};

struct MemoryReport {
  std::vector<StageMemory> stages;
  double received_tokens = 0;
  memfine::LayerShape moe_shape;
  int64_t mact_chunks = 0;        // the largest over stages: what the job needs; 0 if none fits
  int64_t largest_chunk_bin = 1;  // the request's largest MACT bin: how far MACT can chunk
  bool fits = false;
  // The largest stage's total: what the busiest GPU needs.
  Bytes peak_bytes() const {
    Bytes peak;
    for (const StageMemory& s : stages) peak = std::max(peak, s.total_bytes);
    return peak;
  }
};

// The weights one GPU of a pipeline stage holds for the stage's layers, by how data parallelism
// shards them: `dense` (norms, router, and attention, shared experts and dense FFNs split over
// TP) over DP; `replicated` (attention, shared experts and dense FFNs, which Ulysses SP keeps
// whole on every SP rank: the SP group is data-parallel for them) over SP x DP; `expert` (routed
// experts split over EP x ETP) over expert-DP. Embedding and head are not included.
struct LayerWeights {
  double dense = 0;
  double replicated = 0;
  double expert = 0;
};
LayerWeights stage_layer_weights(const ModelSpec& m, const ModelParams& all,
                                 const ParallelConfig& p, int64_t stage, bool sp_attention);

// The MemFine layer shape of a model's MoE layers under a layout; `attention_replicated`:
// Ulysses SP attention instead of TP.
memfine::LayerShape moe_layer_shape(const ModelSpec& m, const ParallelConfig& p, int64_t seq_len,
                                    double bytes_per_element, bool attention_replicated = false);
// Balanced (s x top-k) and worst case (all EP ranks' tokens on one GPU's experts) s''.
double balanced_received_tokens(const ModelSpec& m, int64_t seq_len);
double worst_received_tokens(const ModelSpec& m, const ParallelConfig& p, int64_t seq_len);

// What an unfused attention kernel keeps per score for backward (Korthikanti et al. 2022: the
// softmax output, 2 bytes, the dropout mask, 1, and the dropout output, 2).
constexpr double kUnfusedAttentionScoreBytes = 5.0;
// Those scores for one layer and micro-batch on one GPU: (a / t) heads of (s / c) queries x s
// keys at shape.score_bytes each (0 with a fused kernel).
Bytes attention_score_bytes(const memfine::LayerShape& shape);

// One layer's activation for one micro-batch as eq. (2) / Table 2 count it under the recompute
// mode, with `received_tokens` (s'') in `chunks` FCDA chunks (MegaScale's rematerialization keeps
// its App. A.2 share). Dense layers ignore s'' and chunks.
Bytes layer_activation_bytes(const ModelSpec& m, const ParallelConfig& p,
                             const memfine::LayerShape& shape, bool moe_layer,
                             double received_tokens, int64_t chunks, Recompute recompute,
                             uint32_t modules = kDefaultRecomputeModules);

// The layout must be resolved and checked.
// One layer and micro-batch: the bytes activation offloading sends to the host and brings
// back (OffloadModule bits `offload`), of what the recompute mode keeps.
Bytes layer_offloaded_bytes(const ModelSpec& m, const memfine::LayerShape& shape, bool moe_layer,
                            double received_tokens, Recompute recompute, uint32_t recompute_modules,
                            uint32_t offload);

MemoryReport estimate_memory(const ModelSpec& m, const ParallelConfig& p, const MemoryRequest& r);
// The same with the parameter counts computed once by the caller (the planner's hot path).
MemoryReport estimate_memory(const ModelSpec& m, const ModelParams& params, const ParallelConfig& p,
                             const MemoryRequest& r);

}  // namespace moe
