#include "planner/time_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "planner/dispatch_fanout.h"
#include "planner/host_time.h"
#include "planner/layer_ops.h"
#include "planner/memory_model.h"
#include "planner/parallel.h"
#include "planner/pipeline_schedule.h"

namespace moe {

namespace {

struct Pass {
  Seconds compute, tp, ep, cp;  // communication before overlap
  // What selective recompute replays before the backward: compute, and the TP and EP
  // collectives of the modules it replays (mlp, moe).
  Seconds redo_compute, redo_tp, redo_ep;
  // The forward compute before the layer's first communication and after its last: what a
  // rematerializing gather issued behind the layer above's last collective runs beside before
  // this layer's first compute that needs communicated data (the simulator's order).
  Seconds edge_compute;
};

Seconds exposed(Seconds comm, Seconds compute, bool overlap) {
  if (!overlap) return comm;
  const Seconds hidden = std::min(comm, compute);
  return comm - hidden + hidden * kOverlapResidual;
}

}  // namespace

FlopsPerSec peak_of(const TimeContext& ctx, Precision p) {
  if (p == Precision::kFp8) return ctx.gpu.peak_for(Dtype::kFp8);
  return reference_peak_of(ctx, p);
}

FlopsPerSec reference_peak_of(const TimeContext& ctx, Precision p) {
  return ctx.gpu.peak_for(p == Precision::kFp32 ? Dtype::kFp32 : Dtype::kBf16);
}

GemmRate linear_gemm_rate(const TimeContext& ctx, Precision p, Fp8Recipe r) {
  if (p != Precision::kFp8) return reference_gemm_rate(ctx, p);
  return {peak_of(ctx, p),
          r == Fp8Recipe::kBlockwise ? &ctx.eff.gemm_fp8_block : &ctx.eff.gemm_fp8};
}

GemmRate reference_gemm_rate(const TimeContext& ctx, Precision p) {
  return {reference_peak_of(ctx, p), &ctx.eff.gemm};
}

double comm_element_bytes(Precision p) {
  return p == Precision::kFp8 ? 1.0 : kActivationBytes;
}

double parameter_bytes(const PlanChoice& c) {
  return c.precision == Precision::kFp8 && !fp8_param_gather(c) ? parameter_bytes(Precision::kBf16)
                                                                : parameter_bytes(c.precision);
}

double parameter_bytes(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return 4.0;
    case Precision::kFp8:
      return 1.0;  // --fp8-param-gather
    case Precision::kBf16:
      break;
  }
  return 2.0;
}

TimeContext make_time_context(const ModelSpec& m, const ClusterSpec& c, const Efficiencies& eff,
                              const RoutingSkew& skew, int64_t seq_len) {
  TimeContext ctx;
  ctx.model = &m;
  ctx.params = count_params(m);
  ctx.layer_kinds.resize(m.moe_layer.size());
  for (size_t i = 0; i < m.moe_layer.size(); ++i) {
    const bool linear = !m.linear_layer.empty() && m.linear_layer[i];
    const size_t kind = (m.moe_layer[i] ? 0 : 1) + (linear ? 2 : 0);
    ctx.layer_kinds[i] = static_cast<uint8_t>(kind);
    if (ctx.first_layer_of_kind[kind] < 0) ctx.first_layer_of_kind[kind] = static_cast<int64_t>(i);
  }
  ctx.gpu = c.node.gpu;
  ctx.links = link_rates(c);
  ctx.eff = eff;
  ctx.skew = skew;
  ctx.flops = flops_per_token(m, seq_len);
  ctx.seq_len = seq_len;
  ctx.host_memory_per_gpu = c.node.host_memory_per_gpu();
  return ctx;
}

Seconds ring_time(const TimeContext& ctx, Bytes total, int64_t n, int64_t span) {
  // Nothing to move (a stage without experts has no expert gradients) costs nothing; the
  // efficiency curves are not defined at zero bytes.
  if (n <= 1 || !(total.value() > 0)) return Seconds(0);
  const bool cross = ctx.links.crosses_nodes(span);
  const EfficiencyCurve& curve = cross ? ctx.eff.allgather_inter : ctx.eff.allgather_intra;
  const double steps = static_cast<double>(n - 1);
  const Bytes per_step = total / static_cast<double>(n);
  // Curves are keyed as nccl-tests prints them: an all-gather's "size" is the gathered total.
  // Callers pass span = n x stride (the group's ranks at their stride).
  const BytesPerSec link = ctx.links.ring_link(n, span / n);
  return per_step * steps / (link * curve.at(total)) + ctx.links.latency(span) * steps;
}

Seconds alltoall_time(const TimeContext& ctx, Bytes per_rank, int64_t n, int64_t stride) {
  if (n <= 1 || !(per_rank.value() > 0)) return Seconds(0);
  const int64_t span = n * stride;
  const double nn = static_cast<double>(n);
  if (!ctx.links.crosses_nodes(span)) {
    return per_rank * ((nn - 1) / nn) /
               (ctx.links.alltoall_bandwidth(n, stride) * ctx.eff.alltoall_intra.at(per_rank)) +
           ctx.links.intra_latency;
  }
  // Peers inside the node go over NVLink while the rest leave through the NIC, concurrently.
  const double local = static_cast<double>(ctx.links.local_peers(n, stride));
  const Seconds intra =
      per_rank * ((local - 1) / nn) / (ctx.links.intra * ctx.eff.alltoall_intra.at(per_rank));
  const Seconds inter =
      per_rank * ((nn - local) / nn) / (ctx.links.inter * ctx.eff.alltoall_inter.at(per_rank));
  return std::max(intra, inter) + ctx.links.inter_latency;
}

Seconds deepep_time(const TimeContext& ctx, Bytes rows, int64_t n) {
  if (n <= 1 || !(rows.value() > 0)) return Seconds(0);
  const ModelSpec& m = *ctx.model;
  const Bytes message = rows * static_cast<double>(m.top_k);
  const int64_t per_node = ctx.links.local_peers(n, 1);
  const DispatchFanout f = dispatch_fanout(m, n, per_node);
  if (!ctx.links.crosses_nodes(n)) {
    return rows * f.ranks /
               (ctx.links.alltoall_bandwidth(n, 1) * ctx.eff.alltoall_intra.at(message)) +
           ctx.links.intra_latency;
  }
  // A token reaches each other node once, over the NIC, and the GPU there with the sender's
  // local index forwards it to the ranks that hold its experts; the sender's own node gets it
  // over NVLink directly. Of its rank copies, the share on other ranks of a node rides NVLink.
  const double local = static_cast<double>(per_node);
  const Seconds nvlink = rows * (f.ranks * (local - 1.0) / local) /
                         (ctx.links.intra * ctx.eff.alltoall_intra.at(message));
  const Seconds nic = rows * f.nodes / (ctx.links.inter * ctx.eff.alltoall_inter.at(message));
  return std::max(nvlink, nic) + ctx.links.inter_latency;
}

Seconds alltoall_from_heavy_time(const TimeContext& ctx, Bytes balanced, double load, int64_t n,
                                 int64_t stride) {
  const Bytes heavy = balanced * load;
  // Balanced, every rail NIC carries its own GPU's share with PXN or without: the per-rank form.
  if (n <= 1 || !ctx.links.crosses_nodes(n * stride) || !(load > 1.0))
    return alltoall_time(ctx, heavy, n, stride);
  // PXN sends a message for another node through the sender node's GPU on the receiver's
  // rail: the busiest rank's surplus leaves by every rail's NIC, not only its own. Each NIC
  // then carries the node's mean remote bytes (the busiest rank's and its local peers', which
  // share what it leaves over of the tokens); its NVLink carries all it sends but what goes
  // straight out of its own NIC to its own rail. Tested against the simulator's per-port PXN.
  const double nn = static_cast<double>(n);
  const double local = static_cast<double>(ctx.links.local_peers(n, stride));
  const double peer_load = std::max(0.0, (nn - load) / (nn - 1.0));
  const double node_mean = (load + (local - 1.0) * peer_load) / local;
  const Seconds nic = balanced * (node_mean * (nn - local) / nn) /
                      (ctx.links.inter * ctx.eff.alltoall_inter.at(heavy));
  const double forwarded = (nn - local) * (local - 1.0) / local;
  const Seconds nvlink = heavy * ((local - 1.0 + forwarded) / nn) /
                         (ctx.links.intra * ctx.eff.alltoall_intra.at(heavy));
  return std::max(nic, nvlink) + ctx.links.inter_latency;
}

monta::Problem expert_alltoall_problem(const TimeContext& ctx, const PlanChoice& c) {
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& p = c.parallel;
  const int64_t t = *p.tp, cp = *p.cp, ep = *p.ep, etp = *p.etp;
  const double tokens = static_cast<double>(*p.mbs * ctx.seq_len) / static_cast<double>(t * cp);
  monta::Problem prob;
  // Tokens are replicated across the TP group, so the AllToAll volume is I = k b s h BPE (eq. 3
  // with the routed copies), and the busiest rank receives the skew's share more.
  prob.volume =
      Bytes(tokens * static_cast<double>(t) * static_cast<double>(std::max<int64_t>(m.top_k, 1)) *
            static_cast<double>(m.hidden_size) * kActivationBytes * ctx.skew.imbalance(m, ep));
  prob.tp = etp;
  prob.ep = ep;
  prob.chunk_overhead = ctx.eff.pipeline_chunk_overhead;
  const int64_t span = ep * etp;
  const bool cross = ctx.links.crosses_nodes(span);
  prob.links = {ctx.links.bandwidth(span), ctx.links.intra, ctx.links.hbm};
  prob.curves = {cross ? ctx.eff.alltoall_inter : ctx.eff.alltoall_intra, ctx.eff.allgather_intra,
                 ctx.eff.d2d_copy};
  return prob;
}

double gemm_shape_factor(double m, double k, double n) {
  const double tile = 128.0;
  // Whole tiles of a side, less rounding noise: a balanced expert's 512 rows arrive as
  // 512.00000000000006 when they come from summed routing proportions, which is not a fifth
  // tile (it priced GLM-4.5's experts 25 % slower in the simulator than in the planner).
  auto tiles = [&](double side) { return std::ceil(side / tile * (1.0 - 1e-12)); };
  const double used = (m * n) / (tiles(m) * tile * tiles(n) * tile);
  const double depth = (k / (k + tile)) / (8192.0 / (8192.0 + tile));
  return used * std::min(depth, 1.0);
}

Seconds gemm_time(const TimeContext& ctx, const GemmRate& rate, double m, double k, double n,
                  double count, double grouped) {
  if (m <= 0 || k <= 0 || n <= 0 || count <= 0) return Seconds(0);
  const double flops = 2.0 * m * k * n;
  // The GEMM curve is read at one launch's FLOPs: a grouped GEMM schedules every expert's tiles
  // in one wave-filling kernel (Megatron's --moe-grouped-gemm), so launch overhead and wave
  // quantization follow the whole group. What the group cannot repair is each expert's shape
  // (MegaScale Sec. 3.2: TP "reduces GEMM efficiency" by slicing experts): partial 128 x 128
  // output tiles (Hopper/Ampere cuBLAS and CUTLASS kernels) cost like full ones, and a shallow K
  // leaves each tile's prologue and epilogue unamortised, K / (K + 128) relative to the 8192-deep
  // GEMM the curve was measured on (K = 176, DeepSeekMoE's expert cut 8 ways: 0.58).
  const double launch = flops * std::clamp(grouped, 1.0, count);
  const Seconds compute =
      Flops(flops * count) / (rate.peak * rate.curve->at(launch) * gemm_shape_factor(m, k, n));
  const Seconds memory = Bytes((m * k + k * n + m * n) * kActivationBytes * count) /
                         (ctx.links.hbm * ctx.eff.memory_bound);
  return std::max(compute, memory);
}

namespace {

// Forward costs of one layer for one micro-batch on one GPU: its operators summed by kind.
Pass layer_forward(const TimeContext& ctx, const PlanChoice& c, const LayerParams& lp,
                   bool moe_layer) {
  Pass out;
  const double load = moe_layer ? ctx.skew.imbalance(*ctx.model, *c.parallel.ep) : 1.0;
  const std::vector<LayerOp> ops = layer_forward_ops(ctx, c, lp, moe_layer, load, c.fcda_chunks);
  for (const ReplayedOp& r : recompute_ops(ctx, c, moe_layer, load, ops)) {
    (r.op.kind == OpKind::kCompute ? out.redo_compute
     : r.op.kind == OpKind::kEp    ? out.redo_ep
                                   : out.redo_tp) += r.op.time;
  }
  for (const LayerOp& op : ops) {
    switch (op.kind) {
      case OpKind::kCompute:
        out.compute += op.time;
        break;
      case OpKind::kTp:
        out.tp += op.time;
        break;
      case OpKind::kEp:
        out.ep += op.time;
        break;
      case OpKind::kCp:
        out.cp += op.time;
        break;
    }
  }
  const auto is_comm = [](const LayerOp& op) { return op.kind != OpKind::kCompute; };
  const auto first = std::find_if(ops.begin(), ops.end(), is_comm);
  const auto last = std::find_if(ops.rbegin(), ops.rend(), is_comm);
  for (auto it = ops.begin(); it != first; ++it) out.edge_compute += it->time;
  for (auto it = ops.rbegin(); it != last && first != ops.end(); ++it) out.edge_compute += it->time;
  return out;
}

}  // namespace

namespace {

// Every layer of a kind costs the same (MoE or dense FFN, softmax or Gated DeltaNet attention):
// one pass of each kind per candidate.
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

// How many forwards' worth of TP/EP/CP traffic a micro-batch puts on the links: forward,
// backward, and what recompute replays: the whole forward (full) or its all-gather half
// (MegaScale's rematerialization), which the link roofline and the DP sync windows carry too.
double traffic_passes(Recompute r) {
  return r == Recompute::kFull ? 3.0 : r == Recompute::kRematerialize ? 2.5 : 2.0;
}

// TP, EP and CP traffic by the link it takes: the NIC for groups that leave the node, the
// node's fabric for the rest (TP and EP on one link add up).
struct LinkLoads {
  Seconds nic, fabric;
  // The one a sync takes: the NICs where its group crosses nodes, else the node's fabric.
  Seconds on(bool crosses_nodes) const { return crosses_nodes ? nic : fabric; }
};
LinkLoads link_loads(const TimeContext& ctx, const ParallelConfig& p, Seconds tp, Seconds ep,
                     Seconds cp) {
  LinkLoads out;
  for (auto [kind, time] :
       {std::pair{OpKind::kTp, tp}, std::pair{OpKind::kEp, ep}, std::pair{OpKind::kCp, cp}})
    (crosses_nodes(ctx, p, kind) ? out.nic : out.fabric) += time;
  return out;
}

StageTimes one_layer(const TimeContext& ctx, const PlanChoice& c, const LayerParams& lp,
                     bool moe_layer) {
  const Pass f = layer_forward(ctx, c, lp, moe_layer);
  // A pass takes at least the work of the link its traffic shares. Per layer, as the simulator
  // runs them: a layer starts when the one before has ended, so a link-bound
  // MoE layer cannot borrow the idle link of a dense layer or of another stage. (Taken per
  // stage and only for the stage with the most compute, Kimi-Linear-48B on the A800 C1+G4
  // cluster, tp = 2 and ep = 8 on PCIe, came out 19 % under the simulator: the head's stage
  // had the compute, the others the link.)
  const LinkLoads links = link_loads(ctx, c.parallel, f.tp, f.ep, f.cp);
  // Without overlap a layer's operators run one after another. With it (MegaScale's
  // inter-operator overlap) the layer runs as 1 / kOverlapResidual slices that pipeline over
  // the compute stream and the links, a flow shop of identical jobs: one slice's whole chain,
  // then the busiest resource for the other slices, max(compute, NIC, fabric) (S - 1) / S.
  // The simulator runs the same slices. (Hiding TP and EP each behind the whole compute, as
  // before, counted the compute twice when both exceed it and added them when they ride
  // different links: MemFine Model II on the A800 cluster, TP = 8 over PCIe and EP = 32 over
  // the NICs, priced a MoE layer's forward at 151 ms against the simulator's 133.)
  const Seconds comm = f.tp + f.ep + f.cp;
  auto pipelined_over = [&](Seconds compute, Seconds comm, const LinkLoads& links) {
    if (!c.overlap) return compute + comm;
    return (compute + comm) * kOverlapResidual +
           std::max({compute, links.nic, links.fabric}) * (1.0 - kOverlapResidual);
  };
  // Overlapped dispatch and combine hold some of the SMs the compute beside them would use.
  Seconds held_sms;
  auto beside_ep = [&](Seconds compute, Seconds ep) {
    const Seconds slowed = compute * overlap_compute_stretch(ctx, c, compute, ep);
    held_sms += slowed - compute;
    return slowed;
  };
  auto pipelined = [&](Seconds compute) {
    return pipelined_over(beside_ep(compute, f.ep), comm, links);
  };
  const Seconds forward = pipelined(f.compute);
  // Backward: twice the compute, the same communication again.
  const Seconds backward = pipelined(f.compute * 2.0);
  // Full recompute replays the forward, communication included; selective replays what its
  // modules cover (layer_ops.h: recompute_ops), pipelined as a forward is; rematerialization
  // redoes element-wise work, ~5 % of a layer's forward.
  const bool full = c.recompute == Recompute::kFull;
  const bool remat = c.recompute == Recompute::kRematerialize;
  const Seconds redo = full ? f.compute : remat ? f.compute * 0.05 : f.redo_compute;
  const LinkLoads replayed = link_loads(ctx, c.parallel, f.redo_tp, f.redo_ep, Seconds(0));
  // MegaScale's rematerialization replays the all-gather/dispatch half of the communication in
  // backward, overlapped with the gradient computation it can run beside: the layer above's
  // after its last collective and this layer's before its first (twice their forward), as
  // the simulator issues it.
  const Seconds redo_comm = full    ? forward - f.compute
                            : remat ? exposed((f.tp + f.ep) * 0.5, f.edge_compute * 2.0, true)
                                    : pipelined_over(beside_ep(f.redo_compute, f.redo_ep),
                                                     f.redo_tp + f.redo_ep, replayed) -
                                          f.redo_compute;
  const double passes = traffic_passes(c.recompute);
  StageTimes st;
  st.forward = forward;
  st.backward = std::max({backward + redo + redo_comm, links.nic * (passes - 1.0) + replayed.nic,
                          links.fabric * (passes - 1.0) + replayed.fabric});
  // Neither pass ends before the host has issued it (host_time.h).
  const LayerHostTime host = layer_host_time(ctx, c, moe_layer);
  const Seconds work_backward = st.backward;
  const Seconds issued_forward = std::max(st.forward, host.forward);
  const Seconds issued_backward = std::max(st.backward, host.backward + host.recompute);
  st.host_forward = issued_forward - st.forward;
  st.host_backward = issued_backward - st.backward;
  st.forward = issued_forward;
  st.backward = issued_backward;
  // Activation offloading: a layer's saved inputs go to the host while the next layer runs
  // (Megatron's forward waits for the copy stream before it moves on) and come back while the
  // layer above runs backward, on copy streams at the host link's pinned-copy rate.
  if (c.offload_modules != 0) {
    const ModelSpec& m = *ctx.model;
    const Bytes bytes = layer_offloaded_bytes(
        m, activation_shape(m, c, ctx.seq_len), moe_layer,
        ctx.skew.received_tokens(m, *c.parallel.ep, static_cast<double>(ctx.seq_len)), c.recompute,
        c.recompute_modules, c.offload_modules);
    if (bytes.value() > 0) {
      const Seconds copy = host_copy_time(ctx, bytes);
      st.offload_forward = std::max(Seconds(0), copy - st.forward);
      st.offload_backward = std::max(Seconds(0), copy - st.backward);
      // The pass's edges: forward, the last layer's copy after it is issued; backward, the
      // first layer waits for its copy while the host issues it.
      st.offload_edge_forward = std::min(copy, st.forward);
      st.offload_edge_backward = std::max(copy + work_backward, host.backward + host.recompute) -
                                 std::max(st.backward, copy);
      st.forward += st.offload_forward;
      st.backward += st.offload_backward;
    }
  }
  st.compute = f.compute * 3.0;
  st.recompute = redo;
  st.tp = f.tp * passes + f.redo_tp;
  st.ep = f.ep * passes + f.redo_ep;
  st.cp = f.cp * passes;
  st.ep_held_sms = held_sms;
  return st;
}

}  // namespace

StageTimes layer_pass_times(const TimeContext& ctx, const PlanChoice& c, int64_t layer) {
  const auto i = static_cast<size_t>(layer);
  PlanChoice own = c;
  own.fcda_chunks = layer_fcda_chunks(*ctx.model, c, layer);
  own.stage_chunks.clear();
  return one_layer(ctx, own, ctx.params.layers.at(i), ctx.model->moe_layer.at(i));
}

int64_t layer_fcda_chunks(const ModelSpec& m, const PlanChoice& c, int64_t layer) {
  for (int64_t s = 0; s < c.parallel.pp.value_or(1); ++s) {
    for (int64_t k = 0; k < c.parallel.vpp.value_or(1); ++k) {
      const LayerRange r = chunk_layers(m, c.parallel, s, k);
      if (layer >= r.begin && layer < r.end) return c.chunks_on_stage(s);
    }
  }
  return c.fcda_chunks;
}

namespace {

LayerKinds::Times kinds_at(const TimeContext& ctx, const PlanChoice& c) {
  const ModelSpec& m = *ctx.model;
  LayerKinds::Times times;
  for (size_t kind = 0; kind < LayerKinds::kCount; ++kind) {
    const int64_t i = ctx.first_layer_of_kind[kind];
    if (i >= 0) {
      const auto layer = static_cast<size_t>(i);
      times[kind] = one_layer(ctx, c, ctx.params.layers[layer], m.moe_layer[layer]);
    }
  }
  return times;
}

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

void add(StageTimes& to, const StageTimes& from, double times) {
  to.forward += from.forward * times;
  to.backward += from.backward * times;
  to.compute += from.compute * times;
  to.recompute += from.recompute * times;
  to.tp += from.tp * times;
  to.ep += from.ep * times;
  to.cp += from.cp * times;
  to.ep_held_sms += from.ep_held_sms * times;
  to.host_forward += from.host_forward * times;
  to.host_backward += from.host_backward * times;
  to.offload_forward += from.offload_forward * times;
  to.offload_backward += from.offload_backward * times;
  to.offload_edge_forward = std::max(to.offload_edge_forward, from.offload_edge_forward);
  to.offload_edge_backward = std::max(to.offload_edge_backward, from.offload_edge_backward);
}

// A GEMM-bound block outside the layers, forward time t: its backward takes 2t.
void add_gemm_block(StageTimes& st, Seconds t) {
  st.forward += t;
  st.backward += t * 2.0;
  st.compute += t * 3.0;
}

// mtp_stage_times with the layer kinds already priced.
StageTimes mtp_times(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds) {
  const ModelSpec& m = *ctx.model;
  StageTimes st;
  if (m.mtp_layers <= 0) return st;
  const double modules = static_cast<double>(m.mtp_layers);
  add(st, kinds.of(ctx, mtp_stage(c.parallel), static_cast<size_t>(m.num_layers - 1)), modules);
  add_gemm_block(st, mtp_extra_time(ctx, c) * modules);
  return st;
}

// What a stage's last chunk runs after its layers, one micro-batch: on the last stage the
// output head (vocab-parallel over TP) and its loss, and the MTP modules where they sit (the
// last stage, unless a layout puts them on another).
StageTimes after_last_layer(const TimeContext& ctx, const PlanChoice& c, const LayerKinds& kinds,
                            int64_t stage) {
  StageTimes st;
  if (stage == *c.parallel.pp - 1) add_gemm_block(st, output_head_time(ctx, c));
  if (stage == mtp_stage(c.parallel)) add(st, mtp_times(ctx, c, kinds), 1.0);
  return st;
}

// Activation offloading's copy at each edge of `passes` passes (StageTimes).
void add_offload_edges(StageTimes& st, double passes) {
  st.offload_forward += st.offload_edge_forward * passes;
  st.offload_backward += st.offload_edge_backward * passes;
  st.forward += st.offload_edge_forward * passes;
  st.backward += st.offload_edge_backward * passes;
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
  add(st, after_last_layer(ctx, c, kinds, stage), 1.0);
  add_offload_edges(st, static_cast<double>(*p.vpp));
  return st;
}

// Model chunk k of stage s, one micro-batch: its forward and backward over the chunk's layers
// (chunk_layers), the output head and MTP modules on the last stage's last chunk.
std::pair<Seconds, Seconds> chunk_passes(const TimeContext& ctx, const PlanChoice& c,
                                         const LayerKinds& kinds, int64_t s, int64_t k) {
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& p = c.parallel;
  const int64_t v = *p.vpp;
  Seconds forward, backward, edge_forward, edge_backward;
  const LayerRange layers = chunk_layers(m, p, s, k);
  for (int64_t l = layers.begin; l < layers.end; ++l) {
    const StageTimes& layer = kinds.of(ctx, s, static_cast<size_t>(l));
    forward += layer.forward;
    backward += layer.backward;
    edge_forward = std::max(edge_forward, layer.offload_edge_forward);
    edge_backward = std::max(edge_backward, layer.offload_edge_backward);
  }
  forward += edge_forward;
  backward += edge_backward;
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
    for (int64_t k = 0; k < *c.parallel.vpp; ++k) {
      const auto [forward, backward] = chunk_passes(ctx, c, kinds, s, k);
      visit(s, forward, backward);
    }
  }
}

// Every chunk of every stage: what the schedule walk takes.
std::vector<ChunkTimes> chunk_times(const TimeContext& ctx, const PlanChoice& c,
                                    const LayerKinds& kinds) {
  std::vector<ChunkTimes> out(static_cast<size_t>(*c.parallel.pp));
  for_each_chunk(ctx, c, kinds, [&](int64_t s, Seconds forward, Seconds backward) {
    out[static_cast<size_t>(s)].forward.push_back(forward);
    out[static_cast<size_t>(s)].backward.push_back(backward);
  });
  return out;
}

// The lightest chunk's forward, without building the chunk lists (most candidates stop here).
Seconds lightest_chunk_forward(const TimeContext& ctx, const PlanChoice& c,
                               const LayerKinds& kinds) {
  Seconds lightest(std::numeric_limits<double>::infinity());
  for_each_chunk(ctx, c, kinds, [&](int64_t, Seconds forward, Seconds) {
    lightest = std::min(lightest, forward);
  });
  return lightest;
}

}  // namespace

Seconds host_copy_time(const TimeContext& ctx, Bytes bytes) {
  return bytes / (ctx.links.host * ctx.eff.pcie_h2d.at(bytes.value()));
}

StageTimes stage_times(const TimeContext& ctx, const PlanChoice& c, int64_t stage) {
  return stage_from(ctx, c, layer_kinds(ctx, c), stage);
}

StageTimes mtp_stage_times(const TimeContext& ctx, const PlanChoice& c) {
  return ctx.model->mtp_layers > 0 ? mtp_times(ctx, c, layer_kinds(ctx, c)) : StageTimes{};
}

Bytes boundary_bytes(const TimeContext& ctx, const PlanChoice& c) {
  const ParallelConfig& p = c.parallel;
  return Bytes(static_cast<double>(*p.mbs * ctx.seq_len) *
               static_cast<double>(ctx.model->hidden_size) * kActivationBytes /
               static_cast<double>(*p.tp * *p.cp));
}

int64_t boundary_span(const ParallelConfig& p) {
  return *p.tp * *p.cp * *p.dp * 2;
}

DpSync dp_sync_times(const TimeContext& ctx, const PlanChoice& c, int64_t stage) {
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& p = c.parallel;
  const int64_t t = *p.tp, cp = *p.cp, dp = *p.dp, ep = *p.ep, etp = *p.etp, edp = *p.edp;
  // Gradient reduce-scatter and parameter all-gather of the stage's layer weights.
  const LayerWeights w =
      stage_layer_weights(m, ctx.params, p, stage, c.attention == AttentionMode::kUlysses);
  const double dense = w.dense, replicated = w.replicated, expert = w.expert;
  const double grad_bytes = c.dp_bf16_compression ? 2.0 : 4.0;
  const double param_bytes = parameter_bytes(c);
  // MegaScale App. A.1: the replicated weights sync hierarchically, a reduce-scatter inside the
  // node's SP group over NVLink, then across DP on 1/t of them (the bytes TP's shards move),
  // and the mirror for the all-gather; a flat ring over all t x dp ranks would send t times
  // the bytes through the NICs.
  // The two stages use different links, so MegaScale cuts them into chunks and pipelines them
  // (App. A.1, Fig. 5b): the shorter hides under the longer but for one chunk. We take Megatron's
  // DDP buckets as the chunks (max(40M, 1M x dp) parameters, its default --ddp-bucket-size).
  // Only the in-node stage's part that does not hide is kept apart (the `_in_node` times the
  // simulator runs on NVLink before the rest), so NVLink's own busy time is understated there.
  const bool dp_crosses = ctx.links.crosses_nodes(t * cp * dp);
  const double buckets =
      std::max(1.0, std::ceil(replicated / std::max(40e6, 1e6 * static_cast<double>(dp))));
  struct Steps {
    Seconds in_node, across;
  };
  auto hierarchical = [&](double bytes_per_param) {
    const Seconds in_node = ring_time(ctx, Bytes(replicated * bytes_per_param), t, t);
    const Seconds across = ring_time(
        ctx, Bytes(replicated * bytes_per_param / static_cast<double>(t)), dp, t * cp * dp);
    if (!dp_crosses || in_node.value() <= 0) return Steps{in_node, across};
    const Seconds wall = std::max(in_node, across) + std::min(in_node, across) / buckets;
    return Steps{wall - across, across};
  };
  const Steps rs = hierarchical(grad_bytes), ag = hierarchical(param_bytes);
  DpSync out;
  out.reduce_scatter_in_node = rs.in_node;
  out.all_gather_in_node = ag.in_node;
  out.reduce_scatter = ring_time(ctx, Bytes(dense * grad_bytes), dp, t * cp * dp) + rs.in_node +
                       rs.across + ring_time(ctx, Bytes(expert * grad_bytes), edp, etp * ep * edp);
  out.all_gather = ring_time(ctx, Bytes(dense * param_bytes), dp, t * cp * dp) + ag.in_node +
                   ag.across + ring_time(ctx, Bytes(expert * param_bytes), edp, etp * ep * edp);
  out.crosses_nodes = dp_crosses || ctx.links.crosses_nodes(etp * ep * edp);
  // Adam reads and writes master weights, momentum and variance (24 B) and the weight (4 B) of
  // the local shard.
  const bool sharded = c.zero_stage >= 1;
  const double local = dense / (sharded ? static_cast<double>(dp) : 1.0) +
                       replicated / (sharded ? static_cast<double>(dp * t) : 1.0) +
                       expert / (sharded ? static_cast<double>(edp) : 1.0);
  // Optimizer CPU offload (HybridDeviceOptimizer): the GPU steps its share while the CPU steps
  // the rest, which first copies its FP32 gradients out and afterwards the new weights back,
  // the three overlapped group by group (--overlap-cpu-optimizer-d2h-h2d). The CPU's Adam is
  // bound by the socket's memory bandwidth as the GPU's by HBM's.
  const double f = c.optimizer_offload;
  out.optimizer = Bytes(local * (1.0 - f) * 28.0) / (ctx.links.hbm * ctx.eff.memory_bound);
  if (f > 0) {
    const double on_cpu = local * f;
    const Seconds out_copy = Bytes(on_cpu * 4.0) / (ctx.links.host * ctx.eff.pcie_h2d.at(1e9));
    const Seconds back = Bytes(on_cpu * param_bytes) / (ctx.links.host * ctx.eff.pcie_h2d.at(1e9));
    const Seconds step = ctx.links.host_memory.value() > 0
                             ? Bytes(on_cpu * 28.0) / (ctx.links.host_memory * ctx.eff.memory_bound)
                             : Seconds(std::numeric_limits<double>::infinity());
    out.optimizer = std::max(out.optimizer, std::max({out_copy, step, back}));
  }
  return out;
}

namespace {

// estimate_time, with `scratch()` giving a copy of ctx whose links it may overwrite.
// Nothing when the iteration reaches `bound` before the DP syncs' windows are priced.
template <class Scratch>
std::optional<TimeBreakdown> estimate_time_with(const TimeContext& ctx, const PlanChoice& c,
                                                Scratch scratch, Seconds bound,
                                                Seconds* before_syncs) {
  const ParallelConfig& p = c.parallel;
  const int64_t pp = *p.pp, dp = *p.dp;
  TimeBreakdown out;
  out.microbatches = *p.gbs / (*p.mbs * dp);
  const double mb = static_cast<double>(out.microbatches);

  const LayerKinds kinds = layer_kinds(ctx, c);
  StageTimes slowest;
  int64_t slowest_stage = 0;
  std::vector<Seconds> per_stage;
  std::vector<StageTimes> stages;
  per_stage.reserve(static_cast<size_t>(pp));
  stages.reserve(static_cast<size_t>(pp));
  for (int64_t s = 0; s < pp; ++s) {
    const StageTimes st = stage_from(ctx, c, kinds, s);
    stages.push_back(st);
    per_stage.push_back(st.forward + st.backward);
    if (st.forward + st.backward > slowest.forward + slowest.backward) {
      slowest = st;
      slowest_stage = s;
    }
  }
  const Seconds per_mb = slowest.forward + slowest.backward;
  // Split the steady state by what the slowest stage spends it on.
  // The compute that overlapped EP communication's SMs slowed is EP's cost, as far as it shows.
  const Seconds exposed_all =
      per_mb - slowest.compute - slowest.recompute - slowest.host() - slowest.offload();
  const Seconds held =
      std::clamp(slowest.ep_held_sms, Seconds(0), std::max(exposed_all, Seconds(0)));
  const Seconds exposed_comm = exposed_all - held;
  const Seconds raw_comm = slowest.tp + slowest.ep + slowest.cp;
  auto share = [&](Seconds part) {
    return raw_comm.value() > 0 ? exposed_comm * (part / raw_comm) : Seconds(0);
  };
  out.compute = slowest.compute * mb;
  out.recompute = slowest.recompute * mb;
  out.tp_comm = share(slowest.tp) * mb;
  out.ep_comm = (share(slowest.ep) + held) * mb;
  out.ep_held_sms = held * mb;
  out.cp_comm = share(slowest.cp) * mb;
  out.host = slowest.host() * mb;
  out.activation_offload = slowest.offload() * mb;
  // Fill and drain: each stage's pass once, less the slowest's that the steady state counts
  // ((p - 1) t with equal stages; a light stage, or a single micro-batch, shortens it).
  // Interleaved: (p - 1) / v of the slowest's. (The lighter stages' share, (sum - t_max) / v,
  // put the planner further from the simulator over the shipped pairs: mean |diff| 1.41 %
  // against 1.35 %.)
  if (*p.vpp == 1) {
    for (const Seconds& t : per_stage) out.bubble += t;
    out.bubble -= per_mb;
  } else {
    out.bubble = per_mb * (static_cast<double>(pp - 1) / static_cast<double>(*p.vpp));
  }
  Seconds hop;
  if (pp > 1) {
    const int64_t stage_span = boundary_span(p);
    hop = boundary_bytes(ctx, c) / ctx.links.bandwidth(stage_span) + ctx.links.latency(stage_span);
    out.pp_comm = hop * (2.0 * static_cast<double>(pp - 1));
  }
  // The hops a micro-batch waits for in the steady state (pipeline_schedule.h). 1F1B: Little's
  // law over the micro-batches each stage holds in flight. Interleaving sends each micro-batch
  // round the ring of stages once per chunk: a hop longer than a quarter of the lightest
  // chunk's forward can leave a stage waiting for its next input, so walk the schedule; below
  // that the closed form is within 1.5 % and the search keeps its speed. GPipe holds every
  // micro-batch in flight and waits only at its ends.
  if (pp > 1 && *p.vpp == 1 && !c.gpipe)
    out.bubble += (one_f_one_b_period(per_stage, hop) - per_mb) * mb;
  // With fewer than 2p micro-batches the closed form misses how a light stage's passes overlap
  // the heavy one's warm-up (two dense layers then one MoE layer and the head over pp = 2, two
  // micro-batches: 14 % over the simulator); the walk is short there, so take it (GPipe's too).
  const bool few = out.microbatches < 2 * pp;
  const bool walk_few = pp > 1 && *p.vpp == 1 && few;
  std::vector<ChunkTimes> few_chunks;
  Seconds few_walked;
  if (walk_few) {
    few_chunks = chunk_times(ctx, c, kinds);
    few_walked = schedule_makespan(few_chunks, out.microbatches, hop, c.gpipe);
    out.bubble = std::max(few_walked - per_mb * mb - out.pp_comm, Seconds(0));
  }
  // A flexible layout can leave stages far apart, where no closed form holds: a heavy stage near
  // the front hides the others' fill and drain. Unless it has the search's shape (equal middle
  // virtual stages, ends no heavier: priced in closed form, as pp_first/pp_last are), a layout
  // with one stage over 1.25x another is walked and the walk taken. (GLM-4.5 at pp 4 x vpp 3
  // with one stage 1.5x the others: the closed form was 7 % over the simulator.) The search
  // cannot walk every candidate: at hundreds of micro-batches a walk costs a millisecond.
  const auto [lightest, heaviest] = std::minmax_element(per_stage.begin(), per_stage.end());
  const bool stages_apart = *heaviest > *lightest * 1.25;
  const bool uneven_layout = !p.layout.empty() && !has_end_light_shape(p.layout) && stages_apart;
  // Under 2p micro-batches, as for 1F1B above, the walk is short and taken as it comes (an
  // embedding-only first chunk and a head-only last one over pp = 2, v = 2, two micro-batches:
  // the closed form was 21 % over the simulator). So it is up to 4p micro-batches where the
  // stages' times differ, whatever the layout's shape: (p - 1) / v of the slowest stage is
  // what an equal pipeline idles, and dense and MoE layers in equal counts are not equal (two
  // MoE layers on one stage of four, eight micro-batches: the closed form was 17 % over).
  const bool uneven_stages = out.microbatches <= 4 * pp && stages_apart;
  if (pp > 1 && *p.vpp > 1 &&
      (uneven_layout || few || uneven_stages ||
       hop > lightest_chunk_forward(ctx, c, kinds) * 0.25)) {
    const std::vector<ChunkTimes> chunks = chunk_times(ctx, c, kinds);
    const Seconds walked = schedule_makespan(chunks, out.microbatches, hop, c.gpipe);
    const Seconds beyond = std::max(walked - per_mb * mb - out.pp_comm, Seconds(0));
    out.bubble = uneven_layout || few || uneven_stages ? beyond : std::max(out.bubble, beyond);
  }

  // What follows prices the DP syncs: the optimizer step, and their exposure, which only adds (a
  // sync stretches the passes it shares links with, never shortens them). The terms so far bound
  // the iteration from below.
  const Seconds unsynced = per_mb * mb + out.bubble + out.pp_comm;
  if (before_syncs) *before_syncs = unsynced;
  if (unsynced >= bound) return std::nullopt;
  const DpSync sync = dp_sync_times(ctx, c, slowest_stage);
  const Seconds rs = sync.reduce_scatter, ag = sync.all_gather;
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
  // chunks follow. The chain shows by the most any chunk's sync outlasts that:
  // max(T/v - q, T - q - (v - 1) p q) for a sync of T and chunk passes of q, which is T - q
  // when v = 1. (Against the stage's whole sync beside one pass, Qwen3-30B-A3B on 240 H800 at
  // pp = 2, vpp = 4 came out 4.8 % over the simulator.)
  std::vector<DpSync> syncs(static_cast<size_t>(pp));
  for (int64_t s = 0; s < pp; ++s)
    syncs[static_cast<size_t>(s)] = s == slowest_stage ? sync : dp_sync_times(ctx, c, s);
  // The optimizer step waits for every stage's.
  for (const DpSync& own : syncs) out.optimizer = std::max(out.optimizer, own.optimizer);
  if (unsynced + out.optimizer >= bound) return std::nullopt;
  struct Exposed {
    int64_t stage = 0;
    Seconds slack;          // how long the stage runs passes before its sync's window opens
    Seconds exposure;       // what the sync outlasts its window by (negative: it hides)
    double overlapped = 1;  // the stage's passes (v chunk passes each) the sync runs beside
  };
  const double v = static_cast<double>(*p.vpp);
  const double later_chunks = (v - 1.0) * static_cast<double>(pp);
  auto most_exposed = [&](bool backward_pass) {
    Exposed best{0, Seconds(0), Seconds(-std::numeric_limits<double>::infinity())};
    Seconds slack;
    for (int64_t s = 0; s < pp; ++s) {
      const DpSync& own = syncs[static_cast<size_t>(s)];
      const StageTimes& st = stages[static_cast<size_t>(s)];
      const Seconds chunk_pass = (backward_pass ? st.backward : st.forward) / v;
      const Seconds sync = backward_pass ? own.reduce_scatter : own.all_gather;
      const Seconds exposure =
          std::max(sync / v - chunk_pass, sync - chunk_pass - chunk_pass * later_chunks) - slack;
      // Interleaved, the chain runs beside as many chunk passes as it lasts, at most those of
      // its window ((v - 1) p + 1); without interleaving, beside its one pass. A sync shorter
      // than its pass shares the links for its own length only: taken as sharing the whole
      // pass, a ZeRO-1 reduce-scatter of 68 ms beside a 184 ms backward over the NICs came out
      // 13 % over the simulator.
      const double beside =
          chunk_pass.value() > 0 ? std::clamp(sync / chunk_pass, 0.0, later_chunks + 1.0) : 1.0;
      if (exposure > best.exposure) best = {s, slack, exposure, beside / v};
      slack += chunk_pass + hop;
    }
    return best;
  };
  // The all-gather behind the first forward (ZeRO 1-2) and ZeRO-1's reduce-scatter behind the
  // last backward take the links that pass's TP/EP/CP traffic takes: the NICs for what crosses
  // nodes, NVLink for what stays in the node (a hierarchical sync's in-node stage, or all of it
  // when DP stays in the node). While both run each gets half a link, so the pass sees that
  // link slower by the share of its traffic there the sync's time covers (communication fused
  // into GEMMs included), and the sync takes as much longer: what the sync costs beyond its own
  // exposed tail. (The simulator shares them flow by flow; DeepSeekMoE-16B with EP = DP = 16
  // over two 8 x H800 nodes lost 12 ms of 68 to it.)
  // A stage's traffic by link, fused into GEMMs or not (unfused, the same bytes show as TP/EP);
  // only priced when there is a sync to share with (the search scores most candidates here).
  // The unfused layer prices are taken once, however many windows ask.
  PlanChoice unfused = c;
  unfused.intra_overlap = false;
  std::optional<LayerKinds> unfused_kinds;
  auto traffic_of = [&](int64_t stage) {
    if (c.intra_overlap && !unfused_kinds) unfused_kinds = layer_kinds(ctx, unfused);
    const StageTimes traffic = c.intra_overlap ? stage_from(ctx, unfused, *unfused_kinds, stage)
                                               : stages[static_cast<size_t>(stage)];
    return link_loads(ctx, p, traffic.tp, traffic.ep, traffic.cp);
  };
  const double passes = traffic_passes(c.recompute);
  // One window: the sync's time on each link against the pass's traffic there (forward or
  // backward share) on `stage`; returns the stretched pass and the sync's own stretch.
  auto window = [&](int64_t stage, Seconds time, Seconds in_node, bool backward_pass,
                    double overlapped) {
    const StageTimes& own = stages[static_cast<size_t>(stage)];
    const Seconds unshared = backward_pass ? own.backward : own.forward;
    if (time.value() <= 0) return std::pair{unshared, time};
    const auto [nic_comm, fabric_comm] = traffic_of(stage);
    const Seconds on_nic = sync.crosses_nodes ? time - in_node : Seconds(0);
    const Seconds on_fabric = sync.crosses_nodes ? in_node : time;
    auto share = [&](Seconds comm) {
      const Seconds forward_part = comm / passes;
      return (backward_pass ? comm - forward_part : forward_part) * overlapped;
    };
    // A link's slowdown while the sync shares it, and what the sync waits for the pass there.
    struct Sharing {
      double slowdown = 1.0;
      Seconds delay;
    };
    auto sharing = [&](Seconds sync_part, Seconds comm) {
      if (sync_part.value() <= 0 || comm.value() <= 0) return Sharing{};
      return Sharing{1.0 + std::min(1.0, sync_part / comm), std::min(sync_part, comm)};
    };
    const Sharing nic_share = sharing(on_nic, share(nic_comm));
    const Sharing fabric_share = sharing(on_fabric, share(fabric_comm));
    const Seconds delay = nic_share.delay + fabric_share.delay;
    // Nothing shared: the pass as it was (most candidates; no second pricing).
    if (delay.value() <= 0) return std::pair{unshared, time};
    TimeContext& shared = scratch();
    shared.links = ctx.links;
    shared.links.inter = shared.links.inter / nic_share.slowdown;
    shared.links.intra = shared.links.intra / fabric_share.slowdown;
    const StageTimes st = stage_from(shared, c, layer_kinds(shared, c), stage);
    const Seconds stretched = backward_pass ? st.backward : st.forward;
    return std::pair{unshared + (stretched - unshared) * overlapped, time + delay};
  };
  // The all-gather has run alone for the stage's slack before its first forward starts; the
  // reduce-scatter shares the last backward, then runs alone for the slack. A pass the sync
  // stretches delays every stage after it in the pipeline, so the stretch shows in full.
  if (c.zero_stage <= 1) {
    const Exposed e = most_exposed(true);
    const DpSync& own = syncs[static_cast<size_t>(e.stage)];
    const Seconds unshared = stages[static_cast<size_t>(e.stage)].backward;
    const auto [backward, rs_shared] =
        window(e.stage, own.reduce_scatter, own.reduce_scatter_in_node, true, e.overlapped);
    out.dp_reduce_stage = e.stage;
    out.dp_reduce_scatter = own.reduce_scatter;
    const Seconds stretch = backward - unshared;
    // Every stage starts its reduce-scatter with its last backward, and those backwards run one
    // after another down the pipeline's drain, each stretched by its own: the drain grows by
    // them all, pp of this stage's where the stages are alike. (Counting one, GLM-4.5 on 240
    // H800 at pp = 24 with EP 5 across nodes came out 9.0 % under the simulator: 24 backwards of
    // 40.2 ms each ran 59.6 ms beside their reduce-scatter.) Where they are not, each stretches
    // by its share of the traffic this one's link carries (one MoE layer against two and the
    // head over pp = 2, EP across nodes: 11 % under the simulator with the first's stretch
    // counted twice).
    double stretches = static_cast<double>(pp);
    if (stretch.value() > 0 && pp > 1) {
      auto on_sync_link = [&](int64_t s) { return traffic_of(s).on(sync.crosses_nodes); };
      const Seconds mine = on_sync_link(e.stage);
      if (mine.value() > 0) {
        stretches = 0;
        for (int64_t s = 0; s < pp; ++s) stretches += on_sync_link(s) / mine;
      }
    }
    out.dp_comm += std::max(Seconds(0), e.exposure + (rs_shared - own.reduce_scatter) - stretch) +
                   stretch * stretches;
  }
  if (c.zero_stage <= 2) {
    const Exposed e = most_exposed(false);
    const DpSync& own = syncs[static_cast<size_t>(e.stage)];
    const Seconds unshared = stages[static_cast<size_t>(e.stage)].forward;
    const Seconds left = std::max(Seconds(0), own.all_gather - e.slack);
    const double part = own.all_gather.value() > 0 ? left / own.all_gather : 0.0;
    const auto [forward, ag_shared] =
        window(e.stage, left, own.all_gather_in_node * part, false, e.overlapped);
    out.dp_gather_stage = e.stage;
    out.dp_all_gather = own.all_gather;
    const Seconds stretch = forward - unshared;
    out.dp_comm += std::max(Seconds(0), e.exposure + (ag_shared - left) - stretch) + stretch;
  }
  // ZeRO-2 and -3 sync every micro-batch on the links the pass's own traffic takes: the stage
  // that paces the pipeline is the slowest with its syncs, which need not be the slowest
  // without (a last stage lighter in weights but heavier in compute, DeepSeek-V3's with its MTP
  // module, hid less of the middle stages' syncs than it seemed to). The candidates: the
  // slowest stage and the one with the most to sync; each one's pass, and its links' load per
  // micro-batch.
  struct Paced {
    Seconds forward, backward, nic, fabric;
    // On the DP link: each pass's work there, and what the backward's reduce-scatter leaves
    // running after it (with `shared_reduce`).
    Seconds forward_link, backward_link, backward_tail;
    Seconds pass() const { return forward + backward; }
  };
  // `shared_reduce`: the backward carries only the part of its gradient reduce-scatter that
  // shares the link with its gathers (as much as they take; the simulator starts the two
  // together and the link splits between them), the rest running on behind the pass.
  auto paced = [&](int64_t s, bool shared_reduce = false) {
    const StageTimes& own = stages[static_cast<size_t>(s)];
    const DpSync& sy = syncs[static_cast<size_t>(s)];
    Seconds pass_forward = own.forward, pass_backward = own.backward;
    if (c.zero_stage >= 3) {
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
      const int64_t layers = layers_in_stage(*ctx.model, p, s);
      const double layer_share =
          layers > 0 ? std::min(1.0, static_cast<double>(*p.vpp) / static_cast<double>(layers))
                     : 0.0;
      const Seconds first = sy.all_gather * layer_share;
      const double later = 1.0 - layer_share;
      const auto [f, later_gathered] =
          window(s, sy.all_gather * later, sy.all_gather_in_node * later, false, 1.0);
      const Seconds gathered = first + later_gathered;
      const double rs_share = shared_reduce && sy.reduce_scatter.value() > 0
                                  ? std::min(1.0, sy.all_gather / sy.reduce_scatter)
                                  : 1.0;
      const auto [b, synced] =
          window(s, sy.all_gather + sy.reduce_scatter * rs_share,
                 sy.all_gather_in_node + sy.reduce_scatter_in_node * rs_share, true, 1.0);
      // The host issues the layers while the GPU waits for that first gather: only the GPU's
      // chain (the pass less what it waited for the host) starts late.
      auto gated = [&](Seconds pass, Seconds host, Seconds syncs) {
        const Seconds gpu = pass - host;
        return std::max({pass, gpu + first, syncs + gpu * layer_share});
      };
      pass_forward = gated(f, own.host_forward, gathered);
      pass_backward = gated(b, own.host_backward, synced);
    }
    // Each link is shared by everything that crosses it, however well each transfer hides behind
    // compute alone: a pass takes at least its links' work (a roofline per link and direction of
    // the pass; the simulator shares them flow by flow). The forward cannot borrow the idle link
    // time of a backward that is twice as long: Qwen3-30B-A3B with TP = 4 and EP = 8 in the node
    // sends 2.2 ms a layer over NVLink in a forward of 1.3 ms of compute. The NIC carries groups
    // that leave the node, the node's fabric the rest.
    const LinkLoads traffic = link_loads(ctx, p, own.tp, own.ep, own.cp);
    const LinkLoads own_forward{traffic.nic / passes, traffic.fabric / passes};
    const LinkLoads own_backward{traffic.nic - own_forward.nic,
                                 traffic.fabric - own_forward.fabric};
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
    if (c.zero_stage == 2) {
      const Seconds backward_link = backward_links.on(sy.crosses_nodes);
      const Seconds within = std::min(sy.reduce_scatter, std::max(pass_backward, backward_link));
      on_link(sy.crosses_nodes, sy.reduce_scatter - within, within);
    } else if (c.zero_stage >= 3) {
      on_link(sy.crosses_nodes, sy.all_gather,
              sy.all_gather +
                  (shared_reduce ? std::min(sy.all_gather, sy.reduce_scatter) : sy.reduce_scatter));
    }
    const Seconds nic = forward_links.nic + backward_links.nic;
    const Seconds fabric = forward_links.fabric + backward_links.fabric;
    // Syncs that load a pass's link beyond its own traffic stretch it from its bottleneck, and
    // the pass keeps what it took beyond that (a pipelined layer's fill, or the compute a serial
    // chain waits for): ZeRO-3 gathers on a link-bound pass add their whole time.
    // (The fill is the ungated pass's: ZeRO-3's wait for its gathers is what the link adds.)
    auto held_to = [](Seconds pass, Seconds ungated, Seconds compute, const LinkLoads& own,
                      const LinkLoads& loaded) {
      const Seconds fill = std::max(Seconds(0), ungated - std::max({compute, own.nic, own.fabric}));
      return std::max(pass, std::max(loaded.nic, loaded.fabric) + fill);
    };
    // (The fill is the GPU's: the host issues the pass while its links are busy. The backward's
    // compute holds what recompute replays: counted as fill, a ZeRO-3 layout with full
    // recompute over the NICs came out 15 % over the simulator.)
    const Seconds forward = held_to(pass_forward, own.forward - own.host_forward, own.compute / 3.0,
                                    own_forward, forward_links);
    const Seconds backward =
        held_to(pass_backward, own.backward - own.host_backward,
                own.compute * (2.0 / 3.0) + own.recompute, own_backward, backward_links);
    const Seconds tail = shared_reduce && c.zero_stage >= 3
                             ? sy.reduce_scatter - std::min(sy.all_gather, sy.reduce_scatter)
                             : Seconds(0);
    return Paced{forward,
                 backward,
                 nic,
                 fabric,
                 forward_links.on(sy.crosses_nodes),
                 backward_links.on(sy.crosses_nodes),
                 tail};
  };
  Paced worst = paced(slowest_stage);
  if (c.zero_stage >= 2) {
    int64_t heaviest = slowest_stage;
    for (int64_t s = 0; s < pp; ++s) {
      const DpSync& a = syncs[static_cast<size_t>(s)];
      const DpSync& b = syncs[static_cast<size_t>(heaviest)];
      if (a.reduce_scatter + a.all_gather > b.reduce_scatter + b.all_gather) heaviest = s;
    }
    if (heaviest != slowest_stage) {
      const Paced other = paced(heaviest);
      if (other.pass() > worst.pass()) worst = other;
    }
  }
  // ZeRO-3 gathers every pass's weights, fill and drain included: with few micro-batches each
  // stage's wait shows, not just the pacing one's (one micro-batch over four stages: the
  // planner was 41 % under the simulator), so walk the schedule again with each stage's passes
  // as its syncs stretch them: a backward's gathers share the link with its gradient
  // reduce-scatter, whose rest runs on behind the pass, the first stage's last one ending the
  // iteration. At least the slowest stage's passes with their syncs, as the closed form has it.
  if (walk_few && c.zero_stage >= 3) {
    for (int64_t s = 0; s < pp; ++s) {
      const Paced own = paced(s, true);
      ChunkTimes& chunk = few_chunks[static_cast<size_t>(s)];
      const StageTimes& st = stages[static_cast<size_t>(s)];
      chunk.forward[0] += std::max(Seconds(0), own.forward - st.forward);
      chunk.backward[0] += std::max(Seconds(0), own.backward - st.backward);
      chunk.forward_link = {own.forward_link};
      chunk.backward_link = {own.backward_link};
      chunk.backward_tail = {own.backward_tail};
    }
    const DpSync& first_stage = syncs.front();
    const Seconds gathered =
        schedule_makespan(few_chunks, out.microbatches, hop, c.gpipe) +
        std::max(Seconds(0), first_stage.reduce_scatter - first_stage.all_gather);
    out.dp_comm += std::max({Seconds(0), gathered - few_walked, (worst.pass() - per_mb) * mb});
  } else {
    out.dp_comm += (worst.pass() - per_mb) * mb;
    // ZeRO-2's pacing puts each backward's reduce-scatter rest into the next forward; the last
    // micro-batch has none, and its rest runs on behind the drain, as ZeRO-1's single one does
    // (one micro-batch over two stages, FP32 gradients over the NICs: 15 % over the simulator).
    // What the pacing counted for that last micro-batch is in the tail already.
    if (c.zero_stage == 2) {
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
  Seconds once = (c.zero_stage <= 1 ? rs : Seconds(0)) + (c.zero_stage <= 2 ? ag : Seconds(0));
  if (sync.crosses_nodes) {
    once -= (c.zero_stage <= 1 ? sync.reduce_scatter_in_node : Seconds(0)) +
            (c.zero_stage <= 2 ? sync.all_gather_in_node : Seconds(0));
  }
  const Seconds on_dp_link = (sync.crosses_nodes ? worst.nic : worst.fabric) * mb + once;
  const Seconds idle = *p.vpp == 1 ? out.bubble + out.pp_comm : Seconds(0);
  out.dp_comm += std::max(Seconds(0), on_dp_link - (per_mb * mb + idle + out.dp_comm));

  out.iteration = per_mb * mb + out.bubble + out.dp_comm + out.optimizer + out.pp_comm;
  return out;
}

}  // namespace

TimeBreakdown estimate_time(const TimeContext& ctx, const PlanChoice& c) {
  std::optional<TimeContext> scratch;
  return *estimate_time_with(
      ctx, c,
      [&]() -> TimeContext& {
        if (!scratch) scratch = ctx;
        return *scratch;
      },
      Seconds(std::numeric_limits<double>::infinity()), nullptr);
}

TimeBreakdown estimate_time(const TimeContext& ctx, const PlanChoice& c, TimeContext& scratch) {
  return *estimate_time_below(ctx, c, scratch, Seconds(std::numeric_limits<double>::infinity()));
}

std::optional<TimeBreakdown> estimate_time_below(const TimeContext& ctx, const PlanChoice& c,
                                                 TimeContext& scratch, Seconds bound,
                                                 Seconds* before_syncs) {
  return estimate_time_with(
      ctx, c, [&]() -> TimeContext& { return scratch; }, bound, before_syncs);
}

}  // namespace moe
