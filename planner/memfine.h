// MemFine (000_540cfe3acc6ce862): memory model and memory-aware chunk tuning for MoE training.
//
// Eq. (1) static memory, eq. (2) / Table 2 activation memory of one MoE layer, eq. (3) the fit
// condition, FCDA (eq. 6-7: dispatch/compute/combine in c chunks, so the peak is the largest
// chunk's), MACT eq. (8) the largest received-token count that fits, eq. (9) the chunk count and
// its bin, and eq. (10) tokens per GPU per second.
//
// Decisions where the paper is loose:
// - Eq. (1) writes the optimizer term 4*D_opt. We read it as (fp32 bytes) x (optimizer states):
//   Adam keeps master weights, momentum and variance, so 4 x 3 = 12 bytes, which with BF16
//   weights and FP32 main gradients gives Megatron's 18 bytes per parameter.
// - Eq. (2) has no layer count: with full recompute (m_g = 1) it is the peak of recomputing one
//   layer, which is what Table 4 reports. We keep eq. (2) exactly for that number and report the
//   layer inputs that full recompute checkpoints (D_t b s h/(tc) per layer per in-flight
//   micro-batch chunk) as a separate term, so totals do not hide them.
// - FCDA chunks hold ceil(s''/c) received tokens each; the sequence term is not chunked.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/units.h"

namespace moe::memfine {

// The symbols of MemFine Table 1 that eq. (2) uses.
struct LayerShape {
  double bytes_per_element = 2;  // D_t
  int64_t micro_batch = 1;       // b
  int64_t seq_len = 0;           // s
  int64_t hidden = 0;            // h
  int64_t heads = 0;             // a
  int64_t head_dim = 0;          // h_d (query/key head width)
  int64_t kv_heads = 0;          // k_a
  int64_t experts = 0;           // e_n (router output width)
  int64_t expert_ffn = 0;        // g_e
  int64_t tp = 1;                // t
  int64_t cp = 1;                // c (context parallel)
  // Bytes of the rows that are inputs of FP8 GEMMs (Table 2's rows 2, 6, 11 and the FC2 half
  // of 12): Transformer Engine keeps the FP8 copy it cast for the forward GEMM to compute the
  // weight gradient. 0: D_t, as the paper's BF16 training has it.
  double gemm_input_bytes = 0;
  double gemm_input() const { return gemm_input_bytes > 0 ? gemm_input_bytes : bytes_per_element; }
  // Bytes kept per attention score by an unfused kernel (PlanChoice::attention_kernel): 5, the
  // softmax output, dropout mask and dropout output. 0 (eq. 2 as the paper writes it): a fused
  // kernel keeps no s x s matrix.
  double score_bytes = 0;
  // DSA (not in MemFine): the elements a token keeps for its lightning indexer, heads x dim of
  // query, one key of dim and a weight a head; 0 without.
  int64_t indexer_width = 0;
  // Not in MemFine: the elements a token keeps for its attention in place of a h_d + 2 k_a h_d,
  // the mean over layers when some are Gated DeltaNet or the query carries an output gate;
  // negative: eq. (2)'s own terms.
  double attention_width = -1;
  double attention_elements() const {
    return attention_width >= 0 ? attention_width
                                : static_cast<double>(heads * head_dim + 2 * kv_heads * head_dim);
  }
};

// First term of eq. (2) without m_g: D_t b s (5h + a h_d + 2 k_a h_d + e_n) / (tc), plus the DSA
// indexer's width when the model has one.
Bytes sequence_activation(const LayerShape& s);
// Second term per received token: D_t b (2h + 2 g_e) / (tc).
Bytes activation_per_received_token(const LayerShape& s);
// m_g: chunk-micro-batches whose activations stage `stage` holds: v p + p - 2 r_pp - 1 under
// interleaved 1F1B (the paper's "generally"), p - r_pp under plain 1F1B (v = 1), where the
// paper's formula would give 2p - 2r - 1 although Megatron runs only p - r - 1 warm-up forwards
// (the simulator's memory timeline shows p - r); 1 under full recompute.
double stored_microbatches(int64_t pp, int64_t vpp, int64_t stage, bool full_recompute);
// Received tokens one FCDA chunk holds: ceil(s'' / c).
double tokens_per_chunk(double received_tokens, int64_t chunks);
// Eq. (2) with FCDA: m_g x (sequence term + ceil(s''/c) x per-token term).
Bytes activation(const LayerShape& s, double m_g, double received_tokens, int64_t chunks);
// Stored layer inputs under full recompute (not in eq. 2; see the header note).
Bytes recompute_checkpoints(const LayerShape& s, double m_g, int64_t layers_per_chunk);

// Eq. (1): parameters x (D_para + D_grad + 4 D_opt) with D_opt the number of fp32 states.
struct StaticBytesPerParam {
  double param = 2;  // D_t^para
  double grad = 4;   // D_t^grad (fp32 main gradients)
  // Adam: master weights, momentum, variance, counted in FP32 elements (4 bytes each; a plan
  // with narrower states counts fractions: BF16 moments beside FP32 master weights are 2).
  double optimizer_states = 3;
  double per_param() const { return param + grad + 4.0 * optimizer_states; }
};
Bytes static_memory(double params, const StaticBytesPerParam& b);

// Eq. (3): M_sta + M_act <= alpha M_GPU.
bool fits(Bytes static_bytes, Bytes activation_bytes, Bytes gpu_capacity, double alpha);

// Eq. (8): the received tokens that still fit, s'_max (may be negative: nothing fits).
double max_received_tokens(const LayerShape& s, double m_g, Bytes static_bytes, Bytes gpu_capacity,
                           double alpha);
// Eq. (9): c = ceil(s'' / s'_max); 0 when s'_max <= 0 (no chunk count fits).
int64_t chunks_needed(double received_tokens, double max_tokens);
// MACT's bin: the smallest bin not below c ("the large bin closest to c"). Returns 0 when c
// exceeds every bin or is 0.
int64_t select_bin(int64_t chunks, const std::vector<int64_t>& bins);

// Eq. (10): TGS = g_bs s / (T N).
double tokens_per_gpu_per_second(int64_t global_batch, int64_t seq_len, Seconds iteration,
                                 int64_t num_gpus);

}  // namespace moe::memfine
