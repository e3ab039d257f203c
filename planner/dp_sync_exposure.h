// What the data-parallel syncs add to an iteration beyond its passes, bubble and pipeline hops:
// the gradient reduce-scatters and weight all-gathers of ZeRO 1-3 that outlast the windows they
// hide in, and what they cost the passes whose links they share. Internal to the planner:
// estimate_time (time_model.h) prices the pipeline, then adds these.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "planner/pipeline_schedule.h"
#include "planner/plan.h"
#include "planner/stage_pricing.h"
#include "planner/time_model.h"

namespace moe {

// A copy of a TimeContext whose link rates the sync pricing overwrites: the caller's own (a
// search keeps one per thread instead of copying the context's curves and layer list once or
// twice a candidate), or one made on first use.
class ScratchContext {
 public:
  ScratchContext(const TimeContext& ctx, TimeContext* given) : ctx_(ctx), given_(given) {}
  TimeContext& get() {
    if (given_) return *given_;
    if (!own_) own_ = ctx_;
    return *own_;
  }

 private:
  const TimeContext& ctx_;
  TimeContext* given_;
  std::optional<TimeContext> own_;
};

// The pipeline as estimate_time priced it before its DP syncs.
struct PricedPipeline {
  std::vector<StageTimes> stages;  // each stage's passes, one micro-batch
  int64_t slowest_stage = 0;       // the one whose passes pace the steady state
  Seconds per_mb;                  // its forward + backward
  std::vector<Seconds> hops;       // each boundary's hop (boundary_hops); empty without PP
  // Under 2p micro-batches without interleaving the schedule is walked chunk by chunk: the
  // chunks and the makespan of that walk.
  bool walk_few = false;
  std::vector<ChunkTimes> few_chunks;
  Seconds few_walked;
  // The layers priced by kind, for each model chunk's passes where the stages interleave.
  const LayerKinds* kinds = nullptr;
  // Those passes (chunk_times), where the interleaved schedule was walked; empty otherwise,
  // and priced from `kinds` when a sync's windows need them.
  std::vector<ChunkTimes> chunks;
};

// Adds to `out` (whose microbatches, bubble and pp_comm are set) the syncs' exposure: dp_comm
// and which stage's reduce-scatter and all-gather show. `syncs` holds each stage's
// (dp_sync_times). Prices stretched passes in `scratch`.
void add_dp_sync_exposure(const TimeContext& ctx, const PlanChoice& c, PricedPipeline& pipeline,
                          const std::vector<DpSync>& syncs, ScratchContext& scratch,
                          TimeBreakdown& out);

}  // namespace moe
