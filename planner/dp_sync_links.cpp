// A DP sync on the links its stage's passes take: the TP/EP/CP traffic it meets there, and
// the passes priced with those links slowed while it runs (SyncPricing::window).
#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "planner/dp_sync_pricing.h"
#include "planner/parallel.h"
#include "planner/stage_pricing.h"

namespace moe::dp_sync {

// A stage's traffic by link, fused into GEMMs or not (unfused, the same bytes show as TP/EP);
// only priced when there is a sync to share with (the search scores most candidates before).
const LayerKinds& SyncPricing::traffic_kinds() {
  if (!c_.intra_overlap) return *pipeline_.kinds;
  if (!unfused_kinds_) unfused_kinds_ = layer_kinds(ctx_, unfused_);
  return *unfused_kinds_;
}

LinkLoads SyncPricing::traffic_of(int64_t s) {
  const StageTimes traffic =
      c_.intra_overlap ? stage_from(ctx_, unfused_, traffic_kinds(), s) : stage(s);
  return link_traffic(ctx_, p_, traffic);
}

// Model chunk k's layers' traffic on stage s, as traffic_of prices the stage's (what the output
// head and embedding add is left out: the chunks' shares weigh the layers).
// The layers are counted by kind, then each kind's traffic priced once (as stage_from does).
LinkLoads SyncPricing::chunk_traffic(int64_t s, int64_t k) {
  const LayerRange layers = chunk_layers(*ctx_.model, p_, s, k);
  std::array<int64_t, LayerKinds::kCount> count{};
  for (int64_t l = layers.begin; l < layers.end; ++l)
    ++count[ctx_.layer_kinds[static_cast<size_t>(l)]];
  const LayerKinds::Times& kinds = traffic_kinds().at(s);
  LinkLoads sum;
  for (size_t kind = 0; kind < LayerKinds::kCount; ++kind) {
    if (count[kind] == 0) continue;
    const LinkLoads t = link_traffic(ctx_, p_, kinds[kind]);
    sum.nic += t.nic * static_cast<double>(count[kind]);
    sum.fabric += t.fabric * static_cast<double>(count[kind]);
  }
  return sum;
}

// Of a micro-batch's traffic on each link (forward and backward), one pass's: the forward's
// share of traffic_passes, the backward the rest (with what recompute replays).
LinkLoads SyncPricing::pass_traffic(const LinkLoads& both, bool backward_pass) const {
  const LinkLoads forward{both.nic / passes_, both.fabric / passes_};
  return backward_pass ? LinkLoads{both.nic - forward.nic, both.fabric - forward.fabric} : forward;
}

// The all-gather behind the first forward (ZeRO 1-2) and ZeRO-1's reduce-scatter behind the
// last backward take the links that pass's TP/EP/CP traffic takes: the NICs for what crosses
// nodes, NVLink for what stays in the node (a hierarchical sync's in-node stage, or all of it
// when DP stays in the node). While both run each gets half a link, so the pass sees that
// link slower by the share of its traffic there the sync's time covers (communication fused
// into GEMMs included), and the sync takes as much longer: what the sync costs beyond its own
// exposed tail. (The simulator shares them flow by flow; DeepSeekMoE-16B with EP = DP = 16
// over two 8 x H800 nodes lost 12 ms of 68 to it.)
// One window: the sync's time on each link against the pass's traffic there (forward or
// backward share) on `stage`; returns the stretched pass and the sync's own stretch.
std::pair<Seconds, Seconds> SyncPricing::window(int64_t s, Seconds time, Seconds in_node,
                                                bool backward_pass, Beside beside,
                                                bool from_start) {
  const StageTimes& own = stage(s);
  const Seconds unshared = backward_pass ? own.backward : own.forward;
  if (time.value() <= 0) return std::pair{unshared, time};
  const auto [nic_comm, fabric_comm] = pass_traffic(traffic_of(s), backward_pass);
  const Seconds on_nic = sync_.crosses_nodes ? time - in_node : Seconds(0);
  const Seconds on_fabric = sync_.crosses_nodes ? in_node : time;
  // A sync shorter than its pass meets that share of the pass's traffic (met below) and
  // stretches the one pass; a longer one runs beside `beside` passes. Beside less than one
  // pass (an interleaved chain's first chunks), it meets at most that share of one.
  const double within = std::min(1.0, beside.time);
  // The share of the pass's traffic on a link the sync meets, and what the sync waits for the
  // pass there; the layers it meets run at half the link.
  struct Sharing {
    Seconds delay;
    double met = 0;
    double passes = 0;  // the passes' worth of traffic met, which stretches
    double slowdown() const { return met > 0 ? 2.0 : 1.0; }
  };
  // The sync holds the link for its own time and the pass's traffic is spread over the pass
  // (or fills it, where the pass is link-bound), so the two meet for that share of the traffic:
  // it goes at half speed for that long, and the sync waits as long. (Every byte of the pass's
  // traffic at half speed while the sync ran, GPT-39B over 240 H800 with Ulysses and ZeRO-3,
  // its 0.2 s in-node gathers beside 0.1 s of all-to-all in a 0.47 s forward: the planner 14 %
  // over the simulator; shipped pairs' mean |diff| 1.05 -> 0.98 %, extremes -7.7 -> -4.3 %.)
  // The layers it meets run at half the link while the rest run at the whole: the pass priced
  // at half the link stretches by that share, not the pass at a slowdown spread over all its
  // layers. Spread thin, a slowdown hides under the layers' own floors (the host issuing them,
  // their compute) where the layers the sync meets do not: a 9.5 ms weight gather over the NIC
  // beside a host-bound two-layer forward took its first layer from 7.5 to 9.0 ms in the
  // simulator, the planner 10.1 % under it (MoNTA O1 over the 4-GPU A800 nodes; shipped pairs'
  // mean |diff| 0.91 -> 0.88 %, six hunt seeds' 1.09 -> 1.00 %).
  auto sharing = [&](Seconds sync_part, Seconds comm, double passes) {
    if (sync_part.value() <= 0 || comm.value() <= 0) return Sharing{};
    const Seconds traffic = comm * passes;
    const Seconds room = std::max(traffic, unshared * within);
    if (room.value() <= 0) return Sharing{};
    const double met = std::min(1.0, sync_part / room);
    return Sharing{traffic * met, met, passes * met};
  };
  const Sharing nic_share = sharing(on_nic, nic_comm, beside.nic);
  const Sharing fabric_share = sharing(on_fabric, fabric_comm, beside.fabric);
  const Seconds delay = nic_share.delay + fabric_share.delay;
  // Nothing shared: the pass as it was (most candidates; no second pricing).
  if (delay.value() <= 0) return std::pair{unshared, time};
  const TimeContext& shared = slowed_links(nic_share.slowdown(), fabric_share.slowdown());
  const LayerKinds half = layer_kinds(shared, c_);
  if (from_start && *p_.vpp == 1 && beside.time <= 1.0) {
    SlowedLinks slowed;
    slowed.own = {pipeline_.kinds, after_last_layer(ctx_, c_, *pipeline_.kinds, s)};
    slowed.both = {&half, after_last_layer(shared, c_, half, s)};
    slowed.nic = slowed.fabric = slowed.both;
    // Sharing both links, a hierarchical sync takes them one after the other, and the layers
    // each step covers run with that link slowed alone. (Both slowed wherever either step ran,
    // a MoE layer's backward beside the in-node step of its reduce-scatter over PCIe priced its
    // expert all-to-alls at half the NIC the step across had not reached: 5.2 % over the
    // simulator.)
    // Where the sync meets traffic on one link only, the step on the other covers layers
    // at their own pace. (Taken as slowed on the met link too, the step across of a
    // hierarchical reduce-scatter, which met no NIC traffic, stretched the whole backward as if
    // its in-node step ran all along: 2.5 % over the simulator.)
    if (!(nic_share.met > 0)) slowed.nic = slowed.own;
    if (!(fabric_share.met > 0)) slowed.fabric = slowed.own;
    std::optional<LayerKinds> nic_only, fabric_only;
    if (nic_share.met > 0 && fabric_share.met > 0) {
      const TimeContext& nic_slowed = slowed_links(2.0, 1.0);
      nic_only = layer_kinds(nic_slowed, c_);
      slowed.nic = {&*nic_only, after_last_layer(nic_slowed, c_, *nic_only, s)};
      const TimeContext& fabric_slowed = slowed_links(1.0, 2.0);
      fabric_only = layer_kinds(fabric_slowed, c_);
      slowed.fabric = {&*fabric_only, after_last_layer(fabric_slowed, c_, *fabric_only, s)};
    }
    const auto [pass, synced] = from_pass_start(s, on_nic, on_fabric, backward_pass, slowed);
    return std::pair{pass, time + synced};
  }
  const StageTimes st = stage_from(shared, c_, half, s);
  // The pass at half the link where the sync meets it, for the passes' worth it meets.
  const double met = std::max(nic_share.passes, fabric_share.passes);
  return std::pair{unshared + ((backward_pass ? st.backward : st.forward) - unshared) * met,
                   time + delay};
}

TimeContext& SyncPricing::slowed_links(double nic, double fabric) {
  TimeContext& shared = scratch_.get();
  shared.links = ctx_.links;
  shared.links.inter = shared.links.inter / nic;
  shared.links.intra = shared.links.intra / fabric;
  // PCIe nodes price a group's in-node collectives at the rate its switches leave it, which
  // the sync slows alike (a TP pair under one switch kept its own rate, and its backward
  // beside the expert gradients' all-reduce no stretch: 12.9 % under the simulator).
  for (GroupRate& g : shared.links.shared_groups) {
    g.ring = g.ring / fabric;
    g.alltoall = g.alltoall / fabric;
  }
  return shared;
}

// A sync that starts with its pass (ZeRO-1's reduce-scatter with the last backward, ZeRO 1-2's
// all-gather ahead of the first forward) meets the pass's layers in the order they run. On each
// link it runs its own time plus what it waits for the traffic it meets there, and covers that
// much of the pass, less what it stretches the covered layers by: each covered layer runs that
// share of itself at half the link (priced in `half` on `shared`), its GPU work stretching by
// the share, what the host takes to issue it still its floor. A pass busy on the link is
// covered for the sync's own time; one waiting for its host, for as long as the sync lasts.
// Returns the pass and the sync's delay. (Spread evenly over the pass, one MoE layer and an
// MTP module's gradients ahead of a dense layer met less than the simulator's reduce-scatter,
// 5.3 % under it; one host-bound layer a stage, a fifth of it beside a 1 ms gather, stretched
// by a fifth of its whole slowdown where the host hid it all: 5.3 % over.)
std::pair<Seconds, Seconds> SyncPricing::from_pass_start(int64_t s, Seconds on_nic,
                                                         Seconds on_fabric, bool backward_pass,
                                                         const SlowedLinks& slowed) {
  auto pass = [&](const StageTimes& t) { return backward_pass ? t.backward : t.forward; };
  auto host = [&](const StageTimes& t) { return backward_pass ? t.host_backward : t.host_forward; };
  // The pass's pieces in the order they run: time, GPU work alone and with both links, the
  // NIC or the fabric at half, traffic.
  struct Piece {
    Seconds time, gpu, slowed_gpu, nic_slowed_gpu, fabric_slowed_gpu, nic, fabric;
    int64_t layer = -1;  // the model's layer, or -1 for what runs before or after the layers
  };
  std::vector<Piece> pieces;
  auto gpu = [&](const StageTimes& t) { return pass(t) - host(t); };
  auto add = [&](const StageTimes& own, const StageTimes& both, const StageTimes& nic_slowed,
                 const StageTimes& fabric_slowed, const StageTimes& traffic) {
    const Seconds time = pass(own);
    if (!(time.value() > 0)) return;
    const LinkLoads loads = pass_traffic(link_traffic(ctx_, p_, traffic), backward_pass);
    pieces.push_back({time, gpu(own), gpu(both), gpu(nic_slowed), gpu(fabric_slowed),
                      std::min(time, loads.nic), std::min(time, loads.fabric)});
  };
  const LayerRange layers = chunk_layers(*ctx_.model, p_, s, 0);
  const StageTimes first = before_first_layer(ctx_, c_, s);
  const StageTimes& last = slowed.own.last;
  const StageTimes last_traffic = after_last_layer(ctx_, traffic_choice(), traffic_kinds(), s);
  auto layer = [&](int64_t l) {
    const auto i = static_cast<size_t>(l);
    const size_t before = pieces.size();
    add(slowed.own.kinds->of(ctx_, s, i), slowed.both.kinds->of(ctx_, s, i),
        slowed.nic.kinds->of(ctx_, s, i), slowed.fabric.kinds->of(ctx_, s, i),
        traffic_kinds().of(ctx_, s, i));
    if (pieces.size() > before) pieces.back().layer = l;
  };
  auto add_last = [&] {
    add(last, slowed.both.last, slowed.nic.last, slowed.fabric.last, last_traffic);
  };
  if (backward_pass) {
    add_last();
    for (int64_t l = layers.end - 1; l >= layers.begin; --l) layer(l);
    add(first, first, first, first, first);
  } else {
    add(first, first, first, first, first);
    for (int64_t l = layers.begin; l < layers.end; ++l) layer(l);
    add_last();
  }
  // The pieces each link's sync covers, as far as `reach` into the pass: what it waits for
  // there, and what the covered layers stretch by, all of them and those on that link.
  struct Met {
    Seconds delay[2], stretch, stretch_on[2];
  };
  // A hierarchical sync (MegaScale App. A.1) runs its two steps one after the other on the DP
  // stream: a reduce-scatter in the node first, then across; an all-gather across first. The
  // second step covers the pass from where the first's reach ends.
  const int first_link = backward_pass ? 1 : 0;
  auto partly = [](double share) { return share > 0 && share < 1; };
  auto meet = [&](const Seconds(&reach)[2]) {
    Met out;
    Seconds from[2];
    from[1 - first_link] = reach[first_link];
    Seconds at;
    for (const Piece& q : pieces) {
      double share[2];
      for (int k = 0; k < 2; ++k) {
        const Seconds begin = std::max(at, from[k]);
        const Seconds end = std::min(at + q.time, from[k] + reach[k]);
        share[k] = end > begin ? (end - begin) / q.time : 0.0;
        out.delay[k] += (k == 0 ? q.nic : q.fabric) * share[k];
      }
      at += q.time;
      // Where both steps cover the piece it runs with both links slowed, elsewhere with the
      // one link its step holds.
      const double most = std::max(share[0], share[1]);
      const double together = std::min(share[0], share[1]);
      // A layer the sync covers in part carries the sync's bytes on that share of its link
      // time: priced with the link that much slower, a layer with room on the link (its
      // compute the longer) absorbs them where a share of its stretch at half the link would
      // not. (That share, a 20 ms reduce-scatter beside a compute-bound MoE backward whose
      // NIC had 10 ms to spare: 4.7 % over the simulator.)
      const Seconds slowed_gpu =
          q.layer >= 0 && (partly(share[0]) || partly(share[1]))
              ? gpu(layer_pass_times(slowed_links(1.0 + share[0], 1.0 + share[1]), c_, q.layer))
              : q.gpu + (q.slowed_gpu - q.gpu) * together +
                    (q.nic_slowed_gpu - q.gpu) * (share[0] - together) +
                    (q.fabric_slowed_gpu - q.gpu) * (share[1] - together);
      const Seconds stretch = std::max(Seconds(0), slowed_gpu - q.time);
      out.stretch += stretch;
      for (int k = 0; k < 2; ++k)
        if (most > 0) out.stretch_on[k] += stretch * (share[k] / most);
    }
    return out;
  };
  // It covers its own time of the pass, and then what it waited for the traffic it met, less
  // what it stretched the pass by: once more, which is as far as the pieces' order holds (let
  // run to a fixed point, host-bound layers' traffic taken as spread over their issue time met
  // more of it than the simulator's, whose attention runs first: 6.0 % over it).
  const Seconds own[2] = {on_nic, on_fabric};
  Seconds reach[2] = {on_nic, on_fabric};
  const Met once = meet(reach);
  for (int k = 0; k < 2; ++k)
    reach[k] = own[k].value() > 0
                   ? std::max(Seconds(0), own[k] + once.delay[k] - once.stretch_on[k])
                   : Seconds(0);
  const Met met = meet(reach);
  // The rest of the pass (its sends' stretch, offload copies at its edges) carries no traffic
  // of its own.
  return std::pair{pass(stage(s)) + met.stretch, met.delay[0] + met.delay[1]};
}

}  // namespace moe::dp_sync
