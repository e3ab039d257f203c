// The FLOPs Megatron-LM's training log counts: `num_floating_point_operations` of
// megatron/training/training.py (transformer_flops, 2025), so a plan's prediction reads in the
// unit of the log line users already watch, "throughput per GPU (TFLOP/s/GPU)".
//
// Its conventions, which differ slightly from model_stats' count: the router is not counted,
// attention is causal (QK^T and AV halved), MTP modules count as extra layers of the last layer's
// kind plus their norms and projection, and the output head uses the padded vocabulary (a
// multiple of 128 x TP, --make-vocab-size-divisible-by).
#pragma once

#include <cstdint>

#include "planner/model_spec.h"
#include "planner/units.h"

namespace moe {

// FLOPs of one training iteration (forward and backward, no recompute) of `global_batch`
// sequences of `seq_len` tokens, as Megatron-LM counts them with tensor parallelism `tp`.
Flops megatron_iteration_flops(const ModelSpec& m, int64_t seq_len, int64_t global_batch,
                               int64_t tp);

// The vocabulary Megatron-LM pads to: the next multiple of 128 x tp.
int64_t megatron_padded_vocab(int64_t vocab, int64_t tp);

// What its log line would print for an iteration of `iteration` seconds on `gpus` GPUs:
// throughput per GPU in TFLOP/s.
double megatron_logged_tflops(const ModelSpec& m, int64_t seq_len, int64_t global_batch, int64_t tp,
                              int64_t gpus, Seconds iteration);

}  // namespace moe
