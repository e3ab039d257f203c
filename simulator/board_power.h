// What a simulated run's GPU boards draw: each stage's by the share of the run its compute
// stream was busy, at the plan's clock under its power limit (planner/power_limit.h).
#pragma once

#include "planner/cluster_spec.h"
#include "planner/plan.h"
#include "simulator/training_sim.h"

namespace moe::sim {

struct BoardDraw {
  double watts = 0;             // a GPU's mean over the stages (each holds as many GPUs)
  double tokens_per_joule = 0;  // the run's tokens over what all its boards draw
};

// Zeros for a GPU without a power entry, an offload plan or an empty report.
BoardDraw simulated_board_draw(const GpuPower& board, const PlanChoice& c, const TrainingReport& r);

}  // namespace moe::sim
