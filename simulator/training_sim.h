// A training run of a plan, operator by operator: the simulator's main entry.
//
// Each pipeline stage is simulated by one representative GPU: the busiest EP rank of every MoE
// layer (dispatch and combine wait for the slowest rank, so its expert work sets the pace; the
// symmetric mode of the issue). With TrainingOptions::every_gpu every GPU of the plan runs: the
// stage's pass graph is shared, each GPU scales its MoE operators to its EP rank's load, and
// collectives start together on their whole group (see start_collectives). Its work runs on five
// streams: compute, TP, EP, CP and DP communication, plus pipeline sends. Every operator of
// planner/layer_ops.h is a task: compute for the planner's duration; communication as a flow over
// the stage's NVLink port or NIC (whichever its group crosses) sized so that, alone, it takes the
// planner's time. So without contention the simulator reproduces the closed form, and where flows
// meet (expert all-to-all with gradient sync or pipeline sends on one NIC) it slows down by max-min
// sharing.
//
// Overlap (PlanChoice::overlap, MegaScale-MoE Sec. 4.1) splits every layer into kOverlapSlices
// token slices whose operators pipeline across the compute and communication streams; without
// it a layer is one chain. Backward runs the ops in reverse at twice the compute; full recompute
// replays the forward first; selective and MegaScale rematerialization add their share.
//
// Memory: static bytes per stage (MemFine eq. 1, or a measured override), then activations as
// they are allocated: a layer's sequence part at its first operator and its received-token part
// (one FCDA chunk of s'') at dispatch, freed when the layer's backward ends; under full recompute
// forward keeps only the layer input and backward re-allocates the layer. s'' comes from the
// routing generator per layer and iteration, and MACT (eq. 8-9) picks that layer's chunk count
// from it when the plan uses MACT. An allocation past the GPU's capacity is an OOM event with its
// iteration, stage, layer, micro-batch, operator and chunk; one past alpha x capacity (eq. 3's
// budget, which the planner and MACT plan to) but inside the GPU runs, after a stall: PyTorch's
// caching allocator, finding no cached block, frees its cache (a device synchronization and
// cudaFree) and calls cudaMalloc again (torch.cuda.memory_stats' num_alloc_retries).
//
// Interleaved stages hold their layers as v contiguous chunks (Megatron assigns them round
// robin; the stage's layer mix is the same).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/cluster_spec.h"
#include "planner/plan.h"
#include "planner/time_model.h"
#include "simulator/routing_generator.h"
#include "simulator/sim_time.h"

namespace moe::sim {

// 1 / kOverlapResidual: the planner's exposed remainder of overlapped communication is one
// slice's worth.
constexpr int64_t kOverlapSlices = 10;

struct TrainingOptions {
  int64_t iterations = 1;
  uint64_t seed = 1;
  RoutingDynamics dynamics;  // on top of the context's skew
  std::optional<Bytes> static_override;
  double alpha = 1.0;  // MemFine eq. (3): the share of HBM training plans to use
  std::vector<int64_t> chunk_bins = {1, 2, 4, 8};
  bool record_trace = false;
  // MoNTA's communication priorities, EP (and TP) << PP << CP << DP: on a shared link a class
  // only gets what the ones before it leave. Off: every flow shares max-min fairly (NCCL).
  bool comm_priorities = false;
  // Simulate every GPU rather than one representative per stage: each has its own streams,
  // NVLink and NIC ports (one link per direction) and memory; its EP rank's experts get that
  // rank's tokens; TP, EP, CP and DP collectives wait for their whole group, expand into the
  // bytes each member's ports carry (rings hop to the next rank, all-to-alls reach every rank:
  // simulator/port_loads.h) and end when the last port's flow has landed.
  bool every_gpu = false;
  // Every-GPU mode: all-to-all across nodes leaves by the NIC on the receiver's rail, reached
  // over NVLink (NCCL's PXN, on by default; NCCL_PXN_DISABLE=1 turns it off).
  bool pxn = true;
  size_t max_oom_events = 32;
  // Operator spans kept for the trace; past this only passes, DP and sends are (a trace of
  // millions of events is more than Perfetto opens comfortably).
  size_t max_trace_spans = 200000;
  // Called after each simulated iteration with how many are done and the total (a run of every
  // GPU takes seconds an iteration: the CLI shows progress with it).
  std::function<void(int64_t done, int64_t total)> on_iteration;
  // Called every `progress_events` events inside an iteration with the share of it simulated so
  // far, as simulated time over the planner's estimate (at most 0.99): an iteration of every GPU
  // of a large cluster takes seconds.
  std::function<void(double share)> on_progress;
  uint64_t progress_events = uint64_t{1} << 20;
};

struct OomEvent {
  int64_t iteration = 0, stage = 0, layer = 0, microbatch = 0;
  int64_t gpu = 0;                // within the stage (every-GPU mode; 0 for the representative)
  int64_t chunk = 1, chunks = 1;  // the FCDA chunk being allocated, of how many
  std::string op;
  Bytes needed, capacity;
};

// kCopyStream: the copy engine MoNTA O3 runs its token-order D2D copies on. kD2hStream and
// kH2dStream: activation offloading's copies to and from the host, on the two streams
// Megatron's PipelineOffloadManager keeps apart from any other (and from each other: PCIe is
// full duplex). kHostStream: the framework's CPU thread issuing each layer's kernels
// (planner/host_time.h). kCarriedTpStream and kCarriedEpStream: flows another task carries in
// the TP or EP group (Task::carries): a fused GEMM's communication (MegaScale's
// intra-operator overlap), which moves with its kernel rather than queued behind the group's
// collectives, and the local peers' share of an all-to-all that leaves the node.
enum Stream {
  kCompute = 0,
  kTpStream,
  kEpStream,
  kCpStream,
  kDpStream,
  kCopyStream,
  kD2hStream,
  kH2dStream,
  kHostStream,
  kCarriedTpStream,
  kCarriedEpStream,
  kStreams
};
const char* stream_name(int stream);

// Times are per GPU over all iterations: with every GPU simulated, the mean over the stage's
// GPUs, with the least and most busy beside it.
struct StageReport {
  Seconds compute_busy;      // all iterations
  Seconds waited[kStreams];  // compute idle inside passes, by the stream it waited for
  Seconds pipeline_wait;     // idle between passes (bubble and boundary transfers)
  Seconds nvlink_busy, nic_busy;
  Bytes static_bytes, peak_bytes;
  int64_t gpus = 1;  // simulated
  Seconds compute_busy_min, compute_busy_max;
  int64_t peak_gpu = 0;  // the GPU (within the stage) that reached peak_bytes
};

struct TraceSpan {
  int64_t stage = 0;
  std::string lane;
  std::string name;
  SimTime start, end;
};
struct MemorySample {
  int64_t stage = 0;
  SimTime time;
  Bytes bytes;
};

struct LinkSample {
  int64_t stage = 0;
  bool nic = false;  // else the NVLink port
  SimTime time;
  int active = 0;  // communication tasks with a flow on it
};

struct TrainingReport {
  std::vector<Seconds> iteration_times;
  Seconds mean_iteration;
  double tokens_per_second = 0, mfu = 0, tgs = 0;
  std::vector<StageReport> stages;
  std::vector<OomEvent> ooms;  // the first max_oom_events
  int64_t oom_count = 0;
  // Allocations that left a GPU past alpha x capacity but inside it; each stalled its stream
  // for Efficiencies::allocator_retry.
  int64_t allocator_retries = 0;
  std::vector<int64_t> chunk_histogram;  // MoE layer passes per FCDA chunk count, index = c
  uint64_t events = 0;
  uint64_t tasks = 0;
  int64_t gpus_simulated = 0;
  uint64_t collectives = 0;  // group operations joined (every-GPU mode)
  uint64_t flows = 0;        // port flows they expanded into (every-GPU mode)
  // Bytes the collectives put on all GPUs' outgoing NVLink and NIC ports, all iterations
  // (every-GPU mode; planner-time-sized, so a slower curve shows as more bytes).
  Bytes nvlink_bytes, nic_bytes;
  std::vector<TraceSpan> spans;  // when record_trace
  bool trace_truncated = false;
  std::vector<MemorySample> memory;
  std::vector<LinkSample> links;
};

// The plan must be complete and valid for the model; the cluster must hold its GPUs.
TrainingReport simulate_training(const TimeContext& ctx, const ClusterSpec& cluster,
                                 const PlanChoice& plan, const TrainingOptions& options);

}  // namespace moe::sim
