// Stage and chunk passes from their layers: the sums estimate_time and the DP sync pricing
// (dp_sync_exposure.h) build on. Internal to the planner; the public view is time_model.h.
//
// Every layer of a kind costs the same (MoE or dense FFN, softmax or Gated DeltaNet attention),
// so a candidate prices one layer of each kind and a stage adds them by count: the search's hot
// path is an add a kind, not a layer.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "planner/pipeline_schedule.h"
#include "planner/plan.h"
#include "planner/time_model.h"

namespace moe {

// One layer's forward and backward for one micro-batch at the plan's FCDA chunk count
// (time_model.cpp; layer_pass_times is the same at the layer's own stage's count).
StageTimes one_layer_times(const TimeContext& ctx, const PlanChoice& c, const LayerParams& lp,
                           bool moe_layer);

// One layer of each kind, priced once per candidate.
struct LayerKinds {
  // In pricing order: MoE, dense, then their linear-attention twins (kLayerKinds).
  static constexpr size_t kCount = kLayerKinds;
  using Times = std::array<StageTimes, kCount>;
  Times times;  // at the plan's FCDA chunk count
  // A MACT plan whose stages chunk differently (PlanChoice::stage_chunks): each stage's kinds
  // at its own count. Empty otherwise.
  std::vector<Times> by_stage;
  const Times& at(int64_t stage) const {
    return by_stage.empty() ? times : by_stage[static_cast<size_t>(stage)];
  }
  const StageTimes& of(const TimeContext& ctx, int64_t stage, size_t layer) const {
    return at(stage)[ctx.layer_kinds[layer]];
  }
};

// Each kind priced once (and once more for each other chunk count a MACT plan's stages use).
LayerKinds layer_kinds(const TimeContext& ctx, const PlanChoice& c);
// Stage `stage`'s forward and backward for one micro-batch: its layers by kind, then the output
// head and MTP modules where they sit, and activation offloading's copies at each pass's edges.
StageTimes stage_from(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds,
                      int64_t stage);
// What a stage's first chunk runs besides its layers, one micro-batch: on the first stage the
// embedding's dense gradient at the end of the backward (layer_ops.h, embedding_gradient_op).
StageTimes before_first_layer(const TimeContext& ctx, const PlanChoice& c, int64_t stage);
// What a stage's last chunk runs after its layers, one micro-batch: on the last stage the
// output head (vocab-parallel over TP) and its loss, and the MTP modules where they sit (the
// last stage, unless a layout puts them on another).
StageTimes after_last_layer(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds,
                            int64_t stage);
// mtp_stage_times with the layer kinds already priced.
StageTimes mtp_times(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds);
// Every chunk of every stage: what the schedule walk (schedule_makespan) takes.
std::vector<ChunkTimes> chunk_times(const TimeContext& ctx, const PlanChoice& c,
                                    const LayerKinds& kinds);
// The lightest chunk's forward, and the lightest and heaviest chunk's forward and backward,
// without building the chunk lists (most candidates stop here).
struct ChunkSpread {
  Seconds lightest_forward, lightest, heaviest;
};
ChunkSpread chunk_spread(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds);

// How many forwards' worth of TP/EP/CP traffic a micro-batch puts on the links: forward,
// backward, and what recompute replays: the whole forward (full) or its all-gather half
// (MegaScale's rematerialization), which the link roofline and the DP sync windows carry too.
double traffic_passes(Recompute r);

// TP, EP and CP traffic by the link it takes: the NIC for groups that leave the node, the
// node's fabric for the rest (TP and EP on one link add up).
struct LinkLoads {
  Seconds nic, fabric;
  // The one a sync takes: the NICs where its group crosses nodes, else the node's fabric.
  Seconds on(bool crosses_nodes) const { return crosses_nodes ? nic : fabric; }
};
LinkLoads link_loads(const TimeContext& ctx, const ParallelConfig& p, Seconds tp, Seconds ep,
                     Seconds cp);
// A stage's TP, EP and CP communication on its links, less what holds none (its latency).
LinkLoads link_traffic(const TimeContext& ctx, const ParallelConfig& p, const StageTimes& st);

}  // namespace moe
