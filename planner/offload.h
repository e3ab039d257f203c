// APTMoE (002_a33f16d749db619a) offloaded fine-tuning, as a plan the search can return when no
// GPU-resident layout fits.
//
// Weights and optimizer states live in host memory. The model is cut into `stages` pipeline
// stages (at least one per GPU; more than the GPUs are mapped round-robin, as Mobius does). A
// GPU runs a stage for all m micro-batches at once: it loads the stage's attention blocks and
// gates and, per layer, the experts eq. (1) sends to the GPU (hot ones, from the skew's
// popularity), while the CPU socket runs the cold experts where their weights are. Per layer
// and pass the three resources work in parallel, so a layer takes
//     forward:  max(PCIe load, GPU compute, CPU compute)
//     backward: max(PCIe load, 3 x GPU compute, 3 x CPU compute, gradient offload)
// (backward replays the forward: the plans keep only each layer's input)
// (inter-layer loading hides the next layer's load behind this one's compute). A GPU's stages
// run back to back and the pipeline adds (G - 1)/(m v) of fill and drain (v = stages / G). The
// optimizer step runs on the CPUs over all parameters at host memory bandwidth.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "planner/aptmoe.h"
#include "planner/cluster_spec.h"
#include "planner/plan.h"
#include "planner/time_model.h"

namespace moe {

struct OffloadEstimate {
  TimeBreakdown time;
  Bytes gpu_peak;       // one stage's weights (loaded part) + its activations for m micro-batches
  Bytes host_bytes;     // all weights and optimizer states, per node
  Bytes host_capacity;  // host memory per node
  double experts_on_gpu = 0;  // mean share of experts a layer loads
  bool fits = false;
};

// The systems APTMoE compares (Sec. IV): its own, Mobius (stages cross-mapped over GPUs, the
// next stage prefetched behind the current one, every expert on the GPU) and GPipeOffload (each
// GPU's GPipe stage cut into smaller ones, loaded and run one after another).
enum class OffloadSystem { kAptMoe, kMobius, kGPipeOffload };
const char* offload_system_name(OffloadSystem s);

// One GPU's view of the node: its share of the PCIe switch uplink and of its CPU socket.
// `micro_batches`: the calls a pass's GEMMs run as (their efficiency is one call's).
aptmoe::Rates offload_rates(const TimeContext& ctx, const ClusterSpec& c, int64_t gpus,
                            Precision precision, int64_t micro_batches = 1);

// One layer's pass over `tokens` tokens (all of a stage's micro-batches): GPU and CPU work and
// the weights the GPU loads. APTMoE splits experts by eq. (1); the baselines load them all.
// The first layer's stage also loads the embedding, and the last layer's the output head (the
// embedding again when tied) with the final norm, and runs the head: its GEMM over the
// vocabulary outweighs a layer when the vocabulary is large (MemFine Model II: 129,280 x 7,168).
struct OffloadLayer {
  Seconds gpu, cpu, load;
  Seconds recompute;          // backward: the part of `gpu` that replays the forward
  Seconds expert_load;        // the part of `load` that is routed experts (what a predictor picks)
  double loaded_share = 1.0;  // of the routed experts
  double cpu_tokens = 0;      // routed tokens the CPU experts take (their activations cross PCIe)
};
// Tokens of one stage pass: a GPU runs all gbs / mbs micro-batches of a stage at once.
double offload_pass_tokens(int64_t gbs, int64_t mbs, int64_t seq_len);
// Weights the stage holding `layer` (of `layers`, cut into `stages`) loads besides its layers':
// the embedding with the first layer, the output head and final norm with the last.
double offload_edge_params(const ModelParams& params, int64_t layer, int64_t layers,
                           int64_t stages);

// The MHA block's (with norms and shared experts) and the gate's PCIe loads of a layer.
aptmoe::Fixed offload_fixed_loads(const TimeContext& ctx, const aptmoe::Rates& rates, int64_t layer,
                                  Precision precision);
// APTMoE's eq. (1) split of a MoE layer's experts for a pass over `tokens` tokens, from the
// skew's popularity: what offload_layer costs and `moeplan execute` runs.
aptmoe::Allocation offload_allocation(const TimeContext& ctx, const aptmoe::Rates& rates,
                                      int64_t layer, aptmoe::Pass kind, double tokens,
                                      Precision precision);
OffloadLayer offload_layer(const TimeContext& ctx, const aptmoe::Rates& rates, int64_t layer,
                           int64_t stages, aptmoe::Pass pass, double tokens, Precision precision,
                           OffloadSystem system);

// Offload stages split the layers in order, the first (layers mod stages) one layer longer.
int64_t offload_stage_first_layer(int64_t layers, int64_t stages, int64_t stage);
int64_t offload_stage_layers(int64_t layers, int64_t stages, int64_t stage);

// Which GPU runs a stage: Mobius and APTMoE cross-map (stage s on GPU s mod G); GPipeOffload
// cuts each GPU's GPipe stage into consecutive sub-stages.
int64_t offload_gpu_of(OffloadSystem system, int64_t stages, int64_t gpus, int64_t stage);

// Whether a stage's weights are still on its GPU when backward reaches it, so backward need not
// load them again. Mobius and APTMoE keep the last two stages a GPU loaded (the prefetch
// buffer), so backward's first two visits on each GPU reuse what forward left; GPipeOffload
// keeps one, its GPU's last sub-stage. With as many stages as GPUs every stage stays resident.
bool offload_resident_in_backward(OffloadSystem system, int64_t stages, int64_t gpus,
                                  int64_t stage);

// One stage's forward or backward over all micro-batches: the work that runs micro-batch by
// micro-batch (GPU, CPU experts, gradient offload, whichever is longest, layer by layer) and the
// weights it loads first (none when still resident).
struct OffloadStagePass {
  Seconds work, load;
};
// The time from the first forward to the last backward when GPipe runs the cross-mapped stages
// (stage s on GPU s mod G, each GPU visiting its stages in order, forward ascending then
// backward descending) over `micro` micro-batches. A stage starts once its weights are in: each
// GPU loads its visits in order, a load starting once the visit two before it has finished (two
// stages fit), so it prefetches behind the one running; and it waits for each micro-batch from
// the stage before (after, in backward), so a slow stage, the output head's, paces the stages
// after it in its wave.
Seconds offload_schedule_makespan(const std::vector<OffloadStagePass>& forward,
                                  const std::vector<OffloadStagePass>& backward, int64_t gpus,
                                  int64_t micro);

// Adam on the CPUs over the parameters a node holds (weights, gradients and two moments in FP32,
// ~28 bytes each) at host memory bandwidth, for a run on `gpus` GPUs.
Seconds offload_optimizer_time(const TimeContext& ctx, const ClusterSpec& c, int64_t gpus);
// The CPU sockets the first `gpus` GPUs of a node hang off: the host memory and memory
// bandwidth an offload plan has. A rack-scale node (GB200 NVL72: a Grace per two GPUs, in
// separate trays) lends four GPUs two Graces, not the rack's 36.
std::vector<int> host_sockets(const NodeSpec& node, int64_t gpus);

// gpus: GPUs used; stages: pipeline stages (>= gpus); micro-batches m = gbs / mbs.
OffloadEstimate estimate_offload(const TimeContext& ctx, const ClusterSpec& c, int64_t gpus,
                                 int64_t stages, int64_t mbs, int64_t gbs, Precision precision,
                                 double alpha);

}  // namespace moe
