// Iteration time of a plan: compute from FLOPs over calibrated GEMM efficiency, communication
// from each group's volume over the links it crosses, overlap as each technique allows, and
// the pipeline bubble of the schedule.
//
// Per micro-batch and layer, on one GPU (b = micro-batch, s = sequence, t = TP or SP size,
// c = CP, k = top-k; BF16 activations). Every GEMM is a roofline of its real shape (gemm_time):
//   attention projections  2 P_attn b s / (t c)        (TP splits heads; Ulysses splits tokens)
//   core attention         a (d_qk + d_v) s x b s / (t c), causal, at the `attention_core`
//                          curve's share of peak for one call's FLOPs
//   routed experts         2 P_expert k b s / (t c) x skew imbalance (the busiest EP rank)
//   shared / dense FFN     2 P b s / (t c)
//   memory-bound ops       bytes touched by norms, residuals, permutation, activation, at
//                          `memory_bound` of HBM bandwidth
//   TP (Megatron SP)       all-gather + reduce-scatter of b s h / c, per attention and per
//                          dense/shared FFN (MegaScale eq. 1); Ulysses: eq. (2) as all-to-all
//   EP                     dispatch + combine all-to-all of k b s h/(t c) (eq. 3), or
//                          all-gather + reduce-scatter (eq. 4); MoNTA O1/O2/O3 when experts
//                          are tensor-parallel (etp > 1) and EP crosses nodes
//   CP                     ring K/V exchange, hidden behind core attention where it can be
// Backward doubles compute and repeats the communication; full recompute adds a forward,
// selective adds the memory-bound ops it recomputes, MegaScale's rematerialization (sar) also
// replays the dispatch half of the communication, overlapped. Without `overlap` (Megatron-LM's
// default) TP and EP communication sit on the critical path; with it (MegaScale-MoE Sec. 4.1) a
// layer's communication hides behind its independent compute, leaving max(0, comm - compute) plus
// kOverlapResidual of comm exposed. 1F1B: (m + p - 1)(t_f + t_b); interleaved: (m + (p-1)/v).
// DP gradient reduce-scatter and parameter all-gather overlap the last backward / first forward
// (Megatron --overlap-grad-reduce --overlap-param-gather); ZeRO-2 reduce-scatters after every
// micro-batch and ZeRO-3 also gathers weights before each pass.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "planner/cluster_spec.h"
#include "planner/efficiencies.h"
#include "planner/link_rates.h"
#include "planner/model_stats.h"
#include "planner/plan.h"
#include "planner/routing_skew.h"

namespace moe {

// BF16 activations, on the wire and in HBM.
constexpr double kActivationBytes = 2.0;

// MegaScale-MoE Fig. 12 shows a small exposed remainder even with overlap: the first chunk of
// each overlapped pair cannot hide. We keep 10 % of the overlapped communication exposed.
constexpr double kOverlapResidual = 0.10;

// Layers that cost the same: MoE or dense FFN, softmax or linear attention. A layer's kind:
// 0 MoE, 1 dense, plus 2 for linear attention.
inline constexpr size_t kLayerKinds = 4;

// What stays fixed across candidates of one search: computed once.
struct TimeContext {
  const ModelSpec* model = nullptr;
  ModelParams params;
  // The kind of every layer, and the first layer of each kind (-1: none): the search prices
  // each kind once a candidate without walking the model's layers.
  std::vector<uint8_t> layer_kinds;
  std::array<int64_t, kLayerKinds> first_layer_of_kind{-1, -1, -1, -1};
  GpuSpec gpu;
  LinkRates links;
  Efficiencies eff;
  RoutingSkew skew;
  TokenFlops flops;  // per token at the plan's sequence length
  int64_t seq_len = 4096;
  // A GPU's share of its node's host memory (the sockets' over the GPUs): what Megatron's
  // optimizer CPU offload may fill. Zero when the cluster file lists no CPUs.
  Bytes host_memory_per_gpu;
};

TimeContext make_time_context(const ModelSpec& m, const ClusterSpec& c, const Efficiencies& eff,
                              const RoutingSkew& skew, int64_t seq_len);

// The dense peak a plan's linear-layer GEMMs run at (FP32, BF16, or FP8 for FP8 plans).
FlopsPerSec peak_of(const TimeContext& ctx, Precision p);
// The peak everything else runs at and MFU is counted against: FP32 for FP32 plans, else BF16
// (FP8 plans report MFU against the BF16 peak, as DeepSeek-V3 and MegaScale-MoE do).
FlopsPerSec reference_peak_of(const TimeContext& ctx, Precision p);
// Bytes per element of TP collectives and the expert dispatch: 1 under FP8, else 2.
double comm_element_bytes(Precision p);
// Bytes of one stored (and DP-gathered) weight: 4 in FP32, 2 in BF16, 1 in FP8.
double parameter_bytes(Precision p);
// A plan's: BF16 for an FP8 plan without --fp8-param-gather (fp8_param_gather).
double parameter_bytes(const PlanChoice& c);

// Per micro-batch times of one pipeline stage.
struct StageTimes {
  Seconds forward, backward;               // including exposed communication and recompute
  Seconds compute, recompute, tp, ep, cp;  // forward + backward parts, per micro-batch
  // Of tp, ep and cp, what holds no link (LayerOp::latency): link_traffic leaves it out.
  Seconds tp_latency, ep_latency, cp_latency;
  // Of ep, what MoNTA's in-node pieces take off the EP link; and what the node's links carry
  // beside tp, ep and cp's own: those pieces (LayerOp::monta_in_node_link) and the in-node
  // share of all-to-alls that leave the node (LayerOp::in_node).
  Seconds ep_off_link, in_node_link;
  // Compute time the SMs of overlapped EP communication took (overlap_compute_stretch): in
  // forward and backward, not in compute; the breakdown counts it as EP communication.
  Seconds ep_held_sms;
  // What each pass waits for the host to issue (planner/host_time.h).
  Seconds host_forward, host_backward;
  Seconds host() const { return host_forward + host_backward; }
  // What each pass waits for activation offloading's copies beyond its own work.
  Seconds offload_forward, offload_backward;
  Seconds offload() const { return offload_forward + offload_backward; }
  // Once a pass (a model chunk's), not a layer: the copy nothing overlaps, the last layer's out
  // in forward and the first layer's back in backward, or the layer work it waits beside (the
  // shorter; the largest over the chunk's layers).
  Seconds offload_edge_forward, offload_edge_backward;
  // Once a backward pass too: what MegaScale's rematerializing gather of the chunk's top layer
  // shows beyond a layer's, with no layer above it to run beside (the largest over the
  // chunk's layers). (Hidden as every layer's, one MoE layer over the A800 nodes with overlap
  // off replayed its 3.9 ms dispatch in the open: the planner 12 % under the simulator.)
  Seconds remat_edge;
  // What the pipeline's sends slow the passes they start beside by, sharing their link with
  // the passes' TP/EP/CP traffic (stage_pricing.h, send_stretch): in forward and backward.
  Seconds send_stretch;
};
StageTimes stage_times(const TimeContext& ctx, const PlanChoice& c, int64_t stage);
// One layer's share of that, for one micro-batch: its forward and backward passes with their
// recompute, host floor and offload copies, as stage_times sums them (plan --explain).
StageTimes layer_pass_times(const TimeContext& ctx, const PlanChoice& c, int64_t layer);
// The FCDA chunk count layer `layer` runs at: its stage's (PlanChoice::chunks_on_stage).
int64_t layer_fcda_chunks(const ModelSpec& m, const PlanChoice& c, int64_t layer);
// One pinned copy of `bytes` between a GPU and host memory while every GPU copies
// (LinkRates::host at the pcie_h2d curve): activation offloading's copies, each way.
Seconds host_copy_time(const TimeContext& ctx, Bytes bytes);
// The model's multi-token-prediction modules, one micro-batch, on the last stage after the
// output head (Megatron's place for them): each a transformer layer priced as the model's last,
// the projection of its two normed streams and its own head pass. Zero for a model without.
StageTimes mtp_stage_times(const TimeContext& ctx, const PlanChoice& c);

// Data-parallel synchronisation of one stage's weights and its optimizer step, per iteration:
// gradient reduce-scatter and parameter all-gather over DP (dense) and expert-DP (experts).
struct DpSync {
  Seconds reduce_scatter, all_gather, optimizer;
  // The part of each that stays inside the node: the first stage of MegaScale's hierarchical
  // sync of the weights Ulysses SP replicates (App. A.1), on NVLink whatever DP crosses.
  Seconds reduce_scatter_in_node, all_gather_in_node;
  bool crosses_nodes = false;
};
DpSync dp_sync_times(const TimeContext& ctx, const PlanChoice& c, int64_t stage);

// Activation (forward) or gradient (backward) of one micro-batch crossing a stage boundary.
Bytes boundary_bytes(const TimeContext& ctx, const PlanChoice& c);
// Ranks between neighbouring pipeline stages: a whole stage apart, so the boundary link is the
// one a group of this span crosses.
int64_t boundary_span(const ParallelConfig& p);
// One micro-batch across each stage boundary: hops[s] between stages s - 1 and s, hops[0] the
// wrap from the last stage to the first (interleaving's). Stage s holds GPUs [s g, (s + 1) g)
// for g = tp x cp x dp (Megatron's order, pp outermost) and rank r sends to rank r of the next:
// a boundary some rank pair of which sits on two nodes goes through the NICs, the others over
// the node's links.
std::vector<Seconds> boundary_hops(const TimeContext& ctx, const PlanChoice& c);
// Whether the sends from stage `from` to stage `to` leave the node: some rank of `from` and
// the same rank of `to` sit on two nodes. The simulator sends over the NIC exactly there.
bool boundary_crosses_nodes(const TimeContext& ctx, const ParallelConfig& p, int64_t from,
                            int64_t to);

// The whole iteration; the choice's parallel layout must be complete with gbs set.
TimeBreakdown estimate_time(const TimeContext& ctx, const PlanChoice& c);
// The same, pricing the passes a DP sync shares links with in `scratch`, a copy of ctx whose
// link rates it overwrites: a search keeps one per thread instead of copying ctx (its curves
// and layer list) once or twice a candidate.
TimeBreakdown estimate_time(const TimeContext& ctx, const PlanChoice& c, TimeContext& scratch);
// The same, or nothing when the iteration cannot come in under `bound`: the steady state,
// bubble, pipeline hops and optimizer step already reach it before the DP syncs' exposure, which
// only adds, is priced. The search's branch and bound: most candidates lose to the best found
// so far there, and the sync windows (each re-pricing a stage on slowed links) are most of a
// candidate's cost. `before_syncs`, when given, receives those terms less the optimizer step
// (or, where the steady state and hops alone reach the bound, those: a lower bound of them);
// they do not read the DP gradient precision, so a search that tries both precisions can hold
// the second to its bound without pricing it.
std::optional<TimeBreakdown> estimate_time_below(const TimeContext& ctx, const PlanChoice& c,
                                                 TimeContext& scratch, Seconds bound,
                                                 Seconds* before_syncs = nullptr);

// MoNTA's AllToAll problem for a plan whose experts are tensor-parallel (etp > 1).
monta::Problem expert_alltoall_problem(const TimeContext& ctx, const PlanChoice& c);

// The peak a GEMM runs at and the curve its efficiency comes from, and the share of its clock the
// GPU's power limit leaves it (PlanChoice::compute_clock; the peak is the datasheet's).
struct GemmRate {
  FlopsPerSec peak;
  const EfficiencyCurve* curve = nullptr;
  double clock = 1;
};
// A plan's linear-layer GEMMs: for FP8 plans the FP8 peak and the recipe's curve (blockwise:
// gemm_fp8_block; MXFP8: gemm_mxfp8; delayed and tensorwise: gemm_fp8), else the reference peak
// and the BF16 curve.
GemmRate linear_gemm_rate(const TimeContext& ctx, Precision p, Fp8Recipe r = Fp8Recipe::kDelayed);
// What stays in BF16 under FP8 (core attention, the output head): the reference peak and curve.
GemmRate reference_gemm_rate(const TimeContext& ctx, Precision p);
// A plan's, at its compute clock: what its layers' GEMMs run at.
GemmRate linear_gemm_rate(const TimeContext& ctx, const PlanChoice& c);
GemmRate reference_gemm_rate(const TimeContext& ctx, const PlanChoice& c);

// Roofline of `count` GEMMs [M x K] x [K x N], `grouped` of them per kernel launch (a
// grouped GEMM over the local experts): the compute time at the GEMM curve's efficiency for one
// launch's FLOPs, discounted by partial 128 x 128 output tiles and by a shallow K, or the time to
// move A, B and C through HBM, whichever is longer. Tensor parallelism that cuts a narrow FFN into
// slivers (small N, or small K for the down projection) pays both discounts, which is why
// MegaScale-MoE keeps experts whole.
Seconds gemm_time(const TimeContext& ctx, const GemmRate& rate, double m, double k, double n,
                  double count = 1, double grouped = 1);
// The shape discount gemm_time applies on top of the curve (partial tiles, shallow K): 1 for a
// large square GEMM. Calibration divides a measured GEMM's efficiency by it, so that the curve
// it writes reproduces the measurement through gemm_time.
double gemm_shape_factor(double m, double k, double n);

// Ring all-gather or reduce-scatter of `total` bytes (the gathered size) over n ranks whose
// group spans `span` consecutive ranks.
Seconds ring_time(const TimeContext& ctx, Bytes total, int64_t n, int64_t span);
// All-to-all where each rank scatters `per_rank` bytes over n ranks at stride `stride`.
Seconds alltoall_time(const TimeContext& ctx, Bytes per_rank, int64_t n, int64_t stride);
// The same, with what the peers inside the node of an all-to-all that leaves it take on the
// node's links alone (`time` is the slower of that and the NIC's share, plus latency; zero
// inside a node).
struct AllToAllTimes {
  Seconds time, in_node;
};
AllToAllTimes alltoall_times(const TimeContext& ctx, Bytes per_rank, int64_t n, int64_t stride);
// The part of ring_time and alltoall_time (deepep_times too) that is per-message latency: the
// ring's n - 1 steps, the all-to-all's one. It holds no link, so a link's other flows do not
// stretch it (the simulator waits it out before the bytes start).
// (Inline: the search prices them millions of times.)
inline Seconds ring_latency(const TimeContext& ctx, Bytes total, int64_t n, int64_t span) {
  if (n <= 1 || !(total.value() > 0)) return Seconds(0);
  return ctx.links.latency(span) * static_cast<double>(n - 1);
}
inline Seconds alltoall_latency(const TimeContext& ctx, Bytes per_rank, int64_t n, int64_t stride) {
  if (n <= 1 || !(per_rank.value() > 0)) return Seconds(0);
  return ctx.links.crosses_nodes(n * stride) ? ctx.links.inter_latency : ctx.links.intra_latency;
}
// DeepEP's dispatch (or combine) of a rank's tokens, `rows` bytes at full width (tokens x h x
// bytes per element, skew included), over n EP ranks of whole experts (etp = 1): each token
// once per other rank that holds one of its experts, across nodes once per other node over the
// NIC and then on over NVLink (planner/dispatch_fanout.h). Efficiency from the all-to-all curves
// at the all-to-all's message size, `rows` x top-k. Across nodes, `in_node` is what rides NVLink
// beside the NIC's share (the sender's node's ranks and the forwarding), as for alltoall_times.
AllToAllTimes deepep_times(const TimeContext& ctx, Bytes rows, int64_t n);
// All-to-all whose busiest rank sends `load` times the `balanced` bytes and the others share
// what is left (the combine's forward under skew: the hot experts' outputs go back to every
// rank). Across nodes it goes as NCCL's PXN (on by default) sends it: see the definition.
Seconds alltoall_from_heavy_time(const TimeContext& ctx, Bytes balanced, double load, int64_t n,
                                 int64_t stride);

}  // namespace moe
