// APTMoE's CPU side: one expert FFN's forward and backward pass on the host with Eigen, timed
// against token count and thread count, so the affinity split (eq. 1) uses this machine's CPU
// rate rather than a datasheet's.
//
// The expert is Mixtral/APTMoE-shaped: gated (SwiGLU: Y = (silu(X W1) * (X W3)) W2) or plain
// (Y = gelu-free relu(X W1) W2, as APTMoE's GPT-like blocks), in FP32 as APTMoE fine-tunes.
// Threads split the tokens; each keeps its own weight gradients, summed at the end, which is how
// a CPU expert kernel avoids write sharing.
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

namespace moe::calibrate {

struct ExpertShape {
  int64_t hidden = 1024;
  int64_t ffn = 4096;
  bool gated = false;
  double forward_flops(int64_t tokens) const;  // 2 T h g per matrix
};

struct ExpertWeights {
  Eigen::MatrixXf w1, w3, w2;  // [h x g], [h x g] (gated only), [g x h]
};
struct ExpertGrads {
  Eigen::MatrixXf dx, dw1, dw3, dw2;
};

ExpertWeights random_expert(const ExpertShape& s, uint32_t seed);
Eigen::MatrixXf random_tokens(int64_t tokens, int64_t hidden, uint32_t seed);

// Forward and backward (given dY) over `threads` threads.
Eigen::MatrixXf expert_forward(const ExpertShape& s, const ExpertWeights& w,
                               const Eigen::MatrixXf& x, int threads);
// The backward's token-by-width intermediates kept between calls: a CPU expert kernel keeps its
// buffers, and fresh multi-megabyte allocations would time page faults instead of its math.
struct BackwardWorkspace {
  Eigen::MatrixXf h, da, db;  // activation, and the gradients at the up projections' outputs
};
void expert_backward(const ExpertShape& s, const ExpertWeights& w, const Eigen::MatrixXf& x,
                     const Eigen::MatrixXf& dy, int threads, ExpertGrads& out,
                     BackwardWorkspace& workspace);

struct CpuExpertTiming {
  int64_t tokens = 0;
  int threads = 1;
  double forward_s = 0, backward_s = 0;  // medians
  double forward_flops = 0, backward_flops = 0;
  double max_relative_error = 0;  // forward output vs a float64 product on sampled rows
};

// Warm-up, then the median of `repeats` runs of each pass on random inputs; checks the forward
// output against a float64 reference on a few rows.
CpuExpertTiming time_cpu_expert(const ExpertShape& s, int64_t tokens, int threads, int repeats);

}  // namespace moe::calibrate
