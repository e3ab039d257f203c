// One change at a time to a run a user has: each Megatron-LM switch or size the run could turn,
// priced as that run with only it changed. Where the search answers "which layout is best", this
// answers "what should I change first in the launch I have", in Megatron's own flags.
//
// The changes: EP/TP communication overlap, fused permutation, Transformer Engine's loss, CUDA
// graphs (attention and router, or the full iteration), each other dispatcher priced for the
// layout, recompute (none, selective with moe_act and layernorm, full), BF16 gradient
// reduction, FP8 (tensorwise) where the GPU has an FP8 peak, the micro-batch doubled or halved,
// the virtual stages doubled or halved, each other ZeRO stage, fused attention, and without the
// optimizer's or the activations' CPU offload. Only what Megatron-Core runs is offered (no
// MegaScale-MoE or MemFine mechanism); a change the layout cannot take (a micro-batch the batch
// does not split into, stages the layers do not divide into) is left out.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "planner/search.h"
#include "planner/time_model.h"

namespace moe {

struct OneChange {
  std::string change;  // what differs, as Megatron-LM's arguments say it
  PlanChoice choice;
  PlanScore score;  // score.memory.fits: whether the changed run fits
};

// Every change `run` can take, priced, the fitting ones first and each group by iteration time.
// An offload (APTMoE) plan has none.
std::vector<OneChange> one_change_at_a_time(const TimeContext& ctx, const PlanChoice& run,
                                            Bytes capacity, double alpha,
                                            std::optional<Bytes> static_override);

}  // namespace moe
