#include "planner/memfine.h"

#include <algorithm>
#include <cmath>

namespace moe::memfine {

namespace {
double tc(const LayerShape& s) {
  return static_cast<double>(s.tp * s.cp);
}
}  // namespace

Bytes sequence_activation(const LayerShape& s) {
  // Rows 2 (QKV input) and 6 (output projection input) feed GEMMs; the rest do not.
  const double per_token = s.bytes_per_element * (3.0 * s.hidden + s.attention_elements() +
                                                  static_cast<double>(s.experts) +
                                                  static_cast<double>(s.indexer_width)) +
                           s.gemm_input() * 2.0 * s.hidden;
  return Bytes(s.micro_batch * static_cast<double>(s.seq_len) * per_token / tc(s));
}

Bytes activation_per_received_token(const LayerShape& s) {
  // Row 11 (FC1 input) and the activation output of row 12 (FC2 input) feed GEMMs; FC1's
  // output (row 12's other half) and the score multiply (row 13) do not.
  const double h = static_cast<double>(s.hidden), g = static_cast<double>(s.expert_ffn);
  return Bytes(s.micro_batch * (s.bytes_per_element + s.gemm_input()) * (h + g) / tc(s));
}

double stored_microbatches(int64_t pp, int64_t vpp, int64_t stage, bool full_recompute) {
  if (full_recompute) return 1.0;
  // Megatron's plain 1F1B runs p - r - 1 warm-up forwards, so p - r micro-batches are in flight;
  // the paper's v p + p - 2 r - 1 is the interleaved schedule's warm-up plus one.
  if (vpp == 1) return static_cast<double>(pp - stage);
  return static_cast<double>(vpp * pp + pp - 2 * stage - 1);
}

double tokens_per_chunk(double received_tokens, int64_t chunks) {
  return std::ceil(received_tokens / static_cast<double>(chunks));
}

Bytes activation(const LayerShape& s, double m_g, double received_tokens, int64_t chunks) {
  return (sequence_activation(s) +
          activation_per_received_token(s) * tokens_per_chunk(received_tokens, chunks)) *
         m_g;
}

Bytes recompute_checkpoints(const LayerShape& s, double m_g, int64_t layers_per_chunk) {
  const double input = s.bytes_per_element * s.micro_batch * static_cast<double>(s.seq_len) *
                       static_cast<double>(s.hidden) / tc(s);
  return Bytes(input * m_g * static_cast<double>(layers_per_chunk));
}

Bytes static_memory(double params, const StaticBytesPerParam& b) {
  return Bytes(params * b.per_param());
}

bool fits(Bytes static_bytes, Bytes activation_bytes, Bytes gpu_capacity, double alpha) {
  return static_bytes + activation_bytes <= gpu_capacity * alpha;
}

double max_received_tokens(const LayerShape& s, double m_g, Bytes static_bytes, Bytes gpu_capacity,
                           double alpha) {
  const Bytes room = gpu_capacity * alpha - static_bytes - sequence_activation(s) * m_g;
  return room / (activation_per_received_token(s) * m_g);
}

int64_t chunks_needed(double received_tokens, double max_tokens) {
  if (max_tokens <= 0) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(received_tokens / max_tokens)));
}

int64_t select_bin(int64_t chunks, const std::vector<int64_t>& bins) {
  if (chunks <= 0) return 0;
  int64_t best = 0;
  for (int64_t b : bins) {
    if (b >= chunks && (best == 0 || b < best)) best = b;
  }
  return best;
}

double tokens_per_gpu_per_second(int64_t global_batch, int64_t seq_len, Seconds iteration,
                                 int64_t num_gpus) {
  return static_cast<double>(global_batch) * static_cast<double>(seq_len) /
         (iteration.value() * static_cast<double>(num_gpus));
}

}  // namespace moe::memfine
