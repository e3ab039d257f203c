// What moeplan simulate prints for a GPU-resident plan: the simulated iterations beside the
// planner's, per-stage busy and wait shares, memory and out-of-memory events, as text or as one
// JSON document.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "planner/plan.h"
#include "planner/time_model.h"
#include "simulator/training_sim.h"

namespace moe::cli {

struct SimulatedRun {
  const ModelSpec& model;
  const ClusterSpec& cluster;
  const TimeContext& ctx;
  const PlanChoice& choice;
  const sim::TrainingReport& report;
  const TimeBreakdown& predicted;  // the planner's, as the search scores the plan
  std::string routing;             // the routing generator's description
  uint64_t seed = 1;
  int64_t iterations = 1;
  bool every_gpu = false;
  bool pxn = true;
  double alpha = 1.0;  // the memory budget simulated
  double wall_s = 0;   // the simulation's own run time
  std::string trace;   // where the trace went (empty: none)
  // --measured-log: the run's typical iteration from its Megatron-LM training log (the median
  // past the first) and how many iterations it logged.
  std::optional<double> measured_ms;
  size_t logged_iterations = 0;
};

void print_simulation_json(const SimulatedRun& run);
void print_simulation_text(const SimulatedRun& run);

}  // namespace moe::cli
