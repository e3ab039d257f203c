#include "planner/dp_sync_exposure.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "planner/parallel.h"
#include "planner/stage_pricing.h"

namespace moe {

namespace {

// ZeRO-1 (distributed optimizer): one gradient reduce-scatter and one parameter all-gather per
// iteration, hidden behind the last backward / first forward. ZeRO-2 keeps no full gradient
// buffer, so gradients are reduce-scattered after every micro-batch, asynchronously behind the
// next micro-batch (only the last one's remainder shows here; the rest is link time, below),
// and gathers the updated weights once per iteration. ZeRO-3 gathers the weights before each
// forward and backward of every micro-batch, which gates the pass.
// Each stage syncs its own weights behind its own passes, and not every stage's shows: the
// last micro-batch's backward runs from the last stage down to stage 0, so stage s starts its
// reduce-scatter the backward passes of stages 0..s-1 and their hops before the iteration
// ends, and its first forward waits as long after the iteration starts, time its all-gather
// has too. Stage 0 has none of that slack and holds the embedding: its sync, more often than
// the slowest stage's, is the one that shows. Interleaved, each model chunk syncs its own
// weights, one chunk after another on the DP stream: chunk c's gather (1/v of the stage's)
// runs beside chunk c's first forward, which c p forwards of the earlier chunks precede, and
// chunk c's reduce-scatter starts with its last backward, which c p backwards of the earlier
// chunks follow. The chain shows by the most any chunk's sync outlasts that: over chunks k
// with passes q_k, max (k + 1) T / v - q_k - p (q_0 + ... + q_{k-1}) for a sync of T, which
// is max(T/v - q, T - q - (v - 1) p q) where the chunks take q alike, and T - q when v = 1.
// (Against the stage's whole sync beside one pass, Qwen3-30B-A3B on 240 H800 at pp = 2,
// vpp = 4 came out 4.8 % over the simulator.)

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

// Model chunk k's forward or backward on stage s, one micro-batch: the stage's own without
// interleaving.
Seconds SyncPricing::chunk_pass(int64_t s, int64_t k, bool backward_pass) {
  if (*p_.vpp == 1) return backward_pass ? stage(s).backward : stage(s).forward;
  if (pipeline_.chunks.empty()) pipeline_.chunks = chunk_times(ctx_, c_, *pipeline_.kinds);
  const ChunkTimes& own = pipeline_.chunks[static_cast<size_t>(s)];
  return (backward_pass ? own.backward : own.forward)[static_cast<size_t>(k)];
}

const std::vector<Exposed>& SyncPricing::exposed(bool backward_pass) {
  std::vector<Exposed>& e = exposed_[backward_pass ? 1 : 0];
  if (e.empty()) e = price_exposed(backward_pass);
  return e;
}

// The first stage whose sync shows most.
const Exposed& SyncPricing::most_exposed(bool backward_pass) {
  const std::vector<Exposed>& all = exposed(backward_pass);
  const Exposed* best = &all.front();
  for (const Exposed& e : all)
    if (e.exposure > best->exposure) best = &e;
  return *best;
}

std::vector<Exposed> SyncPricing::price_exposed(bool backward_pass) {
  std::vector<Exposed> out;
  // Interleaved, a micro-batch goes round every stage once a chunk: chunk k's first forward
  // (last backward) waits for that round of each chunk before it, as well as for this stage's
  // own p passes of them. The round's hops hide a sync only on another link: where both cross
  // nodes they share the NICs (a 32 MB hop over PCIe-era NICs beside ZeRO-1's gathers, counted
  // as window: 18.6 % under the simulator, 5.1 % without).
  // Each hop is the boundary's own (pipeline_.hops[s]: into stage s, the wrap at 0): a stage
  // boundary between nodes waits for the NICs where the others take NVLink.
  // Whether the hop after stage s takes the sync's NICs: the boundary's own link, as priced.
  auto hop_shares_link = [&](int64_t s) {
    return sync_.crosses_nodes && boundary_crosses_nodes(ctx_, p_, s, (s + 1) % pp_);
  };
  auto hop_after = [&](int64_t s) {
    return pipeline_.hops.empty() ? Seconds(0) : pipeline_.hops[static_cast<size_t>((s + 1) % pp_)];
  };
  std::vector<Seconds> round(static_cast<size_t>(*p_.vpp));
  for (int64_t k = 0; k + 1 < *p_.vpp; ++k) {
    for (int64_t s = 0; s < pp_; ++s) {
      round[static_cast<size_t>(k)] +=
          chunk_pass(s, k, backward_pass) + (hop_shares_link(s) ? Seconds(0) : hop_after(s));
    }
  }
  Seconds slack;
  // Each chunk's window opening, pass and traffic on the links (interleaved only).
  struct Chunk {
    Seconds opens, pass;
    LinkLoads traffic;
  };
  std::vector<Chunk> chunks;
  for (int64_t s = 0; s < pp_; ++s) {
    const DpSync& own = sync_of(s);
    const Seconds sync = backward_pass ? own.reduce_scatter : own.all_gather;
    // Chunk k's share of the chain ends (k + 1) T / v into it, and its window is chunk k's own
    // pass after the earlier chunks' passes here or their rounds, whichever is longer. Each
    // chunk at its own time: a chunk that holds only the embedding hides nothing of its sync
    // (E|t|t|L over pp = 2, two micro-batches: with every chunk at the stage's mean, 14 % under
    // the simulator), and a light first chunk here waits for a heavy one on the next stage
    // (Et|tt|tt|L: counting this stage's passes alone, 5.7 % over).
    // The whole chain runs beside the passes of each chunk that start before it ends: p of
    // them a chunk, from the chunk's window on. (Taken as beside as many passes as it lasts,
    // OLMoE at pp 4, vpp 4 over the A800 C1+G4 nodes stretched 13 of stage 0's chunk passes
    // where the simulator's gathers met 8, the rest waiting for the round trip: 5.9 % over.)
    // The chunk whose sync shows runs its first pass beside it, after the passes of the
    // earlier chunks that start before that part of the chain ends.
    Seconds exposure(-std::numeric_limits<double>::infinity()), here, rounds;
    int64_t shown = 0;
    chunks.clear();
    for (int64_t k = 0; k < *p_.vpp; ++k) {
      const Seconds pass = chunk_pass(s, k, backward_pass);
      const Seconds opens = std::max(here, rounds);
      const Seconds shows = sync * (static_cast<double>(k + 1) / v_) - pass - opens;
      if (shows > exposure) exposure = shows, shown = k;
      if (*p_.vpp > 1) chunks.push_back({opens, pass, chunk_traffic(s, k)});
      here += pass * static_cast<double>(pp_);
      rounds += round[static_cast<size_t>(k)];
    }
    exposure -= slack;
    // The passes of chunks before `last` that start before `length` of the chain has run (and
    // `and_last`, one of chunk `last`'s), as shares of the stage's pass and traffic.
    auto passes_before = [&](size_t last, Seconds length, bool and_last) {
      Seconds time, nic, fabric, all_time, all_nic, all_fabric;
      for (size_t k = 0; k < chunks.size(); ++k) {
        const Chunk& ch = chunks[k];
        double n = 0;
        if (k < last && ch.pass.value() > 0)
          n = std::clamp((length - ch.opens) / ch.pass, 0.0, static_cast<double>(pp_));
        if (k == last && and_last) n = 1;
        time += ch.pass * n, nic += ch.traffic.nic * n, fabric += ch.traffic.fabric * n;
        all_time += ch.pass, all_nic += ch.traffic.nic, all_fabric += ch.traffic.fabric;
      }
      Beside b;
      b.time = all_time.value() > 0 ? time / all_time : 0.0;
      b.nic = all_nic.value() > 0 ? nic / all_nic : b.time;
      b.fabric = all_fabric.value() > 0 ? fabric / all_fabric : b.time;
      return b;
    };
    const double part = static_cast<double>(shown + 1) / v_;
    Exposed& e = out.emplace_back(Exposed{s, slack, exposure, Beside(), part, Beside()});
    if (chunks.empty()) {
      e.overlapped = e.chain_overlapped = Beside(overlapped(s, backward_pass));
    } else {
      e.overlapped = passes_before(static_cast<size_t>(shown), sync * part - slack, true);
      e.chain_overlapped = passes_before(chunks.size(), sync - slack, false);
    }
    // The next stage's window opens after this one's first chunk.
    slack += chunk_pass(s, 0, backward_pass) + hop_after(s);
  }
  return out;
}

// Interleaved, the chain runs beside as many chunk passes as it lasts, at most those of its
// window ((v - 1) p + 1); without interleaving, beside its one pass. A sync shorter than its
// pass shares the links for its own length only: taken as sharing the whole pass, a ZeRO-1
// reduce-scatter of 68 ms beside a 184 ms backward over the NICs came out 13 % over the
// simulator. In the stage's passes (v chunk passes each).
double SyncPricing::overlapped(int64_t s, bool backward_pass) const {
  const StageTimes& st = stage(s);
  const Seconds average_pass = (backward_pass ? st.backward : st.forward) / v_;
  const DpSync& own = sync_of(s);
  const Seconds sync = backward_pass ? own.reduce_scatter : own.all_gather;
  const double later_chunks = (v_ - 1.0) * static_cast<double>(pp_);
  const double beside =
      average_pass.value() > 0 ? std::clamp(sync / average_pass, 0.0, later_chunks + 1.0) : 1.0;
  return beside / v_;
}

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

// Interleaved, the chunk whose sync shows waits for the chain up to it, and only what that
// part met on the links delays it; but every chunk's sync stretches the passes it runs beside,
// the stage's first forwards or last backwards, which the pipeline waits for. `shown_stretch`
// is what the shown part stretched. (The whole chain's delay ahead of chunk 0's gather and
// reduce-scatter: Qwen3-30B-A3B at pp 4, vpp 4 over the A800 C1+G4 nodes priced 195 and 168 ms
// where the simulator's showed 94 and 72: 4.1 % over it.)
Seconds SyncPricing::whole_chain_stretch(const Exposed& e, bool backward_pass,
                                         Seconds shown_stretch) {
  if (e.part >= 1.0) return shown_stretch;
  const DpSync& own = sync_of(e.stage);
  const Seconds sync = backward_pass ? own.reduce_scatter : own.all_gather;
  const Seconds in_node = backward_pass ? own.reduce_scatter_in_node : own.all_gather_in_node;
  // The gather has run alone for the slack before the first forward.
  const Seconds left = backward_pass ? sync : std::max(Seconds(0), sync - e.slack);
  const double part = sync.value() > 0 ? left / sync : 0.0;
  const StageTimes& st = stage(e.stage);
  const Seconds pass =
      window(e.stage, left, in_node * part, backward_pass, e.chain_overlapped).first;
  return std::max(shown_stretch, pass - (backward_pass ? st.backward : st.forward));
}

// A pipeline send leaves by its stage's NIC, where that stage's DP sync runs when DP crosses
// nodes too: a send while the sync holds it goes at half the NIC until the sync ends. The first
// micro-batch's sends, ahead of every stage's first passes, meet the weights' gathers that start
// the iteration (each stage's first forward of chunk k waiting for its k + 1 gathers); the last
// micro-batch's, behind every stage's last backwards, the reduce-scatters that start with each
// stage's last backward of its last chunk. What they add to the fill and drain: the path walked
// with them against the path walked without, each ending no sooner than the syncs that gate it
// (a sync that outlasts the drain ends the iteration however slow the sends beside it were).
// (Walked at their own length, MoE layers over 16 A800s at pp 2, vpp 4 with 21 ms sends across
// nodes: the simulator's ran 43 ms beside the syncs, seven in the drain and three in the fill,
// and the planner came out 4.7 % under it.)
Seconds SyncPricing::hops_beside_syncs(bool backward_pass) {
  if (pp_ == 1 || pipeline_.hops.empty() || !sync_.crosses_nodes) return Seconds(0);
  const int64_t v = *p_.vpp;
  auto walk = [&](bool shared) {
    // The sync of each stage on its NIC, from `starts[s]` (the gathers from the start), and
    // what the sends beside it delay it by: they split the NIC.
    std::vector<Seconds> starts(static_cast<size_t>(pp_)), delays(starts);
    Seconds t, end;
    // The path in running order: forward, chunk 0 from stage 0 on; backward, chunk v - 1 from
    // the last stage down. Without interleaving nothing wraps.
    for (int64_t step = 0; step < v * pp_; ++step) {
      const int64_t k = backward_pass ? v - 1 - step / pp_ : step / pp_;
      const int64_t s = backward_pass ? pp_ - 1 - step % pp_ : step % pp_;
      const DpSync& own = sync_of(s);
      const Seconds sync = backward_pass ? own.reduce_scatter : own.all_gather;
      const auto i = static_cast<size_t>(s);
      if (backward_pass && k == v - 1) starts[i] = t;
      t += chunk_pass(s, k, backward_pass);
      // A chunk's first forward ends no sooner than its gathers.
      if (!backward_pass) t = std::max(t, sync * (static_cast<double>(k + 1) / v_) + delays[i]);
      if (step + 1 < v * pp_) {
        const int64_t to = backward_pass ? (s + pp_ - 1) % pp_ : (s + 1) % pp_;
        const int64_t later = backward_pass ? s : to;  // the boundary's hop is hops[later]
        const Seconds hop = pipeline_.hops[static_cast<size_t>(later)];
        const Seconds left = starts[i] + sync + delays[i] - t;
        t += hop;
        if (shared && left.value() > 0 && boundary_crosses_nodes(ctx_, p_, s, to)) {
          const Seconds split = std::min(hop, left / 2.0);
          t += split;
          delays[i] += split;
        }
      }
      end = std::max(end, starts[i] + sync + delays[i]);
    }
    // The gathers gate the forward's path; the reduce-scatters run on behind the drain's.
    return backward_pass ? std::max(t, end) : t;
  };
  return walk(true) - walk(false);
}

// The all-gather has run alone for the stage's slack before its first forward starts; the
// reduce-scatter shares the last backward, then runs alone for the slack. A pass the sync
// stretches delays every stage after it in the pipeline, so the stretch shows in full.
// ZeRO-1's reduce-scatter, once an iteration behind the last backward.
Seconds SyncPricing::reduce_scatter_once(const Exposed& e) {
  const DpSync& own = sync_of(e.stage);
  const Seconds unshared = stage(e.stage).backward;
  const Seconds upto = own.reduce_scatter * e.part;
  const auto [backward, rs_shared] =
      window(e.stage, upto, own.reduce_scatter_in_node * e.part, true, e.overlapped, true);
  const Seconds shown_stretch = backward - unshared;
  const Seconds stretch = whole_chain_stretch(e, true, shown_stretch);
  // Every stage starts its reduce-scatter with its last backward, and those backwards run one
  // after another down the pipeline's drain, each stretched by its own: the drain grows by
  // them all, pp of this stage's where the stages are alike. (Counting one, GLM-4.5 on 240
  // H800 at pp = 24 with EP 5 across nodes came out 9.0 % under the simulator: 24 backwards of
  // 40.2 ms each ran 59.6 ms beside their reduce-scatter.) Where they are not, each stretches
  // by its share of the traffic this one's link carries (one MoE layer against two and the
  // head over pp = 2, EP across nodes: 11 % under the simulator with the first's stretch
  // counted twice).
  // Interleaved, the drain runs one model chunk's backward a stage: the others' stretch only
  // their last chunk pass (a stage's sync runs beside `overlapped` of its passes, v chunk
  // passes each). (The whole stretch a stage, OLMoE at pp = 4 and v = 4 on the A800 nodes,
  // EP 2 beside a 201 ms reduce-scatter on PCIe: 7 % over the simulator.)
  auto chained = [&](Seconds one, double overlapped) {
    return overlapped > 1.0 ? one / (overlapped * v_) : one;
  };
  const Seconds tail =
      std::max(Seconds(0), e.exposure + (rs_shared - upto) - shown_stretch) + stretch;
  if (pp_ == 1) return tail;
  // A stage without a sync of its own (no expert weights on a stage of dense layers) keeps its
  // backward.
  auto on_sync_link = [&](int64_t s) {
    return sync_of(s).reduce_scatter.value() > 0 ? traffic_of(s).on(sync_.crosses_nodes)
                                                 : Seconds(0);
  };
  // The others stretch by their share of the traffic on a reference stage's link: this one's
  // where it stretches. Where the stage that shows carries nothing on its sync's link (dense
  // layers beside MoE stages whose EP crosses the NICs) its backward keeps its time, but the
  // others' still stretch beside their own reduce-scatters and delay it down the drain: the
  // busiest of them is the reference. (Without them, two dense layers ahead of a MoE layer
  // with EP 128 over GB200 racks: the planner 7.2 % under the simulator, whose MoE backward ran
  // 5.6 -> 10.1 ms beside its 22 ms reduce-scatter.)
  int64_t reference = e.stage;
  Seconds one = stretch, on_link = stretch.value() > 0 ? on_sync_link(e.stage) : Seconds(0);
  Beside beside = e.chain_overlapped;
  if (!(stretch.value() > 0)) {
    for (int64_t s = 0; s < pp_; ++s) {
      const Seconds t = on_sync_link(s);
      if (t > on_link) on_link = t, reference = s;
    }
    if (reference == e.stage) return tail;
    const DpSync& theirs = sync_of(reference);
    beside = Beside(overlapped(reference, true));
    one =
        window(reference, theirs.reduce_scatter, theirs.reduce_scatter_in_node, true, beside, true)
            .first -
        stage(reference).backward;
  }
  // Without traffic to weigh by, every other stage stretches alike. This stage's own stretch is
  // in the tail where it is the reference. A stage whose reduce-scatter is shorter than the
  // reference's meets only that share of its traffic. (At the reference's share, a MoE stage
  // with a 1.7 ms reduce-scatter, its experts without DP, beside a dense stage's 20 ms: 19 ms
  // where the simulator's backward stretched 1.6, the planner 10.6 % over it.)
  double others = static_cast<double>(pp_ - 1);
  if (on_link.value() > 0) {
    others = 0;
    const Seconds longest = sync_of(reference).reduce_scatter;
    for (int64_t s = 0; s < pp_; ++s) {
      if (s == e.stage && reference == e.stage) continue;
      const double met =
          longest.value() > 0 ? std::min(1.0, sync_of(s).reduce_scatter / longest) : 1.0;
      others += on_sync_link(s) / on_link * met;
    }
  }
  return tail + chained(one, beside.time) * others;
}

// ZeRO 1-2's weight all-gather, once an iteration before the first forward.
Seconds SyncPricing::all_gather_once(const Exposed& e) {
  const DpSync& own = sync_of(e.stage);
  const Seconds unshared = stage(e.stage).forward;
  const Seconds left = std::max(Seconds(0), own.all_gather * e.part - e.slack);
  const double part = own.all_gather.value() > 0 ? left / own.all_gather : 0.0;
  const auto [forward, ag_shared] =
      window(e.stage, left, own.all_gather_in_node * part, false, e.overlapped, true);
  const Seconds shown_stretch = forward - unshared;
  const Seconds stretch = whole_chain_stretch(e, false, shown_stretch);
  return std::max(Seconds(0), e.exposure + (ag_shared - left) - shown_stretch) + stretch;
}

// `shared_reduce`: the backward carries only the part of its gradient reduce-scatter that
// shares the link with its gathers (as much as they take; the simulator starts the two
// together and the link splits between them), the rest running on behind the pass.
Paced SyncPricing::paced(int64_t s, bool shared_reduce) {
  const StageTimes& own = stage(s);
  const DpSync& sy = sync_of(s);
  Seconds pass_forward = own.forward, pass_backward = own.backward;
  // Of each pass's fill, the share that runs with no sync beside it.
  double fill_forward = 1.0, fill_backward = 1.0;
  if (c_.zero_stage >= 3) {
    // Every pass gathers its weights, and every backward reduce-scatters its gradients, on the
    // links its own traffic takes (one after another on the DP stream): each pass shares them
    // as the windows above do, and waits for its gathers.
    // A pass starts with its first layer's gather (later ones run while the layers before
    // them compute), so each model chunk's pass waits for one layer's weights with nothing to
    // hide behind, and its last layer computes after its own gather, the last on the DP
    // stream. (Without the first, APTMoE's MoE-M-16 on the A800 cluster, pp = 8, vpp = 4: the
    // simulator 15.9 % over the planner, which ranked that ZeRO-3 layout first; with it added
    // to all the gathers, a one-layer model waited for its gather twice, 15 % over.) In the
    // forward that first gather runs before the pass's own traffic, so only the others share
    // its links (with all of them sharing, one layer a stage over pp = 2: the simulator 19.6 %
    // under the planner, now 10.7 %; the backward's reduce-scatters keep the rest).
    const int64_t layers = layers_in_stage(*ctx_.model, p_, s);
    const double layer_share = layers > 0 ? std::min(1.0, v_ / static_cast<double>(layers)) : 0.0;
    const Seconds first = sy.all_gather * layer_share;
    const double later = 1.0 - layer_share;
    // The later gathers run beside the layers before each chunk's last and meet their traffic
    // only: the last layer computes after its own gather, the links its own again. (Beside
    // the whole pass, five MoE layers over 16 A800s with EP and DP across the NICs: the
    // simulator's forward ran its 46 ms gathers at 67 ms each and then its last layer's 22 ms,
    // 336 ms in all, where the planner priced 382 and came out 8.6 % over it.)
    const auto [f, later_gathered] =
        window(s, sy.all_gather * later, sy.all_gather_in_node * later, false, Beside(later));
    const Seconds gathered = first + later_gathered;
    // The backward's link carries its gathers and its reduce-scatter (`shared_reduce`: the
    // part of it that shares the link with the gathers, as much as they take; the simulator
    // starts the two together and the link splits between them), but its last layer's gather
    // waits only for the gathers and that shared part: the rest of the reduce-scatter runs on
    // beside the layer. (The whole reduce-scatter ahead of it, one MoE layer a stage whose
    // gradients take twice its weights' time: 9.7 % over the simulator.)
    const double rs_share =
        sy.reduce_scatter.value() > 0 ? std::min(1.0, sy.all_gather / sy.reduce_scatter) : 1.0;
    const double carried = shared_reduce ? rs_share : 1.0;
    const Seconds on_link = sy.all_gather + sy.reduce_scatter * carried;
    // A reduce-scatter no longer than the gathers ends with them, and the backward's last layer
    // has the links to itself as the forward's does.
    const bool reduced_with_gathers = sy.reduce_scatter <= sy.all_gather;
    const auto [b, synced] =
        window(s, on_link, sy.all_gather_in_node + sy.reduce_scatter_in_node * carried, true,
               Beside(reduced_with_gathers ? later : 1.0));
    const Seconds gathers_done =
        on_link.value() > 0 ? synced * ((sy.all_gather + sy.reduce_scatter * rs_share) / on_link)
                            : synced;
    // The pass before this one on the stage sends its output on as this one starts (a
    // backward's to the stage before, ahead of a forward; a forward's to the next, ahead of a
    // backward): where that hop takes the sync's NICs, the first gather splits them with it.
    // (Left alone, ZeRO-3 over the A800 nodes at pp = 2, vpp = 4: every chunk's first gather
    // ran 8 ms longer beside a 9.4 ms send, 8.8 % over the planner.)
    // GPipe runs a stage's forwards back to back, then its backwards: the pass before is of the
    // same kind and sends the other way. One micro-batch has no pass before on the stage close
    // enough to share with. (With the 1F1B neighbour's send counted, one micro-batch under
    // GPipe over two A800 stages priced stage 1's forward and stage 0's backward 7.6 ms longer
    // each: 4.8 % over the simulator.)
    auto hop_beside = [&](bool backward_pass) {
      if (pp_ == 1 || pipeline_.hops.empty() || !sy.crosses_nodes || microbatches_ <= 1)
        return Seconds(0);
      const bool towards_next = c_.gpipe ? !backward_pass : backward_pass;
      const int64_t from = towards_next ? s : (s + pp_ - 1) % pp_;
      const int64_t to = (from + 1) % pp_;
      // Without interleaving nothing wraps from the last stage to the first.
      if (*p_.vpp == 1 && to == 0) return Seconds(0);
      if (!boundary_crosses_nodes(ctx_, p_, from, to)) return Seconds(0);
      return pipeline_.hops[static_cast<size_t>(to)];
    };
    // What each chunk's first gather holds its pass up by. The host issues a layer once the
    // layer before it has ended (simulator/training_pass.cpp, host_issue): while the GPU waits
    // for the gather, only that first layer's own wait for the host hides it, not the whole
    // pass's. (With the pass's, a host-bound forward hid the first gather, whose layer then held
    // up the host issuing the next: ZeRO-3 over GB200 racks, 2.0 ms of a 35 ms forward.) What
    // the pass runs ahead of its layers (`lead`) hides it too. A backward's first gather splits
    // the link with its reduce-scatter, which starts with it. (Alone, one MoE layer over the
    // A800 nodes with MoNTA O1: its 2.5 ms gather ran 4.9 ms and the planner came out 8.8 %
    // under the simulator.)
    auto first_wait = [&](bool backward_pass, Seconds lead) {
      const Seconds one = first / v_;
      const Seconds gather = one + std::min(one, hop_beside(backward_pass)) +
                             (backward_pass ? std::min(one, sy.reduce_scatter) : Seconds(0));
      const int64_t lead_chunk = backward_pass ? *p_.vpp - 1 : 0;
      Seconds wait;
      for (int64_t k = 0; k < *p_.vpp; ++k) {
        const LayerRange r = chunk_layers(*ctx_.model, p_, s, k);
        Seconds hidden = k == lead_chunk ? lead : Seconds(0);
        if (r.size() > 0) {
          const StageTimes& layer = pipeline_.kinds->of(
              ctx_, s, static_cast<size_t>(backward_pass ? r.end - 1 : r.begin));
          hidden += backward_pass ? layer.host_backward : layer.host_forward;
        }
        wait += std::max(Seconds(0), gather - hidden);
      }
      return wait;
    };
    // What a pass runs outside its layers: `lead` before the first (a backward's output head
    // and MTP modules, a forward's embedding), which its chunk's first gather runs beside, and
    // `trail` after the last (a forward's output head, a backward's embedding gradient), which
    // waits for the last layer as that waits for its gather. The last layer's share of the
    // pass leaves both out (one layer beside a 129K-vocabulary head: 16 % over the simulator,
    // the head counted in both).
    const StageTimes before = before_first_layer(ctx_, c_, s);
    const StageTimes after = after_last_layer(ctx_, c_, *pipeline_.kinds, s);
    // After the last gather: each chunk's last layer and what the pass runs after its layers.
    auto after_gathers = [&](Seconds pass, Seconds lead, Seconds trail) {
      return pass.value() > 0
                 ? std::clamp(((pass - lead - trail) * layer_share + trail) / pass, 0.0, 1.0)
                 : 1.0;
    };
    fill_forward = after_gathers(own.forward, before.forward, after.forward);
    fill_backward = after_gathers(own.backward, after.backward, before.backward);
    // The last layer runs after its gather at its own pass's pace (`last_pass`).
    auto gated = [&](Seconds pass, Seconds last_pass, Seconds host, Seconds syncs,
                     bool backward_pass) {
      const Seconds lead = backward_pass ? after.backward : before.forward;
      const Seconds trail = backward_pass ? before.backward : after.forward;
      return std::max(pass + first_wait(backward_pass, lead),
                      syncs + (last_pass - host - lead - trail) * layer_share + trail);
    };
    pass_forward = gated(f, own.forward, own.host_forward, gathered, false);
    pass_backward =
        gated(b, reduced_with_gathers ? own.backward : b, own.host_backward, gathers_done, true);
  }
  // Each link is shared by everything that crosses it, however well each transfer hides behind
  // compute alone: a pass takes at least its links' work (a roofline per link and direction of
  // the pass; the simulator shares them flow by flow). The forward cannot borrow the idle link
  // time of a backward that is twice as long: Qwen3-30B-A3B with TP = 4 and EP = 8 in the node
  // sends 2.2 ms a layer over NVLink in a forward of 1.3 ms of compute. The NIC carries groups
  // that leave the node, the node's fabric the rest.
  const LinkLoads traffic = link_traffic(ctx_, p_, own);
  const LinkLoads own_forward = pass_traffic(traffic, false);
  const LinkLoads own_backward = pass_traffic(traffic, true);
  LinkLoads forward_links = own_forward, backward_links = own_backward;
  auto on_link = [&](bool crosses, Seconds forward, Seconds backward) {
    (crosses ? forward_links.nic : forward_links.fabric) += forward;
    (crosses ? backward_links.nic : backward_links.fabric) += backward;
  };
  // ZeRO-2 reduce-scatters a micro-batch's gradients as its backward produces them
  // (DeepSpeed's overlap_comm; the simulator starts it with the backward): the backward's link
  // carries it for as long as the backward lasts, and the rest spills into the next forward.
  // (Spread over both passes by their length, MemFine Model II on the A800 cluster, EP = 32
  // and DP = 4 on the NICs, came out 12.6 % under the simulator: its forward has the NIC to
  // itself.) ZeRO-3 gathers before each pass and reduce-scatters within its backward.
  if (c_.zero_stage == 2) {
    const Seconds backward_link = backward_links.on(sy.crosses_nodes);
    const Seconds within = std::min(sy.reduce_scatter, std::max(pass_backward, backward_link));
    on_link(sy.crosses_nodes, sy.reduce_scatter - within, within);
  } else if (c_.zero_stage >= 3) {
    // MegaScale's hierarchical sync of the weights Ulysses SP replicates keeps its in-node step
    // on NVLink even where DP crosses nodes (the windows above split them alike). (All of it on
    // the NIC, GPT-39B over 240 H800 with Ulysses and ZeRO-3: the planner 14 % over the
    // simulator, which had the NIC 77 % busy.)
    const Seconds reduced =
        shared_reduce ? std::min(sy.all_gather, sy.reduce_scatter) : sy.reduce_scatter;
    const Seconds reduced_in_node = sy.reduce_scatter.value() > 0
                                        ? sy.reduce_scatter_in_node * (reduced / sy.reduce_scatter)
                                        : Seconds(0);
    const Seconds gathered_in_node = sy.crosses_nodes ? sy.all_gather_in_node : Seconds(0);
    const Seconds scattered_in_node = sy.crosses_nodes ? reduced_in_node : Seconds(0);
    on_link(sy.crosses_nodes, sy.all_gather - gathered_in_node,
            sy.all_gather - gathered_in_node + reduced - scattered_in_node);
    on_link(false, gathered_in_node, gathered_in_node + scattered_in_node);
  }
  const Seconds nic = forward_links.nic + backward_links.nic;
  const Seconds fabric = forward_links.fabric + backward_links.fabric;
  // Syncs that load a pass's link beyond its own traffic stretch it from its bottleneck, and
  // the pass keeps what it took beyond that (a pipelined layer's fill, or the compute a serial
  // chain waits for): ZeRO-3 gathers on a link-bound pass add their whole time.
  // (The fill is the ungated pass's: ZeRO-3's wait for its gathers is what the link adds.)
  // ZeRO-3's gathers run beside every layer but each chunk's last, which keeps its share of the
  // fill with what the pass runs after its layers (the whole fill, seven layers over 16 A800s
  // with 113 ms gathers a layer across the NICs: 61 ms where the simulator's last layer added
  // 41 after the gathers, 4.2 % over it).
  auto held_to = [](Seconds pass, Seconds ungated, Seconds compute, const LinkLoads& unloaded,
                    const LinkLoads& loaded, double fill_share) {
    const Seconds fill =
        std::max(Seconds(0), ungated - std::max({compute, unloaded.nic, unloaded.fabric})) *
        fill_share;
    return std::max(pass, std::max(loaded.nic, loaded.fabric) + fill);
  };
  // (The fill is the GPU's: the host issues the pass while its links are busy. The backward's
  // compute holds what recompute replays: counted as fill, a ZeRO-3 layout with full
  // recompute over the NICs came out 15 % over the simulator.)
  const Seconds forward = held_to(pass_forward, own.forward - own.host_forward, own.compute / 3.0,
                                  own_forward, forward_links, fill_forward);
  const Seconds backward = held_to(pass_backward, own.backward - own.host_backward,
                                   own.compute * (2.0 / 3.0) + own.recompute, own_backward,
                                   backward_links, fill_backward);
  // The rest of the reduce-scatter takes the link time the backward leaves idle on it, and
  // only what does not fit runs on behind. (All of it behind, the first stage's 1.8 ms rest
  // beside a backward that kept its NIC busy 6.5 ms of 8.0: 7.2 % over the simulator.)
  const Seconds rest = shared_reduce && c_.zero_stage >= 3
                           ? sy.reduce_scatter - std::min(sy.all_gather, sy.reduce_scatter)
                           : Seconds(0);
  const Seconds idle = std::max(Seconds(0), backward - backward_links.on(sy.crosses_nodes));
  const Seconds tail = std::max(Seconds(0), rest - idle);
  return Paced{forward,
               backward,
               nic,
               fabric,
               forward_links.on(sy.crosses_nodes),
               backward_links.on(sy.crosses_nodes),
               tail,
               s};
}

// ZeRO-2 and -3 sync every micro-batch on the links the pass's own traffic takes: the stage
// that paces the pipeline is the slowest with its syncs, which need not be the slowest
// without (a last stage lighter in weights but heavier in compute, DeepSeek-V3's with its MTP
// module, hid less of the middle stages' syncs than it seemed to). The candidates: the
// slowest stage and the one with the most to sync; each one's pass, and its links' load per
// micro-batch.
Paced SyncPricing::pacing_stage() {
  const int64_t slowest = pipeline_.slowest_stage;
  Paced worst = paced(slowest);
  if (c_.zero_stage >= 2) {
    int64_t heaviest = slowest;
    for (int64_t s = 0; s < pp_; ++s) {
      const DpSync& a = sync_of(s);
      const DpSync& b = sync_of(heaviest);
      if (a.reduce_scatter + a.all_gather > b.reduce_scatter + b.all_gather) heaviest = s;
    }
    if (heaviest != slowest) {
      const Paced other = paced(heaviest);
      if (other.pass() > worst.pass()) worst = other;
    }
  }
  return worst;
}

void SyncPricing::add_to(TimeBreakdown& out) {
  microbatches_ = out.microbatches;
  const double mb = static_cast<double>(out.microbatches);
  const Seconds per_mb = pipeline_.per_mb;
  if (c_.zero_stage <= 1) {
    const Exposed e = most_exposed(true);
    out.dp_reduce_stage = e.stage;
    out.dp_reduce_scatter = sync_of(e.stage).reduce_scatter;
    out.dp_comm += reduce_scatter_once(e) + hops_beside_syncs(true);
  }
  if (c_.zero_stage <= 2) {
    // The stage whose gather costs most: the one that shows most, or one whose gather, longer
    // than its slack, stretches the first forwards it runs beside, which the stages after it
    // wait for. (Stage 0's alone, MemFine's Model I at pp 3, vpp 2 over 240 H800, whose second
    // stage's 166 ms gathers took its MoE forwards from 35 to 65 ms: 3.9 % under the simulator.)
    const Exposed& shown = most_exposed(false);
    Seconds gather = all_gather_once(shown);
    int64_t stage = shown.stage;
    for (const Exposed& e : exposed(false)) {
      if (e.stage == shown.stage || sync_of(e.stage).all_gather <= e.slack) continue;
      const Seconds t = all_gather_once(e);
      if (t > gather) gather = t, stage = e.stage;
    }
    out.dp_gather_stage = stage;
    out.dp_all_gather = sync_of(stage).all_gather;
    out.dp_comm += gather + hops_beside_syncs(false);
  }
  const Paced worst = pacing_stage();
  // ZeRO-3 gathers every pass's weights, fill and drain included: with few micro-batches each
  // stage's wait shows, not just the pacing one's (one micro-batch over four stages: the
  // planner was 41 % under the simulator), so walk the schedule again with each stage's passes
  // as its syncs stretch them: a backward's gathers share the link with its gradient
  // reduce-scatter, whose rest runs on behind the pass, the first stage's last one ending the
  // iteration. At least the slowest stage's passes with their syncs, as the closed form has it.
  if (pipeline_.walk_few && c_.zero_stage >= 3) {
    // Interleaved, each model chunk's passes take the share of the stage's that its layers
    // hold, as its gathers do. (Left to the steady state alone, two micro-batches over pp = 2
    // at vpp = 4 with ZeRO-3 over the NICs: 9.4 % under the simulator.)
    const ModelSpec& m = *ctx_.model;
    Seconds first_tail;
    for (int64_t s = 0; s < pp_; ++s) {
      const Paced own = paced(s, true);
      if (s == 0) first_tail = own.backward_tail;
      ChunkTimes& chunk = pipeline_.few_chunks[static_cast<size_t>(s)];
      const StageTimes& st = stage(s);
      const double layers = static_cast<double>(layers_in_stage(m, p_, s));
      chunk.forward_link.assign(static_cast<size_t>(*p_.vpp), Seconds(0));
      chunk.backward_link = chunk.backward_tail = chunk.forward_link;
      for (int64_t k = 0; k < *p_.vpp; ++k) {
        const auto i = static_cast<size_t>(k);
        const double share =
            layers > 0 ? static_cast<double>(chunk_layers(m, p_, s, k).size()) / layers : 1.0;
        chunk.forward[i] += std::max(Seconds(0), own.forward - st.forward) * share;
        chunk.backward[i] += std::max(Seconds(0), own.backward - st.backward) * share;
        chunk.forward_link[i] = own.forward_link * share;
        chunk.backward_link[i] = own.backward_link * share;
        chunk.backward_tail[i] = own.backward_tail * share;
      }
    }
    // The first stage's last backward ends the iteration, with its reduce-scatter's rest.
    const Seconds gathered =
        schedule_makespan(pipeline_.few_chunks, out.microbatches, pipeline_.hops, c_.gpipe) +
        first_tail;
    out.dp_comm +=
        std::max({Seconds(0), gathered - pipeline_.few_walked, (worst.pass() - per_mb) * mb});
  } else {
    out.dp_comm += (worst.pass() - per_mb) * mb;
    // ZeRO-2's pacing puts each backward's reduce-scatter rest into the next forward; the last
    // micro-batch has none, and its rest runs on behind the drain, as ZeRO-1's single one does
    // (one micro-batch over two stages, FP32 gradients over the NICs: 15 % over the simulator).
    // What the pacing counted for that last micro-batch is in the tail already.
    if (c_.zero_stage == 2) {
      const Exposed e = most_exposed(true);
      out.dp_comm += std::max(Seconds(0), e.exposure - (worst.pass() - per_mb));
    }
  }
  // The once-per-iteration gradient reduce-scatter and weight gather share their link with every
  // micro-batch's traffic too: the link must carry it all within the iteration, and without
  // interleaving the bubble too, where the stage's link is idle (the gather runs on while the
  // stage waits for its first backward: one micro-batch over two stages priced 16 % over the
  // simulator without it; interleaved, the idle time is spread between chunk passes that load
  // the link, and counting it took GLM-4.5 on 240 H800 from +9.5 to +10.7 % under) (less the
  // in-node stage of a hierarchical sync when DP crosses nodes: that rides NVLink).
  Seconds once = (c_.zero_stage <= 1 ? sync_.reduce_scatter : Seconds(0)) +
                 (c_.zero_stage <= 2 ? sync_.all_gather : Seconds(0));
  if (sync_.crosses_nodes) {
    once -= (c_.zero_stage <= 1 ? sync_.reduce_scatter_in_node : Seconds(0)) +
            (c_.zero_stage <= 2 ? sync_.all_gather_in_node : Seconds(0));
  }
  const Seconds on_dp_link = (sync_.crosses_nodes ? worst.nic : worst.fabric) * mb + once;
  const Seconds idle = *p_.vpp == 1 ? out.bubble + out.pp_comm : Seconds(0);
  out.dp_comm += std::max(Seconds(0), on_dp_link - (per_mb * mb + idle + out.dp_comm));
  if (c_.zero_stage >= 2) {
    const Seconds streamed = reduce_stream_end(out.microbatches, worst);
    out.dp_comm +=
        std::max(Seconds(0), streamed - (per_mb * mb + out.bubble + out.pp_comm + out.dp_comm));
  }
}

// ZeRO-2 and -3 reduce-scatter every micro-batch's gradients one after another on the DP
// stream, each from the start of its backward (ZeRO-2's after the weights' gather): none
// before the stage's first backward, however idle the link is in the warm-up. Where they
// outlast the passes, the stream ends the iteration at the first backward plus every
// micro-batch's. (Counting the warm-up as link time, GPT-145B over 240 H800 at pp 10, vpp 4
// with 34.6 ms of reduce-scatter beside each 22.3 ms chunk backward: the simulator's stream
// ran 715 ms before its first, and the planner came out 6 % under it.)
// ZeRO-3's passes gather their weights meanwhile, the pacing stage's forwards as priced, the others
// no shorter than their gathers, and a stream that outlasts the passes has every gather and every
// byte of TP/EP/CP traffic the passes send after its start beside it: each takes its link from the
// step of the reduce-scatter that runs there for that step's share of the stream (a hierarchical
// one's in-node step on NVLink, its step across on the NIC). (Without them, ZeRO-3 over GB200 racks
// with SP over 64 GPUs, each backward's 14 ms in-node step beside 7 ms of in-node gathers: the
// planner 8.3 % under the simulator; without the traffic, GPT-39B over 240 H800 with SP over
// the node's 8 GPUs and ZeRO-3, one micro-batch whose in-node step met TP's all-to-alls: 7.9 %
// under.)
Seconds SyncPricing::reduce_stream_end(int64_t microbatches, const Paced& paced) {
  const bool zero3 = c_.zero_stage >= 3;
  // Each stage's one pass, or its model chunks' (which the windows may have priced already).
  std::vector<ChunkTimes> passes;
  if (*p_.vpp > 1) {
    if (pipeline_.chunks.empty()) pipeline_.chunks = chunk_times(ctx_, c_, *pipeline_.kinds);
    if (zero3) passes = pipeline_.chunks;
  } else {
    passes.resize(static_cast<size_t>(pp_));
    for (int64_t s = 0; s < pp_; ++s) {
      passes[static_cast<size_t>(s)].forward = {stage(s).forward};
      passes[static_cast<size_t>(s)].backward = {stage(s).backward};
    }
  }
  if (zero3) {
    for (int64_t s = 0; s < pp_; ++s) {
      const Seconds own = stage(s).forward;
      const Seconds gathered =
          s == paced.stage ? paced.forward : std::max(own, sync_of(s).all_gather);
      for (Seconds& f : passes[static_cast<size_t>(s)].forward)
        f = own.value() > 0 ? f * (gathered / own) : gathered / v_;
    }
  }
  const std::vector<ChunkTimes>& chunks = *p_.vpp > 1 && !zero3 ? pipeline_.chunks : passes;
  const std::vector<Seconds> hops =
      pipeline_.hops.empty() ? std::vector<Seconds>(static_cast<size_t>(pp_)) : pipeline_.hops;
  std::vector<Seconds> gathers(static_cast<size_t>(pp_));
  if (!zero3) {
    for (int64_t s = 0; s < pp_; ++s) gathers[static_cast<size_t>(s)] = sync_of(s).all_gather;
  }
  const std::vector<Seconds> first =
      first_backward_starts(chunks, microbatches, hops, c_.gpipe, gathers);
  Seconds end;
  for (int64_t s = 0; s < pp_; ++s) {
    const DpSync& own = sync_of(s);
    const double mb = static_cast<double>(microbatches);
    Seconds streamed = own.reduce_scatter * mb;
    if (zero3 && own.reduce_scatter.value() > 0) {
      // Every backward, and 1F1B's forwards after the warm-up's, with their gathers and their
      // own traffic on each link.
      const int64_t warm = std::min(microbatches, pp_ - s);
      const double forwards = c_.gpipe ? 0.0 : static_cast<double>(microbatches - warm);
      const LinkLoads traffic = traffic_of(s);
      const LinkLoads forward = pass_traffic(traffic, false),
                      backward = pass_traffic(traffic, true);
      const Seconds ag_in = own.crosses_nodes ? own.all_gather_in_node : Seconds(0);
      const Seconds on_fabric =
          (ag_in + backward.fabric) * mb + (ag_in + forward.fabric) * forwards;
      const Seconds on_nic = own.crosses_nodes
                                 ? (own.all_gather - ag_in + backward.nic) * mb +
                                       (own.all_gather - ag_in + forward.nic) * forwards
                                 : Seconds(0);
      // Without crossing nodes, the one step runs on the fabric beside everything there.
      const double in_share =
          own.crosses_nodes ? own.reduce_scatter_in_node / own.reduce_scatter : 1.0;
      const Seconds on_fabric_all =
          own.crosses_nodes ? on_fabric : on_fabric + own.all_gather * (mb + forwards);
      streamed += on_fabric_all * in_share + on_nic * (1.0 - in_share);
    }
    const Seconds start =
        std::max(first[static_cast<size_t>(s)], zero3 ? Seconds(0) : own.all_gather);
    end = std::max(end, start + streamed);
  }
  return end;
}

}  // namespace

void add_dp_sync_exposure(const TimeContext& ctx, const PlanChoice& c, PricedPipeline& pipeline,
                          const std::vector<DpSync>& syncs, ScratchContext& scratch,
                          TimeBreakdown& out) {
  SyncPricing(ctx, c, pipeline, syncs, scratch).add_to(out);
}

}  // namespace moe
