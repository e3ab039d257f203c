#include "planner/time_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "planner/dispatch_fanout.h"
#include "planner/dp_sync_exposure.h"
#include "planner/host_time.h"
#include "planner/layer_ops.h"
#include "planner/memory_model.h"
#include "planner/parallel.h"
#include "planner/pipeline_schedule.h"
#include "planner/stage_pricing.h"

namespace moe {

namespace {

struct Pass {
  Seconds compute, tp, ep, cp;  // communication before overlap
  // The backward's compute: twice the forward's, but a fused GEMM's communication once
  // (LayerOp::Fused::backward).
  Seconds compute_backward;
  // What selective recompute replays before the backward: compute, and the TP and EP
  // collectives of the modules it replays (mlp, moe).
  Seconds redo_compute, redo_tp, redo_ep;
  // Of the communication above, what holds no link (LayerOp::latency): the links' loads leave
  // it out, as the simulator waits it out beside the other flows.
  Seconds tp_latency, ep_latency, cp_latency, redo_tp_latency, redo_ep_latency;
  // The forward compute before the layer's first communication and after its last: what a
  // rematerializing gather issued behind the layer above's last collective runs beside before
  // this layer's first compute that needs communicated data (the simulator's order).
  Seconds edge_compute;
  // Of that, what runs after the last communication: all a chunk's top layer has to hide its
  // rematerializing gather behind in backward, with no layer above it in the pass.
  Seconds edge_after;
  // What the EP stream and link hold of `ep` (MoNTA's pieces: its all-to-all; all of it
  // otherwise, less its latency on the link), what MoNTA's in-node pieces add to the TP stream,
  // and what they and node-crossing all-to-alls' in-node shares add to the node's links.
  Seconds ep_stream, ep_link, tp_stream_extra, fabric_extra;
  // What fused GEMMs' communication (MegaScale's intra-operator overlap) holds of the TP and EP
  // groups' links, less its latency: the kernel is compute, but its bytes share the link.
  Seconds fused_tp_link, fused_ep_link;
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
  return {peak_of(ctx, p), r == Fp8Recipe::kBlockwise ? &ctx.eff.gemm_fp8_block
                           : r == Fp8Recipe::kMxfp8   ? &ctx.eff.gemm_mxfp8
                                                      : &ctx.eff.gemm_fp8};
}

GemmRate reference_gemm_rate(const TimeContext& ctx, Precision p) {
  return {reference_peak_of(ctx, p), &ctx.eff.gemm};
}

GemmRate linear_gemm_rate(const TimeContext& ctx, const PlanChoice& c) {
  GemmRate r = linear_gemm_rate(ctx, c.precision, c.fp8_recipe);
  r.clock = c.compute_clock;
  return r;
}

GemmRate reference_gemm_rate(const TimeContext& ctx, const PlanChoice& c) {
  GemmRate r = reference_gemm_rate(ctx, c.precision);
  r.clock = c.compute_clock;
  return r;
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
  return per_step * steps / (link * curve.at(total)) + ring_latency(ctx, total, n, span);
}

AllToAllTimes alltoall_times(const TimeContext& ctx, Bytes per_rank, int64_t n, int64_t stride) {
  if (n <= 1 || !(per_rank.value() > 0)) return {};
  const int64_t span = n * stride;
  const double nn = static_cast<double>(n);
  if (!ctx.links.crosses_nodes(span)) {
    const Seconds within =
        per_rank * ((nn - 1) / nn) /
        (ctx.links.alltoall_bandwidth(n, stride) * ctx.eff.alltoall_intra.at(per_rank));
    return {within + alltoall_latency(ctx, per_rank, n, stride), Seconds(0)};
  }
  // Peers inside the node go over NVLink while the rest leave through the NIC, concurrently.
  const double local = static_cast<double>(ctx.links.local_peers(n, stride));
  const Seconds intra =
      per_rank * ((local - 1) / nn) / (ctx.links.intra * ctx.eff.alltoall_intra.at(per_rank));
  const Seconds inter =
      per_rank * ((nn - local) / nn) / (ctx.links.inter * ctx.eff.alltoall_inter.at(per_rank));
  return {std::max(intra, inter) + alltoall_latency(ctx, per_rank, n, stride), intra};
}

Seconds alltoall_time(const TimeContext& ctx, Bytes per_rank, int64_t n, int64_t stride) {
  return alltoall_times(ctx, per_rank, n, stride).time;
}

AllToAllTimes deepep_times(const TimeContext& ctx, Bytes rows, int64_t n) {
  if (n <= 1 || !(rows.value() > 0)) return {};
  const ModelSpec& m = *ctx.model;
  const Bytes message = rows * static_cast<double>(m.top_k);
  const int64_t per_node = ctx.links.local_peers(n, 1);
  const DispatchFanout f = dispatch_fanout(m, n, per_node);
  if (!ctx.links.crosses_nodes(n)) {
    return {
        rows * f.ranks / (ctx.links.alltoall_bandwidth(n, 1) * ctx.eff.alltoall_intra.at(message)) +
            alltoall_latency(ctx, rows, n, 1),
        Seconds(0)};
  }
  // A token reaches each other node once, over the NIC, and the GPU there with the sender's
  // local index forwards it to the ranks that hold its experts; the sender's own node gets it
  // over NVLink directly. Of its rank copies, the share on other ranks of a node rides NVLink.
  const double local = static_cast<double>(per_node);
  const Seconds nvlink = rows * (f.ranks * (local - 1.0) / local) /
                         (ctx.links.intra * ctx.eff.alltoall_intra.at(message));
  const Seconds nic = rows * f.nodes / (ctx.links.inter * ctx.eff.alltoall_inter.at(message));
  return {std::max(nvlink, nic) + alltoall_latency(ctx, rows, n, 1), nvlink};
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
      Flops(flops * count) /
      (rate.peak * (rate.clock * rate.curve->at(launch) * gemm_shape_factor(m, k, n)));
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
    if (r.op.kind != OpKind::kCompute)
      (r.op.kind == OpKind::kEp ? out.redo_ep_latency : out.redo_tp_latency) += r.op.latency;
  }
  for (const LayerOp& op : ops) {
    // A node-crossing all-to-all's local peers load the node's links too.
    out.fabric_extra += op.in_node;
    switch (op.kind) {
      case OpKind::kCompute:
        out.compute += op.time;
        out.compute_backward += op.backward_compute();
        if (op.fused.kind != OpKind::kCompute)
          (op.fused.kind == OpKind::kEp ? out.fused_ep_link : out.fused_tp_link) +=
              std::max(Seconds(0), op.fused.time - op.fused.latency);
        break;
      case OpKind::kTp:
        out.tp += op.time;
        out.tp_latency += op.latency;
        break;
      case OpKind::kEp:
        out.ep += op.time;
        out.ep_latency += op.latency;
        if (op.monta_alltoall.value() > 0) {
          out.ep_stream += op.monta_alltoall;
          out.ep_link += std::max(Seconds(0), op.monta_alltoall - op.latency);
          out.tp_stream_extra += op.monta_in_node;
          out.fabric_extra += op.monta_in_node_link;
        } else {
          out.ep_stream += op.time;
          out.ep_link += op.time - op.latency;
        }
        break;
      case OpKind::kCp:
        out.cp += op.time;
        out.cp_latency += op.latency;
        break;
    }
  }
  const auto is_comm = [](const LayerOp& op) { return op.kind != OpKind::kCompute; };
  const auto first = std::find_if(ops.begin(), ops.end(), is_comm);
  const auto last = std::find_if(ops.rbegin(), ops.rend(), is_comm);
  for (auto it = ops.begin(); it != first; ++it) out.edge_compute += it->time;
  for (auto it = ops.rbegin(); it != last && first != ops.end(); ++it) {
    out.edge_compute += it->time;
    out.edge_after += it->time;
  }
  return out;
}

}  // namespace

StageTimes one_layer_times(const TimeContext& ctx, const PlanChoice& c, const LayerParams& lp,
                           bool moe_layer) {
  const Pass f = layer_forward(ctx, c, lp, moe_layer);
  // A pass takes at least the work of the link its traffic shares. Per layer, as the simulator
  // runs them: a layer starts when the one before has ended, so a link-bound
  // MoE layer cannot borrow the idle link of a dense layer or of another stage. (Taken per
  // stage and only for the stage with the most compute, Kimi-Linear-48B on the A800 C1+G4
  // cluster, tp = 2 and ep = 8 on PCIe, came out 19 % under the simulator: the head's stage
  // had the compute, the others the link.)
  LinkLoads links = link_loads(ctx, c.parallel, f.tp - f.tp_latency + f.fused_tp_link,
                               f.ep_link + f.fused_ep_link, f.cp - f.cp_latency);
  links.fabric += f.fabric_extra;
  // Without overlap a layer's operators run one after another. With it (MegaScale's
  // inter-operator overlap) the layer runs as 1 / kOverlapResidual slices that pipeline over
  // the compute stream and the links, a flow shop of identical jobs: one slice's whole chain,
  // then the busiest resource for the other slices, max(compute, NIC, fabric, the busiest
  // communication stream) (S - 1) / S: a stream holds each collective for its latency too,
  // which the links do not carry. The simulator runs the same slices. (Hiding TP and EP each behind
  // the whole compute, as before, counted the compute twice when both exceed it and added them when
  // they ride different links: MemFine Model II on the A800 cluster, TP = 8 over PCIe and EP = 32
  // over the NICs, priced a MoE layer's forward at 151 ms against the simulator's 133.)
  const Seconds comm = f.tp + f.ep + f.cp;
  auto pipelined_over = [&](Seconds compute, Seconds comm, const LinkLoads& links, Seconds stream) {
    if (!c.overlap) return compute + comm;
    return (compute + comm) * kOverlapResidual +
           std::max({compute, links.nic, links.fabric, stream}) * (1.0 - kOverlapResidual);
  };
  // MoNTA's pieces split between the EP and TP streams, which pipeline them slice by slice.
  const Seconds busiest_stream = std::max({f.tp + f.tp_stream_extra, f.ep_stream, f.cp});
  // Overlapped dispatch and combine hold some of the SMs the compute beside them would use.
  Seconds held_sms;
  auto beside_ep = [&](Seconds compute, Seconds ep) {
    const Seconds slowed = compute * overlap_compute_stretch(ctx, c, compute, ep);
    held_sms += slowed - compute;
    return slowed;
  };
  auto pipelined = [&](Seconds compute) {
    return pipelined_over(beside_ep(compute, f.ep), comm, links, busiest_stream);
  };
  const Seconds forward = pipelined(f.compute);
  // Backward: twice the compute, the same communication again.
  const Seconds backward = pipelined(f.compute_backward);
  // Full recompute replays the forward, communication included; selective replays what its
  // modules cover (layer_ops.h: recompute_ops), pipelined as a forward is; rematerialization
  // redoes element-wise work, ~5 % of a layer's forward.
  const bool full = c.recompute == Recompute::kFull;
  const bool remat = c.recompute == Recompute::kRematerialize;
  const Seconds redo = full ? f.compute : remat ? f.compute * 0.05 : f.redo_compute;
  const LinkLoads replayed = link_loads(ctx, c.parallel, f.redo_tp - f.redo_tp_latency,
                                        f.redo_ep - f.redo_ep_latency, Seconds(0));
  // MegaScale's rematerialization replays the all-gather/dispatch half of the communication in
  // backward, overlapped with the gradient computation it can run beside: the layer above's
  // after its last collective and this layer's before its first (twice their forward), as
  // the simulator issues it.
  const Seconds remat_comm = (f.tp + f.ep) * 0.5;
  const Seconds redo_comm =
      full    ? forward - f.compute
      : remat ? exposed(remat_comm, f.edge_compute * 2.0, true)
              : pipelined_over(beside_ep(f.redo_compute, f.redo_ep), f.redo_tp + f.redo_ep,
                               replayed, std::max(f.redo_tp, f.redo_ep)) -
                    f.redo_compute;
  const double passes = traffic_passes(c.recompute);
  StageTimes st;
  st.forward = forward;
  st.backward = std::max({backward + redo + redo_comm, links.nic * (passes - 1.0) + replayed.nic,
                          links.fabric * (passes - 1.0) + replayed.fabric,
                          (f.tp + f.tp_stream_extra) * (passes - 1.0) + f.redo_tp,
                          f.ep_stream * (passes - 1.0) + f.redo_ep, f.cp * (passes - 1.0)});
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
  st.compute = f.compute + f.compute_backward;
  st.recompute = redo;
  // A model chunk's top layer runs first in its backward: no layer above it to hide its
  // gather behind, only its own compute after its last collective (StageTimes::remat_edge).
  // With inter-operator overlap the layer runs as slices, and each slice's gather hides behind
  // the others' work.
  if (remat && !c.overlap)
    st.remat_edge = exposed(remat_comm, f.edge_after * 2.0, true) -
                    exposed(remat_comm, f.edge_compute * 2.0, true);
  st.tp = f.tp * passes + f.redo_tp;
  st.ep = f.ep * passes + f.redo_ep;
  st.cp = f.cp * passes;
  st.tp_latency = f.tp_latency * passes + f.redo_tp_latency;
  st.ep_latency = f.ep_latency * passes + f.redo_ep_latency;
  st.cp_latency = f.cp_latency * passes;
  st.ep_off_link = std::max(Seconds(0), f.ep - f.ep_latency - f.ep_link) * passes;
  st.in_node_link = f.fabric_extra * passes;
  st.ep_held_sms = held_sms;
  return st;
}

StageTimes layer_pass_times(const TimeContext& ctx, const PlanChoice& c, int64_t layer) {
  const auto i = static_cast<size_t>(layer);
  PlanChoice own = c;
  own.fcda_chunks = layer_fcda_chunks(*ctx.model, c, layer);
  own.stage_chunks.clear();
  return one_layer_times(ctx, own, ctx.params.layers.at(i), ctx.model->moe_layer.at(i));
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

bool boundary_crosses_nodes(const TimeContext& ctx, const ParallelConfig& p, int64_t from,
                            int64_t to) {
  const int64_t g = *p.tp * *p.cp * *p.dp, gpn = ctx.links.gpus_per_node;
  const int64_t d = std::abs(to - from) * g;  // how far rank r of one is from rank r of the other
  if (d == 0) return false;
  if (d >= gpn || g >= gpn) return true;
  // The lower stage's ranks, as places within their nodes: some reaches the next node by d.
  const int64_t first = std::min(from, to) * g % gpn;
  const int64_t last_place = first + g - 1 < gpn ? first + g - 1 : gpn - 1;
  return last_place + d >= gpn;
}

std::vector<Seconds> boundary_hops(const TimeContext& ctx, const PlanChoice& c) {
  const ParallelConfig& p = c.parallel;
  const int64_t pp = *p.pp;
  const Bytes bytes = boundary_bytes(ctx, c);
  const Seconds inside = bytes / ctx.links.intra + ctx.links.intra_latency;
  const Seconds across = bytes / ctx.links.inter + ctx.links.inter_latency;
  std::vector<Seconds> hops(static_cast<size_t>(pp));
  // hops[0] is the wrap, from the last stage to the first.
  for (int64_t s = 0; s < pp; ++s) {
    hops[static_cast<size_t>(s)] =
        boundary_crosses_nodes(ctx, p, (s + pp - 1) % pp, s) ? across : inside;
  }
  return hops;
}

DpSync dp_sync_times(const TimeContext& ctx, const PlanChoice& c, int64_t stage) {
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& p = c.parallel;
  const int64_t t = *p.tp, cp = *p.cp, dp = *p.dp, ep = *p.ep, etp = *p.etp, edp = *p.edp;
  // Gradient reduce-scatter and parameter all-gather of the stage's layer weights.
  // SP attention over one rank replicates nothing (it is TP attention there).
  const LayerWeights w =
      stage_layer_weights(m, ctx.params, p, stage, c.attention == AttentionMode::kUlysses && t > 1);
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
  // Adam reads and writes master weights, momentum and variance (24 B under FP32 states, fewer
  // under the precision-aware optimizer's) and the weight (4 B) of the local shard.
  const bool sharded = c.zero_stage >= 1;
  const double local = dense / (sharded ? static_cast<double>(dp) : 1.0) +
                       replicated / (sharded ? static_cast<double>(dp * t) : 1.0) +
                       expert / (sharded ? static_cast<double>(edp) : 1.0);
  // Optimizer CPU offload (HybridDeviceOptimizer): the GPU steps its share while the CPU steps
  // the rest, which first copies its FP32 gradients out and afterwards the new weights back,
  // the three overlapped group by group (--overlap-cpu-optimizer-d2h-h2d). The CPU's Adam is
  // bound by the socket's memory bandwidth as the GPU's by HBM's.
  const double f = c.optimizer_offload;
  const double adam_bytes = 2.0 * optimizer_state_bytes(c) + 4.0;
  out.optimizer = Bytes(local * (1.0 - f) * adam_bytes) / (ctx.links.hbm * ctx.eff.memory_bound);
  if (f > 0) {
    const double on_cpu = local * f;
    const Seconds out_copy = Bytes(on_cpu * 4.0) / (ctx.links.host * ctx.eff.pcie_h2d.at(1e9));
    const Seconds back = Bytes(on_cpu * param_bytes) / (ctx.links.host * ctx.eff.pcie_h2d.at(1e9));
    const Seconds step =
        ctx.links.host_memory.value() > 0
            ? Bytes(on_cpu * adam_bytes) / (ctx.links.host_memory * ctx.eff.memory_bound)
            : Seconds(std::numeric_limits<double>::infinity());
    out.optimizer = std::max(out.optimizer, std::max({out_copy, step, back}));
  }
  return out;
}

namespace {

// estimate_time, pricing stretched passes in `scratch`. Nothing when the iteration reaches
// `bound` before the DP syncs' windows are priced.
std::optional<TimeBreakdown> estimate_time_with(const TimeContext& ctx, const PlanChoice& c,
                                                ScratchContext& scratch, Seconds bound,
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
  const Seconds exposed_all = per_mb - slowest.compute - slowest.recompute - slowest.host() -
                              slowest.offload() - slowest.send_stretch;
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
  std::vector<Seconds> hops;
  Seconds slowest_hop;
  if (pp > 1) {
    hops = boundary_hops(ctx, c);
    for (int64_t s = 1; s < pp; ++s) out.pp_comm += hops[static_cast<size_t>(s)] * 2.0;
    slowest_hop = *std::max_element(hops.begin(), hops.end());
  }
  // The hops a micro-batch waits for in the steady state (pipeline_schedule.h). 1F1B: Little's
  // law over the micro-batches each stage holds in flight. Interleaving sends each micro-batch
  // round the ring of stages once per chunk: a hop longer than a quarter of the lightest
  // chunk's forward can leave a stage waiting for its next input, so walk the schedule; below
  // that the closed form is within 1.5 % and the search keeps its speed. GPipe holds every
  // micro-batch in flight and waits only at its ends.
  if (pp > 1 && *p.vpp == 1 && !c.gpipe)
    out.bubble += (one_f_one_b_period(per_stage, hops) - per_mb) * mb;
  // The walks below only shorten the bubble, which is never negative: a candidate whose steady
  // state and hops already reach the bound is out before any is taken.
  if (const Seconds least = per_mb * mb + out.pp_comm; least >= bound) {
    if (before_syncs) *before_syncs = least;
    return std::nullopt;
  }
  // With fewer than 2p micro-batches the closed form misses how a light stage's passes overlap
  // the heavy one's warm-up (two dense layers then one MoE layer and the head over pp = 2, two
  // micro-batches: 14 % over the simulator); the walk is short there, so take it (GPipe's too).
  // So it is up to 4p micro-batches of 1F1B over stages more than 1.25x apart with the heaviest
  // ahead of the last: it runs the light stages' fill and drain beside its own passes, which the
  // closed form adds instead. (Two host-bound layers on stage 0 and one on stage 1, seven
  // micro-batches: the closed form's 10 ms of bubble was 1 ms in the simulator, 5.8 % over it.
  // Where the heaviest stage is the last, the others' fill and drain is the closed form's.)
  const bool few = out.microbatches < 2 * pp;
  const auto [lightest, heaviest] = std::minmax_element(per_stage.begin(), per_stage.end());
  const bool stages_apart = *heaviest > *lightest * 1.25;
  const bool heavy_ahead = heaviest - per_stage.begin() < pp - 1;
  const bool heavy_first = !c.gpipe && out.microbatches <= 4 * pp && stages_apart && heavy_ahead;
  // ZeRO-3's gathers stretch the fill and drain's passes as well as the steady state's, which
  // the closed form prices alone: walked up to 4p micro-batches. (Four micro-batches over pp 2,
  // each pass of 4 layers waiting for 35 ms gathers of 256 experts' weights: the closed form
  // was 17 % under the simulator.)
  const bool gathers_walked = c.zero_stage >= 3 && out.microbatches <= 4 * pp;
  bool walk_few = pp > 1 && *p.vpp == 1 && (few || gathers_walked);
  std::vector<ChunkTimes> few_chunks;
  Seconds few_walked;
  if (pp > 1 && *p.vpp == 1 && (few || heavy_first || gathers_walked)) {
    std::vector<ChunkTimes> chunks = chunk_times(ctx, c, kinds);
    const Seconds walked = schedule_makespan(chunks, out.microbatches, hops, c.gpipe);
    out.bubble = std::max(walked - per_mb * mb - out.pp_comm, Seconds(0));
    // ZeRO-3's syncs walk the few micro-batches again (dp_sync_pacing.cpp).
    if (walk_few) {
      few_chunks = std::move(chunks);
      few_walked = walked;
    }
  }
  // A flexible layout can leave stages far apart, where no closed form holds: a heavy stage near
  // the front hides the others' fill and drain. Unless it has the search's shape (equal middle
  // virtual stages, ends no heavier: priced in closed form, as pp_first/pp_last are), a layout
  // with one stage over 1.25x another is walked and the walk taken. (GLM-4.5 at pp 4 x vpp 3
  // with one stage 1.5x the others: the closed form was 7 % over the simulator.) The search
  // cannot walk every candidate: at hundreds of micro-batches a walk costs a millisecond.
  const bool uneven_layout = !p.layout.empty() && !has_end_light_shape(p.layout) && stages_apart;
  // Under 2p micro-batches, as for 1F1B above, the walk is short and taken as it comes (an
  // embedding-only first chunk and a head-only last one over pp = 2, v = 2, two micro-batches:
  // the closed form was 21 % over the simulator). So it is up to 4p micro-batches where the
  // stages' times differ, whatever the layout's shape: (p - 1) / v of the slowest stage is
  // what an equal pipeline idles, and dense and MoE layers in equal counts are not equal (two
  // MoE layers on one stage of four, eight micro-batches: the closed form was 17 % over). Nor
  // are stages closer than that alike where what the light ones gain over the micro-batches
  // covers a tenth of that bubble: they run ahead, and the heavy stage waits less for them.
  // (Fourteen host-bound layers on stage 0 and thirteen on stage 1, 1.07x apart, eight
  // micro-batches at vpp 2: stage 0 never idled in the simulator, the closed form's 67 ms of
  // bubble put the planner 5.8 % over it.)
  const bool light_stages_gain = (*heaviest - *lightest) * mb > out.bubble * 0.1;
  const bool uneven_stages = out.microbatches <= 4 * pp && (stages_apart || light_stages_gain);
  // Nor does it hold where one model chunk outweighs another by half: the heavy chunk's
  // passes stall the steady state (an MTP module over 256 large experts alone on the last
  // virtual stage, beside chunks of four dense layers, 16 micro-batches at pp 2, vpp 4: the
  // closed form was 6.4 % under the simulator). Walked up to 8p micro-batches, where the
  // walk stays short.
  // The chunks' spread is priced only where the stage-level triggers leave the question open.
  std::optional<ChunkSpread> spread;
  auto spread_of = [&]() -> const ChunkSpread& {
    if (!spread) spread = chunk_spread(ctx, c, kinds);
    return *spread;
  };
  const bool interleaved = pp > 1 && *p.vpp > 1;
  // Past 8p micro-batches the heavy chunk's stalls repeat every p micro-batches of the steady
  // state: the walks of 4p and 8p give the line the longer schedule lies on. (Two MoE chunks
  // of 2.25 ms host-bound passes beside dense ones of 0.75 ms, 256 micro-batches at pp 4,
  // vpp 2: the closed form was 6.2 % under the simulator.)
  const bool chunks_apart = interleaved && spread_of().heaviest > spread_of().lightest * 1.5;
  const bool extended = chunks_apart && out.microbatches > 8 * pp && !c.gpipe;
  // Where one of these holds the walk is taken; a slow hop only adds what the walk finds.
  const bool walk_taken =
      interleaved && (uneven_layout || few || uneven_stages || chunks_apart || gathers_walked);
  std::vector<ChunkTimes> interleaved_chunks;  // the DP syncs' windows reuse them
  if (walk_taken || (interleaved && slowest_hop > spread_of().lightest_forward * 0.25)) {
    interleaved_chunks = chunk_times(ctx, c, kinds);
    auto walk = [&](int64_t m) { return schedule_makespan(interleaved_chunks, m, hops, c.gpipe); };
    Seconds walked;
    if (extended) {
      const int64_t a = 4 * pp, b = 8 * pp;
      const Seconds at_a = walk(a), at_b = walk(b);
      walked = at_b + (at_b - at_a) *
                          (static_cast<double>(out.microbatches - b) / static_cast<double>(b - a));
    } else {
      walked = walk(out.microbatches);
    }
    const Seconds beyond = std::max(walked - per_mb * mb - out.pp_comm, Seconds(0));
    out.bubble = walk_taken ? beyond : std::max(out.bubble, beyond);
    // ZeRO-3's gathers stretch the fill and drain's passes too: the syncs walk it again.
    if (gathers_walked) {
      walk_few = true;
      few_chunks = interleaved_chunks;
      few_walked = walked;
    }
  }

  // What follows prices the DP syncs: the optimizer step, and their exposure, which only adds (a
  // sync stretches the passes it shares links with, never shortens them). The terms so far bound
  // the iteration from below.
  const Seconds unsynced = per_mb * mb + out.bubble + out.pp_comm;
  if (before_syncs) *before_syncs = unsynced;
  if (unsynced >= bound) return std::nullopt;
  std::vector<DpSync> syncs(static_cast<size_t>(pp));
  for (int64_t s = 0; s < pp; ++s) syncs[static_cast<size_t>(s)] = dp_sync_times(ctx, c, s);
  // The optimizer step waits for every stage's.
  for (const DpSync& own : syncs) out.optimizer = std::max(out.optimizer, own.optimizer);
  if (unsynced + out.optimizer >= bound) return std::nullopt;
  PricedPipeline pipeline{std::move(stages), slowest_stage, per_mb,
                          std::move(hops),   walk_few,      std::move(few_chunks),
                          few_walked,        &kinds,        std::move(interleaved_chunks)};
  add_dp_sync_exposure(ctx, c, pipeline, syncs, scratch, out);

  out.iteration = per_mb * mb + out.bubble + out.dp_comm + out.optimizer + out.pp_comm;
  // The steady state's passes hold what the sends beside them slowed them by.
  out.pp_send_stretch = slowest.send_stretch * mb;
  out.pp_comm += out.pp_send_stretch;
  return out;
}

}  // namespace

TimeBreakdown estimate_time(const TimeContext& ctx, const PlanChoice& c) {
  ScratchContext scratch(ctx, nullptr);
  return *estimate_time_with(ctx, c, scratch, Seconds(std::numeric_limits<double>::infinity()),
                             nullptr);
}

TimeBreakdown estimate_time(const TimeContext& ctx, const PlanChoice& c, TimeContext& scratch) {
  return *estimate_time_below(ctx, c, scratch, Seconds(std::numeric_limits<double>::infinity()));
}

std::optional<TimeBreakdown> estimate_time_below(const TimeContext& ctx, const PlanChoice& c,
                                                 TimeContext& scratch, Seconds bound,
                                                 Seconds* before_syncs) {
  ScratchContext given(ctx, &scratch);
  return estimate_time_with(ctx, c, given, bound, before_syncs);
}

}  // namespace moe
