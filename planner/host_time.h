// Host time: what the framework's CPU thread spends issuing a layer's kernels (Python, PyTorch
// dispatch, Transformer Engine's modules, the launches themselves).
//
// A GPU cannot run a kernel before the host has issued it. Where a layer's kernels are long
// the host runs ahead and its time hides; where they are short (micro-batch 1, high TP, many
// small experts) the GPU waits for the host. Megatron's token dispatchers copy the token
// counts to the host in every MoE layer's forward (the grouped GEMM's split sizes), which
// drains the queue the host had built, so a layer cannot borrow the lead of the one before:
// each layer's forward takes at least its host time, and its backward (with what recompute
// replays) at least its own. The planner adds what that floor exposes; the simulator runs the
// host as a stream of its own with the same costs. CUDA graphs replay captured parts without
// host work.
#pragma once

#include "planner/plan.h"
#include "planner/time_model.h"

namespace moe {

// One layer, one micro-batch, on one GPU's host thread.
struct LayerHostTime {
  Seconds forward, backward;
  Seconds recompute;  // the forward work recompute replays before the backward
};

// The layer's host costs (Efficiencies::host) less what the plan's CUDA graphs capture, split
// evenly between forward and backward (autograd issues about one backward op per forward op).
LayerHostTime layer_host_time(const TimeContext& ctx, const PlanChoice& c, bool moe_layer);

}  // namespace moe
