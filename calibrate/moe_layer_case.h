// One MoE layer of a plan as `moeplan execute` runs it on one GPU: the busiest EP rank's local
// experts and the rows the plan says they receive (skew included), with the dispatch and combine
// done locally. The received rows are drawn from "virtual tokens", each routed to top-k distinct
// local experts, so the permutation (dispatch), the experts and the weighted unpermutation
// (combine) run exactly as Megatron-Core's token dispatcher runs them after the all-to-all; the
// all-to-all itself needs a second rank and is not part of this case.
//
// FCDA (MemFine eq. 6-7) cuts the virtual tokens into c contiguous chunks; each chunk is
// dispatched, computed and combined on its own, and recomputed chunk by chunk in backward.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/plan.h"
#include "planner/time_model.h"

namespace moe::calibrate {

struct MoeLayerCase {
  int64_t hidden = 0;                // h
  int64_t ffn = 0;                   // g: the expert FFN width on this rank (cut over expert TP)
  bool gated = true;                 // SwiGLU: one fused [h x 2g] up/gate GEMM, then silu(a) * b
  int64_t top_k = 1;                 // routes per virtual token, all to distinct local experts
  int64_t tokens = 0;                // virtual tokens
  std::vector<int64_t> expert_rows;  // rows each local expert receives; sum = tokens x top_k
  int64_t rows() const;
  int64_t experts() const { return static_cast<int64_t>(expert_rows.size()); }
};

// Throws InputError (naming --layer) unless `layer` of `m` carries routed experts.
void check_moe_layer(const ModelSpec& m, int64_t layer);

// The case of model layer `layer` under plan `c` (micro-batch tokens b s / (t cp), rows of the
// busiest EP rank by the context's skew, spread over its experts by the skew's proportions or
// evenly). Throws InputError when the layer has no routed experts.
MoeLayerCase layer_case_of(const TimeContext& ctx, const PlanChoice& c, int64_t layer);

// A smaller case of the same widths: `tokens` tokens over the first `experts` experts (at least
// top-k), rows in the same proportions. What execute checks against the CPU reference, where
// the full case would take minutes and gigabytes of host memory.
MoeLayerCase shrink(const MoeLayerCase& c, int64_t tokens, int64_t experts);

// Which rows a chunk's dispatch gathers and how its combine sums them back.
struct ChunkRouting {
  int64_t first_token = 0, tokens = 0;  // the chunk's virtual tokens [first, first + tokens)
  std::vector<int64_t> expert_rows;     // rows per local expert in this chunk
  std::vector<int32_t> row_token;       // row -> token (global index), rows sorted by expert
  std::vector<float> row_weight;        // the gate weight of that route
  std::vector<int32_t> token_rows;      // tokens x top_k: the chunk-local row of each route
  std::vector<float> token_weights;     // tokens x top_k: its gate weight
  int64_t rows() const { return static_cast<int64_t>(row_token.size()); }
};

// Routes every virtual token to top-k distinct experts so that each expert receives exactly
// its expert_rows (the most-remaining-quota expert first, tokens then shuffled by `seed`), gate
// weights random and summing to 1 per token, and cuts the result into `chunks` chunks.
std::vector<ChunkRouting> route_in_chunks(const MoeLayerCase& c, int64_t chunks, uint32_t seed);

}  // namespace moe::calibrate
