// Anchoring the time model to one measured run: the single factor f by which every efficiency
// (GEMM curve, fused attention, memory-bound kernels, and with `communication` the collective
// and copy curves too) is scaled so that a plan's predicted iteration equals the iteration time
// a user measured (Megatron-LM's "elapsed time per iteration (ms)"). The rest of the model
// (FLOPs, bytes, schedule, overlap) stays as it is, so other layouts are predicted relative to
// that run. Compute-only anchoring suits a cluster whose collectives were calibrated apart.
#pragma once

#include "planner/efficiencies.h"
#include "planner/plan.h"
#include "planner/time_model.h"

namespace moe {

// Every efficiency times f (curves keep their shape and reference rate; memory_bound stays at
// most 1, curve points at most 1.5) and the host costs over f. The other
// overheads in seconds are unchanged.
Efficiencies scale_efficiencies(const Efficiencies& e, double f, bool communication);

struct AnchorFit {
  double scale = 1;        // f
  Seconds before, after;   // the plan's predicted iteration at f = 1 and at f
  bool converged = false;  // |after - measured| within 0.1 % (caps can stop it short)
  // The clock the GPUs' power limit leaves the plan at f (planner/power_limit.h): slower compute
  // is busier compute, so part of a slow run can be the limit rather than the curves.
  double compute_clock = 1;
};

// The f in [0.02, 4] that makes estimate_time(ctx with scaled efficiencies, plan) equal
// `measured`, by bisection (the iteration falls monotonically as f grows). Throws ConfigError
// when `measured` is not positive.
AnchorFit fit_anchor(const TimeContext& ctx, const PlanChoice& plan, Seconds measured,
                     bool communication);

}  // namespace moe
