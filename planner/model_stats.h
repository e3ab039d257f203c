// Parameter counts and FLOPs per token of a ModelSpec.
//
// Counts follow the weights a checkpoint holds: attention projections (MHA/GQA, or MLA with its
// low-rank norms), RMSNorm vectors, router, shared and routed experts, embeddings and output
// head. "Active" parameters are those one token touches: every non-expert weight plus top_k
// routed experts. FLOPs: 2 per multiply-accumulate of the active matrices (embedding lookup
// excluded, output head included) plus attention's score and value products, which grow with
// sequence length (halved by the causal mask); training is 3x forward (the 6N rule).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/model_spec.h"
#include "planner/units.h"

namespace moe {

// Weights of one transformer layer, by part.
struct LayerParams {
  double attention = 0;       // projections, biases and the latent norms of MLA
  double norms = 0;           // the two RMSNorm vectors
  double router = 0;          // gate matrix (and the shared-expert gate of Qwen2-MoE)
  double shared_experts = 0;  // always-active experts
  double routed_experts = 0;  // all routed experts of the layer
  double dense_ffn = 0;       // a dense layer's FFN
  double one_routed_expert = 0;
  bool linear = false;  // linear attention (its weights in `attention`)

  double total() const {
    return attention + norms + router + shared_experts + routed_experts + dense_ffn;
  }
};

struct ModelParams {
  std::vector<LayerParams> layers;  // one per decoder layer
  double embedding = 0;
  double output_head = 0;  // 0 when tied to the embedding
  double final_norm = 0;
  double mtp = 0;  // multi-token-prediction modules, reported apart from the main model

  double total() const;                     // main model, MTP excluded
  double active(const ModelSpec& m) const;  // per token, main model
  double attention() const;
  double routed_experts() const;
};

// The output-head weights a pipeline's last stage holds: its own head, or, tied, the embedding
// again unless that stage is also the first, which holds it already.
double last_stage_head_params(const ModelParams& all, bool also_first);

// Weight count of one FFN of the given width (3 matrices gated, 2 plain).
double ffn_params(const ModelSpec& m, int64_t width);
double attention_params(const ModelSpec& m);  // DSA's indexer included
double indexer_params(const ModelSpec& m);    // DSA's lightning indexer; 0 without
// MLA's down projections and latent norms, and DSA's indexer, which Megatron-Core keeps whole
// on every TP rank (TELinear, parallel_mode 'duplicated'); 0 for other attention.
double latent_duplicated_params(const ModelSpec& m);
// A layer's weights: softmax attention, or linear attention when `linear`.
LayerParams layer_params(const ModelSpec& m, bool moe_layer, bool linear = false);
double linear_attention_params(const ModelSpec& m);
// Forward FLOPs a token of one linear-attention layer's recurrence (the projections are matmuls).
double linear_attention_flops_per_token(const ModelSpec& m);
// The share of those FLOPs in the inter-chunk state scan (the new values U - W S and the state
// update K^T(U - W S), flash-linear-attention's chunk_gated_delta_rule_fwd_h): the part that
// runs chunk after chunk, and under context parallelism rank after rank.
double linear_attention_scan_share(const ModelSpec& m);
ModelParams count_params(const ModelSpec& m);

struct TokenFlops {
  Flops forward_matmul;     // 2 x active matrix weights
  Flops forward_attention;  // scores and values, causal (DSA: with its indexer)
  Flops forward_indexer;    // DSA's lightning indexer, part of forward_attention
  Flops forward_linear;     // linear-attention layers' recurrence, part of forward_attention
  Flops forward() const { return forward_matmul + forward_attention; }
  Flops training() const { return forward() * 3.0; }  // forward + 2x for backward
};

// Keys a query attends to, averaged over a causal sequence of seq_len tokens: s / 2, or with a
// window of w keys (0: none) w - w^2 / (2 s) once s > w (the first w queries see fewer); in
// chunks of w (Llama 4), each chunk's causal triangle: (k w^2 + r^2) / (2 s) for k whole chunks
// and a remainder of r tokens.
double attended_keys(int64_t seq_len, int64_t window, bool chunked = false);

// FLOPs per token for a sequence of seq_len tokens (attention's term is per token, averaged
// over the causal triangle, or the window band of windowed layers).
TokenFlops flops_per_token(const ModelSpec& m, int64_t seq_len);

}  // namespace moe
