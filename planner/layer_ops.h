// One layer's forward pass as a list of operators with their costs, in the order a GPU runs them.
//
// This is the contract DESIGN.md asks for: the planner sums these (time_model.cpp), and the
// simulator runs each as an event on a GPU's compute stream or as a flow on the links its group
// crosses, so without contention the two agree. Backward is derived by the consumer (twice the
// compute, the same communication again).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "planner/model_stats.h"
#include "planner/plan.h"
#include "planner/time_model.h"

namespace moe {

enum class OpKind { kCompute, kTp, kEp, kCp };
const char* op_kind_name(OpKind k);  // "compute", "tp", "ep", "cp"

// How a communication op's group exchanges its bytes: a ring (all-gather, reduce-scatter, the
// context-parallel K/V ring) or every member with every other (all-to-all). The simulator
// expands each into the ports of its members' GPUs (simulator/port_loads.h).
enum class CommPattern { kRing, kAllToAll };

struct LayerOp {
  const char* name = "";  // a static string: "attention projections", "dispatch", ...
  OpKind kind = OpKind::kCompute;
  Seconds time;
  // Routed tokens arrive here (dispatch, or the experts themselves without EP): where the
  // simulator allocates their activations.
  bool receives_tokens = false;
  CommPattern pattern = CommPattern::kRing;  // communication ops
  // What NCCL's PXN takes off `time` by spreading the busiest rank's bytes over the node's NICs
  // (a combine across nodes under skew; zero for every other op).
  Seconds pxn_saving{};
  // The time at the busiest rank's bytes on its own ports: what the every-GPU simulator expands
  // into port loads, spreading them itself.
  Seconds port_time() const { return time + pxn_saving; }
  // The --recompute-modules bit whose selective recompute replays this op (0: none does).
  uint32_t module = 0;
  // What `time` prices, for --explain: the FLOPs a compute op runs on this GPU and the peak it
  // runs them against, and the bytes a memory-bound op moves through HBM; for communication,
  // the collective's size as nccl-tests reports it (one rank's buffer: the gathered whole of an
  // all-gather or reduce-scatter, the send buffer of an all-to-all), summed over the
  // collectives the op stands for.
  double flops = 0;
  double peak = 0;  // FLOP/s
  double bytes = 0;
  // Of a communication op's `time`, what holds no link: per-message latency and per-round
  // overhead. The simulator waits it out and sends the rest as bytes, so flows sharing the
  // link stretch only the rest.
  Seconds latency{};
  // MoNTA's expert all-to-all (experts tensor-parallel across EP) runs as pieces on two
  // streams, as the simulator runs them: the all-to-all (with its per-chunk overhead) on the
  // EP stream and link, the all-gather inside the node (and O2's D2D copies) on the TP stream,
  // the all-gather on the node's links. `time` is their pipelined whole; these are what each
  // stream and the node's links hold. Zero for every other op.
  Seconds monta_alltoall{}, monta_in_node{}, monta_in_node_link{};
  // An all-to-all that leaves the node: what its peers inside the node take on the node's links
  // alone (`time` is the slower of that and the NIC's share, plus latency). The simulator sends
  // it beside the NIC's bytes, so an in-node sync that slows the node's links can make it the
  // slower. Zero for every other op.
  Seconds in_node{};
  // MegaScale's intra-operator overlap: the communication fused into this GEMM (kind kTp or
  // kEp; kCompute for every other op), which the simulator runs beside the GEMM as a flow on
  // that group's link, so that it shares the link with the syncs as the unfused collective
  // would. `compute` is what the SMs take (the GEMM at the SMs communication leaves it, plus
  // the first tile wave); `time` and `latency` the communication's, the wave being latency
  // (no byte moves before the first tile is ready). The op's `time` is the slower of the two.
  struct Fused {
    OpKind kind = OpKind::kCompute;
    CommPattern pattern = CommPattern::kRing;
    Seconds compute, time, latency, pxn_saving;
    // Backward, the GEMM side computes twice and the communication moves the same bytes once
    // (the gradients' reduce-scatter for the inputs' all-gather), as for unfused operators.
    Seconds backward() const { return std::max(compute * 2.0, time); }
  } fused{};
  // What a compute op takes in backward: twice its time, a fused pair's Fused::backward.
  Seconds backward_compute() const {
    return fused.kind != OpKind::kCompute ? fused.backward() : time * 2.0;
  }
};

// Forward ops of one layer for one micro-batch on one GPU. `expert_load` is the busiest EP
// rank's received tokens over its balanced share (the skew's imbalance in the planner, the
// sampled routing in the simulator); `chunks` the FCDA chunk count.
std::vector<LayerOp> layer_forward_ops(const TimeContext& ctx, const PlanChoice& c,
                                       const LayerParams& lp, bool moe_layer, double expert_load,
                                       int64_t chunks);

// The routed experts' op when MegaScale's intra-operator overlap fuses dispatch and combine
// into it (consumers look it up by name).
inline constexpr const char* kFusedExpertsOp = "routed experts (fused dispatch and combine)";

// What selective recompute replays before a layer's backward under c.recompute_modules, given
// the layer's forward ops (from layer_forward_ops, so the same load and chunks): the ops a
// module covers, each with its index in `forward`, and the element-wise and MLA up-projection
// work no forward op isolates, at index -1. Empty unless c.recompute is kSelective.
struct ReplayedOp {
  LayerOp op;
  int forward_index = -1;
};
std::vector<ReplayedOp> recompute_ops(const TimeContext& ctx, const PlanChoice& c, bool moe_layer,
                                      double expert_load, const std::vector<LayerOp>& forward);

// The factor on a pass's compute `compute` that inter-operator overlap runs beside `ep_comm` of
// expert dispatch and combine: their kernels hold a share s of the GPU's SMs while they run
// (the dispatcher's count over GpuSpec::sms), so the compute goes at 1 - s for that window and
// takes compute + s min(ep_comm, compute / (1 - s)). 1 without overlap, without EP
// communication, or where the cluster file gives no SM count. The planner and the simulator
// both apply it to a layer pass (the simulator does not slow kernels while flows run).
double overlap_compute_stretch(const TimeContext& ctx, const PlanChoice& c, Seconds compute,
                               Seconds ep_comm);
// The SMs the plan's dispatcher kernels hold (Efficiencies::ep_comm_sms_deepep or _nccl).
double ep_comm_sms(const TimeContext& ctx, const PlanChoice& c);

// Whether the group an op communicates in leaves the node (its traffic takes the NIC) or stays
// on the node's fabric: TP over t ranks, EP over ep x etp, CP over t x cp. Compute never does.
bool crosses_nodes(const TimeContext& ctx, const ParallelConfig& p, OpKind k);

// Core attention time of one layer's forward (what ring attention's K/V exchange hides behind):
// the mean softmax layer's, or a Gated DeltaNet layer's recurrence.
Seconds core_attention_time(const TimeContext& ctx, const PlanChoice& c, bool linear_layer);

// The output head (vocab-parallel over TP) of the last stage, forward, one micro-batch.
LayerOp output_head_op(const TimeContext& ctx, const PlanChoice& c);
Seconds output_head_time(const TimeContext& ctx, const PlanChoice& c);
// The loss over the head's logits (PlanChoice::cross_entropy), one micro-batch: memory-bound
// passes over this rank's logits (tokens x vocabulary / t), forward (`op`) and backward. TE's
// kernel moves 3 activation elements a logit forward and 2 backward; Megatron's native one 24
// bytes more forward (an FP32 copy shifted, exponentiated and normalised in place, its sum read)
// and 12 more backward (the FP32 gradient scaled, then cast back). The vocab-parallel
// all-reduces of each token's max, sum and target logit are a few bytes a token: left out.
struct LossPasses {
  LayerOp forward;
  Seconds backward;
  // What one micro-batch's loss keeps on the GPU from its forward to its backward, at the
  // forward's peak: TE's, the BF16 logits (holding the gradient); native's, the FP32 softmax
  // beside the BF16 logits.
  Bytes held;
};
LossPasses cross_entropy_passes(const TimeContext& ctx, const PlanChoice& c);
// The logits one micro-batch's loss runs over on a rank: tokens / cp x vocabulary / t.
double loss_logits(const ModelSpec& m, const ParallelConfig& p, int64_t seq_len);
// The same over `logits` logits with activations of `element_bytes` (an offload plan's pass).
LossPasses cross_entropy_over(const TimeContext& ctx, CrossEntropy kernel, double element_bytes,
                              double logits);
// LossPasses::held alone (the memory model's and moeplan memory's, which price no time).
Bytes cross_entropy_held(CrossEntropy kernel, double element_bytes, double logits);
// The word embedding's gradient, one micro-batch's backward on a stage that looks tokens up
// (the first, and each MTP module's stage): PyTorch's embedding backward builds a dense
// gradient of this rank's whole vocabulary slice (vocabulary / t x h, zero-filled, then each
// token's row added), and Megatron's DDP hook adds it into the main-grad buffer (FP32) and
// frees it. The linear layers' weight gradients go into main_grad inside their GEMMs (gradient
// accumulation fusion); this one cannot.
LayerOp embedding_gradient_op(const TimeContext& ctx, const PlanChoice& c);
// What one multi-token-prediction module (DeepSeek-V3; Megatron's --mtp-num-layers) runs ahead
// of its transformer layer, which is priced as the model's last layer: the projection of the two
// normed streams [2h -> h], forward, one micro-batch. After the layer it runs its own pass
// through the shared output head and a loss.
Seconds mtp_projection_time(const TimeContext& ctx, const PlanChoice& c);

}  // namespace moe
