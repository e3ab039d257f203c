#include "planner/stage_pricing.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "planner/layer_ops.h"
#include "planner/parallel.h"

namespace moe {

double traffic_passes(Recompute r) {
  return r == Recompute::kFull ? 3.0 : r == Recompute::kRematerialize ? 2.5 : 2.0;
}

namespace {

// Which of TP, EP and CP cross nodes, asked once for many StageTimes.
struct GroupsAcross {
  bool tp, ep, cp;
  GroupsAcross(const TimeContext& ctx, const ParallelConfig& p)
      : tp(crosses_nodes(ctx, p, OpKind::kTp)),
        ep(crosses_nodes(ctx, p, OpKind::kEp)),
        cp(crosses_nodes(ctx, p, OpKind::kCp)) {}
  LinkLoads loads(Seconds tp_time, Seconds ep_time, Seconds cp_time) const {
    LinkLoads out;
    (tp ? out.nic : out.fabric) += tp_time;
    (ep ? out.nic : out.fabric) += ep_time;
    (cp ? out.nic : out.fabric) += cp_time;
    return out;
  }
  LinkLoads traffic(const StageTimes& st) const {
    LinkLoads out =
        loads(st.tp - st.tp_latency, st.ep - st.ep_latency - st.ep_off_link, st.cp - st.cp_latency);
    out.fabric += st.in_node_link;
    return out;
  }
};

}  // namespace

LinkLoads link_loads(const TimeContext& ctx, const ParallelConfig& p, Seconds tp, Seconds ep,
                     Seconds cp) {
  return GroupsAcross(ctx, p).loads(tp, ep, cp);
}

LinkLoads link_traffic(const TimeContext& ctx, const ParallelConfig& p, const StageTimes& st) {
  return GroupsAcross(ctx, p).traffic(st);
}

namespace {

LayerKinds::Times kinds_at(const TimeContext& ctx, const PlanChoice& c) {
  const ModelSpec& m = *ctx.model;
  LayerKinds::Times times;
  for (size_t kind = 0; kind < LayerKinds::kCount; ++kind) {
    const int64_t i = ctx.first_layer_of_kind[kind];
    if (i >= 0) {
      const auto layer = static_cast<size_t>(i);
      times[kind] = one_layer_times(ctx, c, ctx.params.layers[layer], m.moe_layer[layer]);
    }
  }
  return times;
}

void add(StageTimes& to, const StageTimes& from, double times) {
  to.forward += from.forward * times;
  to.backward += from.backward * times;
  to.compute += from.compute * times;
  to.recompute += from.recompute * times;
  to.tp += from.tp * times;
  to.ep += from.ep * times;
  to.cp += from.cp * times;
  to.tp_latency += from.tp_latency * times;
  to.ep_latency += from.ep_latency * times;
  to.cp_latency += from.cp_latency * times;
  to.ep_off_link += from.ep_off_link * times;
  to.in_node_link += from.in_node_link * times;
  to.ep_held_sms += from.ep_held_sms * times;
  to.host_forward += from.host_forward * times;
  to.host_backward += from.host_backward * times;
  to.offload_forward += from.offload_forward * times;
  to.offload_backward += from.offload_backward * times;
  to.offload_edge_forward = std::max(to.offload_edge_forward, from.offload_edge_forward);
  to.offload_edge_backward = std::max(to.offload_edge_backward, from.offload_edge_backward);
  to.remat_edge = std::max(to.remat_edge, from.remat_edge);
  to.send_stretch += from.send_stretch * times;
}

// A GEMM-bound block outside the layers, forward time t: its backward takes 2t.
void add_gemm_block(StageTimes& st, Seconds t) {
  st.forward += t;
  st.backward += t * 2.0;
  st.compute += t * 3.0;
}

// The embedding's dense gradient into main_grad, `lookups` times, in backward.
void add_embedding_gradient(StageTimes& st, const TimeContext& ctx, const PlanChoice& c,
                            double lookups) {
  const Seconds t = embedding_gradient_op(ctx, c).time * lookups;
  st.backward += t;
  st.compute += t;
}

// An output head's loss, `heads` times (the model's and each MTP module's).
void add_loss(StageTimes& st, const TimeContext& ctx, const PlanChoice& c, double heads) {
  const LossPasses loss = cross_entropy_passes(ctx, c);
  st.forward += loss.forward.time * heads;
  st.backward += loss.backward * heads;
  st.compute += (loss.forward.time + loss.backward) * heads;
}

// What `passes` passes add once each, not per layer: activation offloading's copy at each edge,
// and each backward's top-layer rematerializing gather (StageTimes).
void add_pass_edges(StageTimes& st, double passes) {
  st.offload_forward += st.offload_edge_forward * passes;
  st.offload_backward += st.offload_edge_backward * passes;
  st.forward += st.offload_edge_forward * passes;
  st.backward += (st.offload_edge_backward + st.remat_edge) * passes;
}

// What stage s's chunk passes need for it, once a stage: each kind's traffic by link, and the
// send beside each direction's passes (forward passes' from backwards, up the pipeline).
struct StageSends {
  std::array<LinkLoads, LayerKinds::kCount> traffic;
  bool across[2] = {false, false};  // by pass: forward, backward
  Seconds send[2];
  double per_pass[2] = {0, 0};  // sends a pass of that direction, on average over the chunks
  // Whether any pass keeps traffic on a send's link: most layouts keep none there (EP in the
  // node, sends across it), and the search's hot path stops.
  bool shared = false;
};

StageSends stage_sends(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds,
                       int64_t s) {
  const ParallelConfig& p = c.parallel;
  const int64_t pp = *p.pp, v = *p.vpp;
  StageSends out;
  if (pp == 1) return out;
  const Bytes bytes = boundary_bytes(ctx, c);
  for (int backward = 0; backward < 2; ++backward) {
    // The send beside a forward came from a backward, which sends up the pipeline (but chunk
    // 0's on stage 0); the one beside a backward from a forward, down (but the last stage's
    // last).
    const int64_t to = backward ? (s + 1) % pp : (s + pp - 1) % pp;
    const bool none = backward ? s == pp - 1 : s == 0;
    out.per_pass[backward] = static_cast<double>(v - (none ? 1 : 0)) / static_cast<double>(v);
    out.across[backward] = boundary_crosses_nodes(ctx, p, s, to);
    out.send[backward] = bytes / (out.across[backward] ? ctx.links.inter : ctx.links.intra);
  }
  const LayerKinds::Times& own = kinds.at(s);
  const GroupsAcross groups(ctx, p);
  for (size_t k = 0; k < own.size(); ++k) {
    out.traffic[k] = groups.traffic(own[k]);
    for (int b = 0; b < 2; ++b)
      out.shared |= out.per_pass[b] > 0 && out.traffic[k].on(out.across[b]).value() > 0;
  }
  return out;
}

// A pipeline send starts beside the pass after the one that made it (in 1F1B's steady state a
// forward's send beside a backward and the other way round) and takes the link the pass's
// communication takes where both cross nodes or both stay in the node. The simulator shares
// the link flow by flow: the send gets what the pass's first layers leave free of their own
// traffic and slows that traffic for the rest, and the pass, which waits for it, by as much.
// So the stretch is the roofline over the layers the send runs beside: their traffic there and
// the send, beyond their time, at most their traffic. (A random 7-layer model over the 4-GPU
// A800 nodes at pp 2, vpp 2, EP 8 across nodes: 33.5 MB sends at 6.25 GB/s a GPU beside
// layers whose all-to-alls held the NIC 87 % of their 7.5 ms. Each pass after a send took
// 4.5 ms longer in the simulator, the planner 18.7 % under it.)
Seconds send_stretch(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds,
                     const StageSends& sends, int64_t s, const LayerRange& layers,
                     bool backward_pass) {
  const int b = backward_pass ? 1 : 0;
  if (!sends.shared || sends.per_pass[b] <= 0) return Seconds(0);
  const Seconds send = sends.send[b];
  const double passes = traffic_passes(c.recompute);
  Seconds covered, traffic, stretch;
  for (int64_t i = 0; i < layers.size(); ++i) {
    const int64_t l = backward_pass ? layers.end - 1 - i : layers.begin + i;
    const size_t kind = ctx.layer_kinds[static_cast<size_t>(l)];
    const StageTimes& layer = kinds.at(s)[kind];
    const Seconds link = sends.traffic[kind].on(sends.across[b]);
    const Seconds forward_part = link / passes;
    traffic += backward_pass ? link - forward_part : forward_part;
    covered += backward_pass ? layer.backward : layer.forward;
    stretch = std::clamp(traffic + send - covered, Seconds(0), traffic);
    if (covered >= send + stretch) break;
  }
  return stretch * sends.per_pass[b];
}

// Model chunk k of stage s, one micro-batch: its forward and backward over the chunk's layers
// (chunk_layers), the output head and MTP modules on the last stage's last chunk; `sends` the
// stage's (stage_sends), priced once for all its chunks.
std::pair<Seconds, Seconds> chunk_passes(const TimeContext& ctx, const PlanChoice& c,
                                         const LayerKinds& kinds, const StageSends& sends,
                                         int64_t s, int64_t k) {
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& p = c.parallel;
  const int64_t v = *p.vpp;
  Seconds forward, backward, edge_forward, edge_backward, remat_edge;
  const LayerRange layers = chunk_layers(m, p, s, k);
  for (int64_t l = layers.begin; l < layers.end; ++l) {
    const StageTimes& layer = kinds.of(ctx, s, static_cast<size_t>(l));
    forward += layer.forward;
    backward += layer.backward;
    edge_forward = std::max(edge_forward, layer.offload_edge_forward);
    edge_backward = std::max(edge_backward, layer.offload_edge_backward);
    remat_edge = std::max(remat_edge, layer.remat_edge);
  }
  backward += remat_edge;
  forward += edge_forward + send_stretch(ctx, c, kinds, sends, s, layers, false);
  backward += edge_backward + send_stretch(ctx, c, kinds, sends, s, layers, true);
  if (k == 0) backward += before_first_layer(ctx, c, s).backward;
  if (k == v - 1) {
    const StageTimes tail = after_last_layer(ctx, c, kinds, s);
    forward += tail.forward;
    backward += tail.backward;
  }
  return {forward, backward};
}

// Calls visit(stage, forward, backward) for every chunk of every stage, in order.
template <class Visit>
void for_each_chunk(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds,
                    Visit visit) {
  for (int64_t s = 0; s < *c.parallel.pp; ++s) {
    const StageSends sends = stage_sends(ctx, c, kinds, s);
    for (int64_t k = 0; k < *c.parallel.vpp; ++k) {
      const auto [forward, backward] = chunk_passes(ctx, c, kinds, sends, s, k);
      visit(s, forward, backward);
    }
  }
}

}  // namespace

LayerKinds layer_kinds(const TimeContext& ctx, const PlanChoice& c) {
  LayerKinds k;
  k.times = kinds_at(ctx, c);
  if (c.stage_chunks.empty()) return k;
  // Each other chunk count once: MACT's bins are few.
  std::vector<std::pair<int64_t, LayerKinds::Times>> priced{{c.fcda_chunks, k.times}};
  for (int64_t s = 0; s < c.parallel.pp.value_or(1); ++s) {
    const int64_t chunks = c.chunks_on_stage(s);
    auto it = std::find_if(priced.begin(), priced.end(),
                           [&](const auto& p) { return p.first == chunks; });
    if (it == priced.end()) {
      PlanChoice own = c;
      own.fcda_chunks = chunks;
      own.stage_chunks.clear();
      priced.emplace_back(chunks, kinds_at(ctx, own));
      it = priced.end() - 1;
    }
    k.by_stage.push_back(it->second);
  }
  return k;
}

StageTimes mtp_times(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds) {
  const ModelSpec& m = *ctx.model;
  StageTimes st;
  if (m.mtp_layers <= 0) return st;
  const double modules = static_cast<double>(m.mtp_layers);
  add(st, kinds.of(ctx, mtp_stage(c.parallel), static_cast<size_t>(m.num_layers - 1)), modules);
  add_gemm_block(st, (mtp_projection_time(ctx, c) + output_head_time(ctx, c)) * modules);
  add_loss(st, ctx, c, modules);
  add_embedding_gradient(st, ctx, c, modules);
  return st;
}

StageTimes before_first_layer(const TimeContext& ctx, const PlanChoice& c, int64_t stage) {
  StageTimes st;
  if (stage == 0) add_embedding_gradient(st, ctx, c, 1.0);
  return st;
}

StageTimes after_last_layer(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds,
                            int64_t stage) {
  StageTimes st;
  if (stage == *c.parallel.pp - 1) {
    add_gemm_block(st, output_head_time(ctx, c));
    add_loss(st, ctx, c, 1.0);
  }
  if (stage == mtp_stage(c.parallel)) add(st, mtp_times(ctx, c, kinds), 1.0);
  return st;
}

StageTimes stage_from(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds,
                      int64_t stage) {
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& p = c.parallel;
  // Layers counted by kind, then priced (the search's hot path: an add a kind, not a layer).
  std::array<int64_t, LayerKinds::kCount> layers{};
  for_each_stage_layer(m, p, stage,
                       [&](int64_t i) { ++layers[ctx.layer_kinds[static_cast<size_t>(i)]]; });
  StageTimes st;
  for (size_t k = 0; k < LayerKinds::kCount; ++k) {
    if (layers[k] > 0) add(st, kinds.at(stage)[k], static_cast<double>(layers[k]));
  }
  add(st, before_first_layer(ctx, c, stage), 1.0);
  add(st, after_last_layer(ctx, c, kinds, stage), 1.0);
  add_pass_edges(st, static_cast<double>(*p.vpp));
  const StageSends sends = stage_sends(ctx, c, kinds, stage);
  for (int64_t k = 0; k < *p.vpp && sends.shared; ++k) {
    const LayerRange chunk = chunk_layers(m, p, stage, k);
    const Seconds forward = send_stretch(ctx, c, kinds, sends, stage, chunk, false);
    const Seconds backward = send_stretch(ctx, c, kinds, sends, stage, chunk, true);
    st.forward += forward;
    st.backward += backward;
    st.send_stretch += forward + backward;
  }
  return st;
}

namespace {

// Each chunk pass's own traffic on each link over its time (ChunkTimes::forward_busy), and which
// of the stage's sends cross nodes; left empty where the passes keep no traffic on any link (the
// search's hot path walks many such pipelines).
void add_link_busy(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds,
                   std::vector<ChunkTimes>& chunks) {
  const ParallelConfig& p = c.parallel;
  const int64_t pp = *p.pp;
  if (pp == 1) return;
  const GroupsAcross groups(ctx, p);
  const double passes = traffic_passes(c.recompute);
  std::array<LinkLoads, LayerKinds::kCount> traffic;
  auto price = [&](const LayerKinds::Times& times) {
    bool any = false;
    for (size_t k = 0; k < times.size(); ++k) {
      traffic[k] = groups.traffic(times[k]);
      any = any || traffic[k].nic.value() + traffic[k].fabric.value() > 0;
    }
    return any;
  };
  // Most plans price every stage's layers alike: their traffic once.
  const bool alike = kinds.by_stage.empty();
  if (alike && !price(kinds.times)) return;
  for (int64_t s = 0; s < pp; ++s) {
    if (!alike && !price(kinds.at(s))) continue;
    ChunkTimes& own = chunks[static_cast<size_t>(s)];
    own.down_across = boundary_crosses_nodes(ctx, p, s, (s + 1) % pp);
    own.up_across = boundary_crosses_nodes(ctx, p, s, (s + pp - 1) % pp);
    for (int64_t k = 0; k < *p.vpp; ++k) {
      const LayerRange layers = chunk_layers(*ctx.model, p, s, k);
      LinkLoads all;
      for (int64_t l = layers.begin; l < layers.end; ++l) {
        const LinkLoads& t = traffic[ctx.layer_kinds[static_cast<size_t>(l)]];
        all.nic += t.nic;
        all.fabric += t.fabric;
      }
      // The forward's share of each link's traffic, the backward's the rest (recompute's too).
      auto busy = [&](double share, Seconds pass) {
        if (!(pass.value() > 0)) return ChunkTimes::LinkBusy{};
        return ChunkTimes::LinkBusy{std::min(1.0, all.nic * share / pass),
                                    std::min(1.0, all.fabric * share / pass)};
      };
      const auto i = static_cast<size_t>(k);
      own.forward_busy.push_back(busy(1.0 / passes, own.forward[i]));
      own.backward_busy.push_back(busy(1.0 - 1.0 / passes, own.backward[i]));
    }
    // Where no pass keeps traffic on either send's link (TP and EP in the node, the sends
    // across it), the walk need not look.
    bool shared = false;
    for (const auto* passes_busy : {&own.forward_busy, &own.backward_busy}) {
      for (const ChunkTimes::LinkBusy& b : *passes_busy)
        shared = shared || b.on(own.down_across) > 0 || b.on(own.up_across) > 0;
    }
    if (!shared) own.forward_busy.clear(), own.backward_busy.clear();
  }
}

}  // namespace

std::vector<ChunkTimes> chunk_times(const TimeContext& ctx, const PlanChoice& c,
                                    const LayerKinds& kinds) {
  std::vector<ChunkTimes> out(static_cast<size_t>(*c.parallel.pp));
  for_each_chunk(ctx, c, kinds, [&](int64_t s, Seconds forward, Seconds backward) {
    out[static_cast<size_t>(s)].forward.push_back(forward);
    out[static_cast<size_t>(s)].backward.push_back(backward);
  });
  add_link_busy(ctx, c, kinds, out);
  return out;
}

ChunkSpread chunk_spread(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds) {
  const Seconds none(std::numeric_limits<double>::infinity());
  ChunkSpread out{none, none, Seconds(0)};
  for_each_chunk(ctx, c, kinds, [&](int64_t, Seconds forward, Seconds backward) {
    out.lightest_forward = std::min(out.lightest_forward, forward);
    out.lightest = std::min(out.lightest, forward + backward);
    out.heaviest = std::max(out.heaviest, forward + backward);
  });
  return out;
}

}  // namespace moe
