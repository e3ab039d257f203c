// plan --explain: the best plan's layers operator by operator. Each operator's forward time
// stands beside the work it prices (a GEMM's FLOPs, a memory-bound kernel's HBM bytes, a
// collective's size) and the rate that implies, so a line of the breakdown traces back to a
// shape, a byte count and an efficiency curve.
#pragma once

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "planner/time_model.h"

namespace moe::cli {

// One layer of each kind the model has (MoE or dense FFN; softmax or linear attention), one
// micro-batch on one GPU. `ctx` must have the plan's world (which groups leave the node).
void print_layer_explanation(const TimeContext& ctx, const Plan& plan);
// {"layers": [...], "output_head": {...}}: each op's time_s, flops, peak_flops and bytes.
nlohmann::json layer_explanation_json(const TimeContext& ctx, const Plan& plan);

}  // namespace moe::cli
