// The state of one simulated training run (simulate_training), shared by the files that drive it:
// training_sim.cpp runs the iterations and fills the report, training_layers.cpp prices each
// layer under that iteration's routing, training_pass.cpp builds a pipeline pass's task graph,
// training_comm.cpp joins collectives, queues the DP stream and accounts links and memory.
// Internal to the simulator; training_sim.h is the interface.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "planner/layer_ops.h"
#include "planner/memfine.h"
#include "planner/memory_model.h"
#include "simulator/gpu_streams.h"
#include "simulator/pipeline.h"
#include "simulator/training_sim.h"

namespace moe::sim::training {

// One layer at one iteration: what routing decided and what it costs.
struct LayerState {
  bool moe = false;
  double load = 1.0;   // busiest EP rank over balanced
  int64_t chunks = 1;  // FCDA
  std::vector<LayerOp> forward;
  std::vector<LayerOp> backward;  // forward reversed (its compute runs at twice the time)
  Seconds forward_compute, forward_tp, forward_ep;  // sums of `forward` by kind
  // The least forward compute any GPU of the layer runs (forward_compute but for a lighter EP
  // rank's share): a host that issues the layer in no more time never holds it up.
  Seconds least_forward_compute;
  Seconds least_backward_compute;  // the same for its backward (LayerOp::backward_compute)
  Bytes sequence_part;             // allocated at the layer's first operator
  Bytes token_part;                // allocated at dispatch (one chunk of s'')
  Bytes checkpoint;                // full recompute: the layer input kept from forward
  int64_t token_op = -1;           // index in `forward` where the token part is allocated
  // Activation offloading: what one micro-batch's pass sends to the host after the layer's
  // forward and brings back before its backward (the busiest rank's), and how long each copy
  // takes on the GPU's host link.
  Bytes offloaded;
  Seconds offload_copy;
  std::vector<ReplayedOp> replayed;  // selective recompute's ops (layer_ops.h)
  // Every-GPU mode, MoE layers under uneven routing: per EP rank, each forward op's time over
  // the busiest rank's (what scales that rank's copy of the shared graph) and its token part.
  std::vector<std::vector<double>> rank_ratio;
  std::vector<Bytes> rank_token_part;
};

// Which layer operator a task of a pass graph runs (op indexes the layer's forward list; a
// backward task names the forward op it mirrors). layer < 0: not a layer operator.
struct OpRef {
  int32_t layer = -1;
  int32_t op = 0;
};

// The streams whose collectives a whole group runs together (every-GPU mode joins them).
inline constexpr int kGroupStreams[] = {kTpStream, kEpStream,        kCpStream,
                                        kDpStream, kCarriedTpStream, kCarriedEpStream};

struct DpCollective {
  const char* name = "";
  Seconds time;
  bool nic = false;  // crosses nodes (else NVLink)
  std::function<void()> then;
};

// What a task does to memory, and where to report it. `tokens`: the amounts hold the layer's
// token part at the busiest rank's load, which each GPU swaps for its own.
struct MemAction {
  int64_t layer = 0, micro = 0, chunks = 1;
  Bytes alloc;    // at start
  Bytes release;  // at end
  bool tokens = false;
};

struct GpuState {
  int64_t stage = 0, local = 0, ep_rank = 0;
  int64_t group[kStreams] = {};  // key of its TP, EP, CP and DP groups, by stream
  // Its ports, one link per direction: what symmetric mode sends a collective over (out), and
  // what every-GPU mode expands one into (simulator/port_loads.h).
  int nvlink_out = 0, nvlink_in = 0, nic_out = 0, nic_in = 0;
  int64_t node = 0, rail = 0;  // every-GPU mode: its node and its local index there
  std::unique_ptr<GpuStreams> gpu;
  // Every-GPU mode: its group on each communication stream, and the collectives of the
  // running pass it has ready there, by (rank, task).
  const std::vector<int64_t>* peers[kStreams] = {};
  // The layer operator of each task of the graph it runs (every-GPU mode; null while it runs
  // anything else, such as the optimizer step).
  std::shared_ptr<const std::vector<OpRef>> refs;
  // (rank, task), sorted: a handful at a time, so a sorted vector beats a tree's allocations.
  std::vector<std::pair<int, uint32_t>> ready_collectives[kStreams];
  // The peer that kept its last collective from starting, asked first next time: members
  // arrive one by one, so scanning the group from its start would cost O(n^2) a collective.
  static_assert(kStreams == 11);
  int64_t held_by[kStreams] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  Bytes current, peak;
  int active_nvlink = 0, active_nic = 0;
  SimTime nvlink_since, nic_since;
  // Asynchronous data-parallel collectives, one after another on the DP stream.
  std::deque<DpCollective> dp_queue;
  bool dp_busy = false;
  int64_t dp_serial = 0;  // collectives started on the DP stream
  // The iteration's parameter all-gather, model chunk by model chunk: how many chunks' weights
  // are in, and each chunk's first forward pass when it finished before them.
  int64_t chunks_gathered = 0;
  std::vector<std::function<void()>> deferred_done;
  bool optimizer_waiting = false;  // the last pass is done; gradients still reducing
};

struct StageState {
  int64_t first_gpu = 0, num_gpus = 1;                       // its GPUs in Training::gpus_
  std::map<int64_t, std::vector<int64_t>> groups[kStreams];  // by group key
  Bytes static_bytes;
  double max_received = 0;  // MACT's s'_max for the stage
  DpSync sync;
  std::vector<MemAction> actions;    // of the running pass graph; tags index it (1-based)
  std::vector<OpRef> refs;           // of the pass graph being built, by task (every-GPU mode)
  int64_t pass_serial = 0;           // passes started
  int64_t gpus_left = 0;             // GPUs still running the current pass
  std::vector<TaskPending> pending;  // its GPUs' state of the pass graph's tasks, interleaved
  std::function<void()> pass_done;
};

// A collective of one group being joined: flows start once every member has arrived and all
// members go on when the last flow has landed.
struct Member {
  int64_t gpu = 0;
  double weight = 1.0;  // its share of the task's bytes (1 on the busiest EP rank)
  std::function<void()> done;
};
struct Joining {
  int priority = 0;
  std::vector<Member> members;
  size_t flows_left = 0;
};
using CollectiveKey = std::tuple<int64_t, int64_t, uint32_t, int, int64_t>;

class Training {
 public:
  Training(const TimeContext& ctx, const ClusterSpec& cluster, const PlanChoice& plan,
           const TrainingOptions& o);
  TrainingReport run();

 private:
  bool every_gpu() const { return per_stage_ > 1; }

  // training_sim.cpp
  SimTime run_iteration(int64_t it, SimTime offset);
  void place_gpus(PipelineHooks& hooks);
  void start_parameter_gathers();
  void add_stage_reports(const PipelineResult& pr, SimTime end);
  // training_layers.cpp
  void plan_layers(int64_t it);
  // training_pass.cpp
  void run_pass(const PassId& id, std::function<void()> done);
  uint32_t add_op(std::vector<Task>& g, const StageState& st, const LayerOp& op, double scale,
                  double compute_scale, std::vector<uint32_t> after, double load = 1.0,
                  bool backward = false);
  uint32_t add_monta(std::vector<Task>& g, const StageState& st, const LayerOp& op, double scale,
                     double load, bool backward, std::vector<uint32_t> after);
  uint32_t append(std::vector<Task>& g, Task t);
  int64_t add_action(StageState& st, MemAction a);
  // training_comm.cpp
  void dp_async(int64_t g, const char* name, Seconds time, std::function<void()> then = {},
                bool across = true);
  void dp_next(int64_t g);
  void join(int64_t g, CollectiveKey key, const Task& t, double ratio, std::function<void()> done);
  void start_collectives(int64_t g, int stream);
  void maybe_step(int64_t g);
  StreamHooks stream_hooks(int64_t g);
  void link_activity(GpuState& x, const Task& t, int delta);
  void link_activity(GpuState& x, bool nic, int delta);
  void sample_memory(const GpuState& x);
  int priority_of(int stream) const;
  Task comm_task(const StageState& st, const char* name, int stream, Seconds time, bool nic,
                 Exchange exchange = Exchange::kRing, Seconds latency = Seconds(0));
  static constexpr int kPipelinePriority = 1;

  // The GPU's own size of a task of the shared graph (1 off the busiest rank's layers).
  double ratio(const GpuState& x, uint32_t id) const {
    if (!x.refs) return 1.0;
    const OpRef r = x.refs->at(id);
    if (r.layer < 0) return 1.0;
    const LayerState& L = layers_[static_cast<size_t>(r.layer)];
    if (L.rank_ratio.empty()) return 1.0;
    return L.rank_ratio[static_cast<size_t>(x.ep_rank)][static_cast<size_t>(r.op)];
  }

  // A memory action's bytes on this GPU: the token part at its own EP rank's load.
  Bytes own_bytes(const GpuState& x, const MemAction& a, Bytes amount) const {
    if (!a.tokens || amount.value() <= 0) return amount;
    const LayerState& L = layers_[static_cast<size_t>(a.layer)];
    if (L.rank_token_part.empty()) return amount;
    return amount - L.token_part + L.rank_token_part[static_cast<size_t>(x.ep_rank)];
  }

  // Whether a communication task crosses the NIC (tasks are built on the stage's first GPU).
  bool on_nic(const GpuState& x, const Task& t) const {
    return !t.links.empty() &&
           t.links.front() ==
               gpus_[static_cast<size_t>(stages_[static_cast<size_t>(x.stage)].first_gpu)].nic_out;
  }

  static Task compute_task(const char* name, int stream, Seconds time) {
    Task t;
    t.name = name;
    t.stream = stream;
    t.duration = to_sim_time(time);
    return t;
  }

  const TimeContext& ctx_;
  const ModelSpec& m_;
  PlanChoice plan_;  // MACT's chunk count per stage settled on memory_ (settle_mact_chunks)
  const ParallelConfig& p_;
  const TrainingOptions& o_;
  RoutingGenerator routing_;
  Bytes capacity_;
  SimTime allocator_retry_;  // the stall of one allocation past alpha x capacity
  MemoryReport memory_;
  memfine::LayerShape shape_;
  // The head's loss (its logits held from a micro-batch's forward to its backward, none under a
  // measured static memory, which holds them already, as the planner's memory model has it) and
  // the first stage's embedding gradient, one micro-batch each (planner/layer_ops.h).
  LossPasses loss_;
  Seconds embedding_gradient_;
  int64_t microbatches_ = 1;
  TrainingReport report_;

  EventQueue* queue_ = nullptr;
  FlowNetwork* net_ = nullptr;
  int64_t iteration_ = 0;
  int64_t ready_to_step_ = 0;  // GPUs whose passes and gradient syncs are done this iteration
  SimTime offset_;
  int64_t per_stage_ = 1;  // GPUs simulated per stage
  int64_t gpus_per_node_ = 1;
  int64_t group_size_[kStreams] = {};
  // The planner's peers on other nodes for each stream's group (0 inside a node): what a
  // member's bytes are spread over (port_loads).
  double remote_peers_[kStreams] = {};
  std::vector<Seconds> compute_total_;  // per GPU, all iterations
  std::vector<Bytes> peak_total_;
  std::vector<StageState> stages_;
  std::vector<GpuState> gpus_;
  std::vector<LayerState> layers_;
  std::map<CollectiveKey, Joining> joining_;
  std::vector<std::map<CollectiveKey, Joining>::node_type> spare_nodes_;
  CollectiveKey last_key_;          // the collective join() touched last, while being joined
  Joining* last_joined_ = nullptr;  // (a map's nodes stay put)
  std::vector<std::pair<FlowNetwork::Links, Bytes>> flows_scratch_;  // join's, kept between calls
  std::vector<PortMember> ports_scratch_;                            // (no allocation per call)
  std::vector<std::unique_ptr<Joining>> landing_;  // collectives whose flows are in flight
  std::vector<Joining*> landing_free_;             // of those, the ones that have landed
  int64_t building_stage_ = 0;                     // the stage whose pass graph is being built
  OpRef ref_;  // the layer operator the tasks being appended run
};

}  // namespace moe::sim::training
