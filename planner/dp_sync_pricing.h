// The pricing of a plan's data-parallel syncs, internal to dp_sync_exposure.cpp,
// dp_sync_links.cpp and dp_sync_pacing.cpp: what each sync runs beside, how it shares the
// passes' links, and how ZeRO-2 and -3 pace every micro-batch.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "planner/dp_sync_exposure.h"

namespace moe::dp_sync {

// What a sync runs beside, in the stage's passes (v chunk passes each): that share of a pass's
// time, and of its traffic on each link (interleaved, the chunks a sync meets may carry more or
// less of it than their time's share: dense layers ahead of MoE ones).
struct Beside {
  double time = 1, nic = 1, fabric = 1;
  Beside() = default;
  explicit Beside(double passes) : time(passes), nic(passes), fabric(passes) {}
};

// A stage's sync against the window it hides in.
struct Exposed {
  int64_t stage = 0;
  Seconds slack;      // how long the stage runs passes before its sync's window opens
  Seconds exposure;   // what the sync outlasts its window by (negative: it hides)
  Beside overlapped;  // the stage's passes the sync runs beside
  // Interleaved, the share of the stage's sync the chain holds up to the chunk whose sync
  // shows, (k + 1) / v, and `overlapped` counts the passes beside that much of it; the whole
  // chain runs beside `chain_overlapped`.
  double part = 1;
  Beside chain_overlapped;
};

// A stage's passes with the syncs of ZeRO-2 and -3 on their links, one micro-batch.
struct Paced {
  Seconds forward, backward, nic, fabric;
  // On the DP link: each pass's work there, and what the backward's reduce-scatter leaves
  // running after it (with `shared_reduce`).
  Seconds forward_link, backward_link, backward_tail;
  int64_t stage = 0;
  Seconds pass() const { return forward + backward; }
};

class SyncPricing {
 public:
  SyncPricing(const TimeContext& ctx, const PlanChoice& c, PricedPipeline& pipeline,
              const std::vector<DpSync>& syncs, ScratchContext& scratch)
      : ctx_(ctx),
        c_(c),
        p_(c.parallel),
        pp_(*c.parallel.pp),
        pipeline_(pipeline),
        syncs_(syncs),
        sync_(syncs[static_cast<size_t>(pipeline.slowest_stage)]),
        scratch_(scratch),
        v_(static_cast<double>(*c.parallel.vpp)),
        passes_(traffic_passes(c.recompute)) {
    unfused_ = c;
    unfused_.intra_overlap = false;
  }

  void add_to(TimeBreakdown& out);

 private:
  const StageTimes& stage(int64_t s) const { return pipeline_.stages[static_cast<size_t>(s)]; }
  Seconds chunk_pass(int64_t s, int64_t k, bool backward_pass);
  const DpSync& sync_of(int64_t s) const { return syncs_[static_cast<size_t>(s)]; }
  // Each stage's sync against its window, priced once per direction (ZeRO-1 and -2 ask
  // twice), and the stage whose sync shows most.
  const std::vector<Exposed>& exposed(bool backward_pass);
  const Exposed& most_exposed(bool backward_pass);
  std::vector<Exposed> price_exposed(bool backward_pass);
  double overlapped(int64_t s, bool backward_pass) const;
  // The plan whose layers carry the links' traffic, and its layers by kind: intra-operator
  // overlap's fused communication counts as the same bytes unfused.
  const PlanChoice& traffic_choice() const { return c_.intra_overlap ? unfused_ : c_; }
  const LayerKinds& traffic_kinds();
  LinkLoads traffic_of(int64_t stage);
  LinkLoads pass_traffic(const LinkLoads& both, bool backward_pass) const;
  LinkLoads chunk_traffic(int64_t s, int64_t k);
  std::pair<Seconds, Seconds> window(int64_t stage, Seconds time, Seconds in_node,
                                     bool backward_pass, Beside beside, bool from_start = false);
  // The stage's layers and its last layer's extras at their own pace, and with links slowed:
  // both that the sync shares, or one of them (the same where it shares one).
  struct Slowed {
    const LayerKinds* kinds = nullptr;
    StageTimes last;
  };
  struct SlowedLinks {
    Slowed own, both, nic, fabric;
  };
  std::pair<Seconds, Seconds> from_pass_start(int64_t stage, Seconds on_nic, Seconds on_fabric,
                                              bool backward_pass, const SlowedLinks& slowed);
  // The scratch context with the NICs `nic` times and the node's links `fabric` times slower.
  // There is one: each call overwrites the rates the last one returned, so price what needs
  // them before asking for other rates.
  TimeContext& slowed_links(double nic, double fabric);
  Seconds whole_chain_stretch(const Exposed& e, bool backward_pass, Seconds shown_stretch);
  Seconds hops_beside_syncs(bool backward_pass);
  Seconds reduce_scatter_once(const Exposed& e);
  Seconds all_gather_once(const Exposed& e);
  Paced paced(int64_t s, bool shared_reduce = false);
  Paced pacing_stage();
  Seconds reduce_stream_end(int64_t microbatches, const Paced& paced);

  const TimeContext& ctx_;
  const PlanChoice& c_;
  const ParallelConfig& p_;
  const int64_t pp_;
  PricedPipeline& pipeline_;
  const std::vector<DpSync>& syncs_;
  const DpSync& sync_;  // the slowest stage's
  ScratchContext& scratch_;
  const double v_;
  const double passes_;
  int64_t microbatches_ = 0;         // the iteration's, once add_to has it
  std::vector<Exposed> exposed_[2];  // each stage's, forward and backward (empty: not priced)
  // Intra-operator overlap's layers priced without it, once, however many windows ask.
  PlanChoice unfused_;
  std::optional<LayerKinds> unfused_kinds_;
};

}  // namespace moe::dp_sync
