#include "simulator/training_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <tuple>

#include "planner/layer_ops.h"
#include "planner/memfine.h"
#include "planner/memory_model.h"
#include "planner/monta.h"
#include "planner/search.h"
#include "simulator/gpu_streams.h"
#include "simulator/pipeline.h"

namespace moe::sim {

const char* stream_name(int stream) {
  switch (stream) {
    case kCompute:
      return "compute";
    case kTpStream:
      return "tp";
    case kEpStream:
      return "ep";
    case kCpStream:
      return "cp";
    case kDpStream:
      return "dp";
    case kCopyStream:
      return "copy";
  }
  return "?";
}

namespace {

int stream_of(OpKind k) {
  switch (k) {
    case OpKind::kCompute:
      return kCompute;
    case OpKind::kTp:
      return kTpStream;
    case OpKind::kEp:
      return kEpStream;
    case OpKind::kCp:
      return kCpStream;
  }
  return kCompute;
}

// One layer at one iteration: what routing decided and what it costs.
struct LayerState {
  bool moe = false;
  double load = 1.0;   // busiest EP rank over balanced
  int64_t chunks = 1;  // FCDA
  std::vector<LayerOp> forward;
  std::vector<LayerOp> backward;          // forward reversed (its compute runs at twice the time)
  Seconds forward_compute, forward_comm;  // sums of `forward` by kind
  Bytes sequence_part;                    // allocated at the layer's first operator
  Bytes token_part;                       // allocated at dispatch (one chunk of s'')
  Bytes checkpoint;                       // full recompute: the layer input kept from forward
  int64_t token_op = -1;                  // index in `forward` where the token part is allocated
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
  int64_t first_layer = 0, num_layers = 0;
  DpSync sync;
  std::vector<MemAction> actions;  // of the running pass graph; tags index it (1-based)
  std::vector<OpRef> refs;         // of the pass graph being built, by task (every-GPU mode)
  int64_t pass_serial = 0;         // passes started
  int64_t gpus_left = 0;           // GPUs still running the current pass
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
           const TrainingOptions& o)
      : ctx_(ctx),
        m_(*ctx.model),
        plan_(plan),
        p_(plan.parallel),
        o_(o),
        routing_(m_, ctx.skew, o.dynamics, o.seed) {
    capacity_ = cluster.node.gpu.hbm_capacity;
    const MemoryRequest request = memory_request(ctx, plan, capacity_, o.alpha, o.static_override);
    memory_ = estimate_memory(m_, ctx.params, p_, request);
    shape_ = memory_.moe_shape;  // with the request's FP8 input and score bytes
    microbatches_ = *p_.gbs / (*p_.mbs * *p_.dp);
    per_stage_ = o.every_gpu ? p_.world() / *p_.pp : 1;
    gpus_per_node_ = std::max<int64_t>(cluster.node.num_gpus, 1);
    group_size_[kTpStream] = *p_.tp;
    // Expert TP without EP gathers and scatters its tokens over the ETP group (MegaScale eq. 4):
    // the EP stream's communicator is then that group.
    group_size_[kEpStream] = *p_.ep > 1 ? *p_.ep : *p_.etp;
    group_size_[kCpStream] = *p_.cp;
    group_size_[kDpStream] = *p_.dp * *p_.cp;
    report_.stages.resize(static_cast<size_t>(*p_.pp));
    report_.chunk_histogram.assign(static_cast<size_t>(o.chunk_bins.back() + 1), 0);
    report_.gpus_simulated = *p_.pp * per_stage_;
    compute_total_.assign(static_cast<size_t>(report_.gpus_simulated), Seconds(0));
    peak_total_.assign(static_cast<size_t>(report_.gpus_simulated), Bytes(0));
  }

  TrainingReport run() {
    SimTime offset;
    for (int64_t it = 0; it < o_.iterations; ++it) {
      const SimTime took = run_iteration(it, offset);
      report_.iteration_times.push_back(to_seconds(took));
      offset = offset + took;
    }
    Seconds sum;
    for (Seconds t : report_.iteration_times) sum += t;
    report_.mean_iteration = sum / static_cast<double>(report_.iteration_times.size());
    for (int64_t s = 0; s < *p_.pp; ++s) {
      StageReport& r = report_.stages[static_cast<size_t>(s)];
      r.gpus = per_stage_;
      r.compute_busy_min = r.compute_busy_max = compute_total_[static_cast<size_t>(s * per_stage_)];
      for (int64_t k = 0; k < per_stage_; ++k) {
        const size_t g = static_cast<size_t>(s * per_stage_ + k);
        r.compute_busy_min = std::min(r.compute_busy_min, compute_total_[g]);
        r.compute_busy_max = std::max(r.compute_busy_max, compute_total_[g]);
        if (peak_total_[g] > r.peak_bytes) {
          r.peak_bytes = peak_total_[g];
          r.peak_gpu = k;
        }
      }
    }
    TimeBreakdown time;
    time.iteration = report_.mean_iteration;
    time.microbatches = microbatches_;
    const PlanScore score = complete_score(ctx_, plan_, memory_, time, capacity_, o_.alpha);
    report_.tokens_per_second = score.tokens_per_second;
    report_.mfu = score.mfu;
    report_.tgs = score.tgs;
    return std::move(report_);
  }

 private:
  bool every_gpu() const { return per_stage_ > 1; }

  // Routing, chunks and costs of every layer for iteration `it`.
  void plan_layers(int64_t it) {
    layers_.assign(static_cast<size_t>(m_.num_layers), {});
    const Recompute rc = plan_.recompute;
    const bool full = rc == Recompute::kFull;
    for (int64_t s = 0; s < *p_.pp; ++s) {
      const StageState& st = stages_[static_cast<size_t>(s)];
      for (int64_t l = st.first_layer; l < st.first_layer + st.num_layers; ++l) {
        LayerState& L = layers_[static_cast<size_t>(l)];
        L.moe = m_.moe_layer[static_cast<size_t>(l)];
        const LayerParams& params = ctx_.params.layers[static_cast<size_t>(l)];
        double received = static_cast<double>(ctx_.seq_len);
        std::vector<double> loads;
        if (L.moe) {
          loads = routing_.rank_loads(l, it, *p_.ep);
          L.load = RoutingGenerator::busiest_of(loads);
          received = static_cast<double>(ctx_.seq_len) * static_cast<double>(m_.top_k) * L.load;
          L.chunks = std::max<int64_t>(plan_.fcda_chunks, 1);
          if (plan_.mact) {
            // MACT, eq. (8)-(9), on this layer's s'' at this iteration.
            const int64_t bin = memfine::select_bin(
                memfine::chunks_needed(received, st.max_received), o_.chunk_bins);
            L.chunks = bin > 0 ? bin : o_.chunk_bins.back();
          }
          ++report_.chunk_histogram[static_cast<size_t>(std::min<int64_t>(
              L.chunks, static_cast<int64_t>(report_.chunk_histogram.size()) - 1))];
        }
        L.forward = layer_forward_ops(ctx_, plan_, params, L.moe, L.load, L.chunks);
        L.backward.assign(L.forward.rbegin(), L.forward.rend());
        for (const LayerOp& op : L.forward)
          (op.kind == OpKind::kCompute ? L.forward_compute : L.forward_comm) += op.time;
        const Bytes whole = layer_activation_bytes(m_, p_, shape_, L.moe, received, L.chunks, rc);
        L.sequence_part = layer_activation_bytes(m_, p_, shape_, L.moe, 0.0, L.chunks, rc);
        if (!L.moe) L.sequence_part = whole;
        L.token_part = whole - L.sequence_part;
        // A measured static figure (MemFine Table 4) already holds the checkpoints.
        L.checkpoint =
            full && !o_.static_override ? memfine::recompute_checkpoints(shape_, 1.0, 1) : Bytes(0);
        L.token_op = -1;
        for (size_t q = 0; q < L.forward.size() && L.token_op < 0; ++q) {
          if (L.forward[q].receives_tokens) L.token_op = static_cast<int64_t>(q);
        }
        const bool uneven =
            std::any_of(loads.begin(), loads.end(), [&](double x) { return x != L.load; });
        if (every_gpu() && L.moe && uneven) {
          for (double load : loads) {
            const std::vector<LayerOp> own =
                layer_forward_ops(ctx_, plan_, params, true, load, L.chunks);
            std::vector<double> ratio(L.forward.size(), 1.0);
            // Communication scales with the bytes on the member's own ports (join spreads them
            // as PXN does), compute with its time.
            for (size_t q = 0; q < own.size() && q < ratio.size(); ++q) {
              const bool comm = L.forward[q].kind != OpKind::kCompute;
              const Seconds busiest = comm ? L.forward[q].port_time() : L.forward[q].time;
              if (busiest.value() > 0)
                ratio[q] = (comm ? own[q].port_time() : own[q].time) / busiest;
            }
            L.rank_ratio.push_back(std::move(ratio));
            const double own_received =
                static_cast<double>(ctx_.seq_len) * static_cast<double>(m_.top_k) * load;
            L.rank_token_part.push_back(
                layer_activation_bytes(m_, p_, shape_, true, own_received, L.chunks, rc) -
                L.sequence_part);
          }
        }
      }
    }
  }

  SimTime run_iteration(int64_t it, SimTime offset) {
    EventQueue queue;
    FlowNetwork net(queue);
    queue_ = &queue;
    net_ = &net;
    iteration_ = it;
    offset_ = offset;
    stages_.clear();
    stages_.resize(static_cast<size_t>(*p_.pp));
    gpus_.clear();
    gpus_.resize(static_cast<size_t>(*p_.pp * per_stage_));
    joining_.clear();
    last_joined_ = nullptr;
    const int64_t span = boundary_span(p_);
    PipelineHooks hooks;
    hooks.boundary_priority = o_.comm_priorities ? kPipelinePriority : 0;
    for (int64_t s = 0; s < *p_.pp; ++s) {
      StageState& st = stages_[static_cast<size_t>(s)];
      const StageMemory& sm = memory_.stages[static_cast<size_t>(s)];
      st.first_gpu = s * per_stage_;
      st.num_gpus = per_stage_;
      st.static_bytes = sm.static_bytes;
      st.max_received = sm.max_received_tokens;
      st.first_layer = sm.first_layer;
      st.num_layers = sm.num_layers;
      st.sync = dp_sync_times(ctx_, plan_, s);
      for (int64_t k = 0; k < per_stage_; ++k) {
        const int64_t g = st.first_gpu + k;
        GpuState& x = gpus_[static_cast<size_t>(g)];
        x.stage = s;
        x.local = k;
        // Megatron's rank order inside a stage: tp, cp, dp for attention; etp, ep, edp for
        // the experts.
        x.ep_rank = (k / *p_.etp) % *p_.ep;
        x.group[kTpStream] = k / *p_.tp;
        x.group[kEpStream] = *p_.ep > 1 ? k - x.ep_rank * *p_.etp : k / *p_.etp;
        x.group[kCpStream] = k - ((k / *p_.tp) % *p_.cp) * *p_.tp;
        x.group[kDpStream] = k % *p_.tp;
        for (int k2 : {kTpStream, kEpStream, kCpStream, kDpStream})
          st.groups[k2][x.group[k2]].push_back(g);
        x.nvlink_out = net.add_link(ctx_.links.intra);
        x.nvlink_in = net.add_link(ctx_.links.intra);
        x.nic_out = net.add_link(ctx_.links.inter);
        x.nic_in = net.add_link(ctx_.links.inter);
        // Megatron's ranks fill a stage's GPUs in order, and a stage its nodes.
        x.node = g / gpus_per_node_;
        x.rail = g % gpus_per_node_;
        x.current = x.peak = st.static_bytes;
        x.gpu = std::make_unique<GpuStreams>(queue, net, kStreams, stream_hooks(g));
        sample_memory(x);
      }
      for (int64_t g = st.first_gpu; g < st.first_gpu + st.num_gpus; ++g) {
        GpuState& x = gpus_[static_cast<size_t>(g)];
        for (int k2 : {kTpStream, kEpStream, kCpStream, kDpStream})
          x.peers[k2] = &st.groups[k2].at(x.group[k2]);
      }
      const GpuState& first = gpus_[static_cast<size_t>(st.first_gpu)];
      const int link = ctx_.links.crosses_nodes(span) ? first.nic_out : first.nvlink_out;
      hooks.down_links.push_back({link});
      hooks.up_links.push_back({link});
    }
    plan_layers(it);

    PipelineSpec spec;
    spec.stages.resize(static_cast<size_t>(*p_.pp));
    spec.microbatches = microbatches_;
    spec.chunks = *p_.vpp;
    spec.gpipe = plan_.schedule() == Schedule::kGPipe;
    spec.boundary_bytes = boundary_bytes(ctx_, plan_);
    spec.boundary_bandwidth = ctx_.links.bandwidth(span);
    spec.boundary_latency = to_sim_time(ctx_.links.latency(span));
    hooks.run = [this](const PassId& id, std::function<void()> done) {
      run_pass(id, std::move(done));
    };
    hooks.on_stage_done = [this](int64_t s) {
      const StageState& st = stages_[static_cast<size_t>(s)];
      for (int64_t g = st.first_gpu; g < st.first_gpu + st.num_gpus; ++g) {
        gpus_[static_cast<size_t>(g)].optimizer_waiting = true;
        maybe_step(g);
      }
    };
    // Each stage gathers its parameters for this iteration at the start (Megatron's distributed
    // optimizer with --overlap-param-gather), one model chunk after another: a chunk's first
    // forward pass may run meanwhile but does not end before that chunk's weights are in (with
    // interleaving, chunk 0 no longer waits for the weights of chunks 1 to v - 1).
    const int64_t v = *p_.vpp;
    const double piece = 1.0 / static_cast<double>(v);
    for (int64_t g = 0; g < static_cast<int64_t>(gpus_.size()); ++g) {
      GpuState& x = gpus_[static_cast<size_t>(g)];
      const StageState& st = stages_[static_cast<size_t>(x.stage)];
      x.deferred_done.assign(static_cast<size_t>(v), {});
      x.chunks_gathered = v;
      // ZeRO-3 gathers weights for every pass instead (in run_pass).
      if (st.sync.all_gather.value() <= 0 || plan_.zero_stage >= 3) continue;
      x.chunks_gathered = 0;
      for (int64_t k = 0; k < v; ++k) {
        // Hierarchical (App. A.1) for SP-replicated weights: across nodes first, then in the node.
        dp_async(g, "DP parameter all-gather",
                 (st.sync.all_gather - st.sync.all_gather_in_node) * piece);
        dp_async(
            g, "DP parameter all-gather (in node)", st.sync.all_gather_in_node * piece,
            [this, g, k] {
              GpuState& y = gpus_[static_cast<size_t>(g)];
              y.chunks_gathered = k + 1;
              auto& waiting = y.deferred_done[static_cast<size_t>(k)];
              if (waiting) std::exchange(waiting, {})();
            },
            false);
      }
    }
    PipelineDriver driver(spec, queue, net, std::move(hooks));
    driver.start();
    report_.events += queue.run();
    if (!joining_.empty()) throw std::logic_error("a collective was never joined by its group");
    const PipelineResult pr = driver.finish();
    const SimTime end = queue.now();
    const double share = 1.0 / static_cast<double>(per_stage_);
    for (int64_t s = 0; s < *p_.pp; ++s) {
      const StageState& st = stages_[static_cast<size_t>(s)];
      StageReport& r = report_.stages[static_cast<size_t>(s)];
      for (int64_t g = st.first_gpu; g < st.first_gpu + st.num_gpus; ++g) {
        const GpuState& x = gpus_[static_cast<size_t>(g)];
        const Seconds busy = to_seconds(x.gpu->busy(kCompute));
        r.compute_busy += busy * share;
        compute_total_[static_cast<size_t>(g)] += busy;
        for (int k = 0; k < kStreams; ++k) r.waited[k] += to_seconds(x.gpu->waited_on(k)) * share;
        peak_total_[static_cast<size_t>(g)] = std::max(peak_total_[static_cast<size_t>(g)], x.peak);
      }
      r.pipeline_wait += to_seconds(end - pr.busy[static_cast<size_t>(s)]);
      r.static_bytes = st.static_bytes;
    }
    if (o_.record_trace) {
      for (const Span& sp : pr.spans) {
        report_.spans.push_back({sp.stage, sp.lane == "send" ? "pp send" : "passes", sp.name,
                                 offset_ + sp.start, offset_ + sp.end});
      }
    }
    return end;
  }

  // Queues a data-parallel collective on the GPU's DP stream; `then` runs when it lands.
  // `across` false keeps it on NVLink even when the stage's DP group crosses nodes.
  void dp_async(int64_t g, const char* name, Seconds time, std::function<void()> then = {},
                bool across = true) {
    GpuState& x = gpus_[static_cast<size_t>(g)];
    if (time.value() <= 0) {
      // Nothing to move: runs once what is queued before it has landed (FIFO like the rest).
      if (!then) return;
      if (!x.dp_busy && x.dp_queue.empty()) {
        then();
        return;
      }
    }
    const bool nic = across && stages_[static_cast<size_t>(x.stage)].sync.crosses_nodes;
    x.dp_queue.push_back({name, time, nic, std::move(then)});
    dp_next(g);
  }

  void dp_next(int64_t g) {
    GpuState& x = gpus_[static_cast<size_t>(g)];
    if (x.dp_busy || x.dp_queue.empty()) return;
    DpCollective next = std::move(x.dp_queue.front());
    x.dp_queue.pop_front();
    if (next.time.value() <= 0) {  // an empty stage that only orders its `then`
      if (next.then) next.then();
      dp_next(g);
      maybe_step(g);
      return;
    }
    x.dp_busy = true;
    const StageState& st = stages_[static_cast<size_t>(x.stage)];
    const Task t = comm_task(st, next.name, kDpStream, next.time, next.nic);
    const SimTime start = queue_->now();
    link_activity(x, t, +1);
    auto landed = [this, g, t, start, then = std::move(next.then)] {
      GpuState& y = gpus_[static_cast<size_t>(g)];
      link_activity(y, t, -1);
      if (o_.record_trace && y.local == 0)
        report_.spans.push_back({y.stage, "dp", t.name, offset_ + start, offset_ + queue_->now()});
      y.dp_busy = false;
      if (then) then();
      dp_next(g);
      maybe_step(g);
    };
    if (every_gpu()) {
      join(g, {x.stage, -1, x.dp_serial++, kDpStream, x.group[kDpStream]}, t, 1.0,
           std::move(landed));
    } else {
      net_->send(
          t.links, t.bytes, SimTime{}, [landed = std::move(landed)](SimTime) { landed(); },
          t.priority);
    }
  }

  // A member reaches a collective of its group; the flows start when the whole group is there.
  void join(int64_t g, CollectiveKey key, const Task& t, double ratio, std::function<void()> done) {
    const GpuState& x = gpus_[static_cast<size_t>(g)];
    const int size = group_size_[t.stream] > 0 ? static_cast<int>(group_size_[t.stream]) : 1;
    std::get<4>(key) = size > 1 ? x.group[t.stream] : x.local;
    // A group's members arrive one after another (start_collectives starts them in a row), so
    // the collective the last call joined is most often this one: no map lookup.
    if (!last_joined_ || last_key_ != key) {
      last_joined_ = &joining_[key];
      last_key_ = key;
    }
    Joining& j = *last_joined_;
    if (j.members.empty()) j.members.reserve(static_cast<size_t>(size));
    j.priority = t.priority;
    j.members.push_back({g, ratio, std::move(done)});
    if (static_cast<int>(j.members.size()) < size) return;
    ++report_.collectives;
    // From here its flows' callbacks hold it by a raw pointer, which std::function stores
    // inline (a shared_ptr would cost a heap block per flow); the last to land hands it back.
    Joining* shared = nullptr;
    if (landing_free_.empty()) {
      landing_.push_back(std::make_unique<Joining>());
      shared = landing_.back().get();
    } else {
      shared = landing_free_.back();
      landing_free_.pop_back();
    }
    *shared = std::move(j);
    joining_.erase(key);
    last_joined_ = nullptr;
    std::sort(shared->members.begin(), shared->members.end(),
              [](const Member& a, const Member& b) { return a.gpu < b.gpu; });  // rank order
    const bool across = on_nic(x, t);
    // A member's ports that carry the same bytes share one flow over all of them (under
    // balanced routing, out and in alike): its rate is the most contended port's share, which
    // is what the slower of separate flows would get, and the collective lands at the same
    // time with a quarter of the flows and events. Skew splits them.
    auto& flows = flows_scratch_;  // send() calls nothing back: no join runs inside this one
    flows.clear();
    if (shared->members.size() < 2) {
      // A group of one (a size-1 TP, CP or EP communicator) moves nothing; its task still lands
      // through the network so that it ends as an event.
      const GpuState& y = gpus_[static_cast<size_t>(shared->members.front().gpu)];
      const Bytes bytes = t.bytes * shared->members.front().weight;
      flows.push_back({{across ? y.nic_out : y.nvlink_out}, bytes});
      (across ? report_.nic_bytes : report_.nvlink_bytes) += bytes;
    } else {
      std::vector<PortMember> ports;
      ports.reserve(shared->members.size());
      for (const Member& mb : shared->members) {
        const GpuState& y = gpus_[static_cast<size_t>(mb.gpu)];
        ports.push_back({y.node, y.rail, t.bytes, mb.weight});
      }
      const std::vector<PortLoad> loads = port_loads(t.exchange, ports, across, o_.pxn);
      for (size_t i = 0; i < loads.size(); ++i) {
        const GpuState& y = gpus_[static_cast<size_t>(shared->members[i].gpu)];
        const PortLoad& l = loads[i];
        report_.nvlink_bytes += l.nvlink_out;
        report_.nic_bytes += l.nic_out;
        const size_t first = flows.size();
        for (auto [link, bytes] :
             {std::pair{y.nvlink_out, l.nvlink_out}, std::pair{y.nvlink_in, l.nvlink_in},
              std::pair{y.nic_out, l.nic_out}, std::pair{y.nic_in, l.nic_in}}) {
          if (bytes.value() <= 0) continue;
          auto same = std::find_if(flows.begin() + static_cast<std::ptrdiff_t>(first), flows.end(),
                                   [&](const auto& f) { return f.second == bytes; });
          if (same == flows.end()) {
            flows.push_back({{link}, bytes});
          } else {
            same->first.push_back(link);
          }
        }
      }
    }
    report_.flows += flows.size();
    if (flows.empty()) flows.push_back({{}, Bytes(0)});  // lands as an event, not re-entrantly
    shared->flows_left = flows.size();
    for (const auto& [links, bytes] : flows) {
      net_->send(
          links, bytes, SimTime{},
          [this, shared](SimTime) {
            if (--shared->flows_left > 0) return;
            // Handed back after the members go on: their next collectives take another.
            for (Member& done : shared->members) done.done();
            landing_free_.push_back(shared);
          },
          shared->priority);
    }
  }

  // The optimizer step, once the GPU's passes are done and its gradients reduced.
  void maybe_step(int64_t g) {
    GpuState& x = gpus_[static_cast<size_t>(g)];
    if (!x.optimizer_waiting || x.dp_busy || !x.dp_queue.empty()) return;
    x.optimizer_waiting = false;
    Task step;
    step.name = "optimizer step";
    step.duration = to_sim_time(stages_[static_cast<size_t>(x.stage)].sync.optimizer);
    x.refs.reset();  // the step is not a layer operator: it runs at its own duration
    x.gpu->run(std::vector<Task>{step}, [] {});
  }

  // The GPU's own size of a task of the shared graph (1 off the busiest rank's layers).
  double ratio(const GpuState& x, uint32_t id) const {
    if (!x.refs) return 1.0;
    const OpRef r = x.refs->at(id);
    if (r.layer < 0) return 1.0;
    const LayerState& L = layers_[static_cast<size_t>(r.layer)];
    if (L.rank_ratio.empty()) return 1.0;
    return L.rank_ratio[static_cast<size_t>(x.ep_rank)][static_cast<size_t>(r.op)];
  }

  Bytes own_bytes(const GpuState& x, const MemAction& a, Bytes amount) const {
    if (!a.tokens || amount.value() <= 0) return amount;
    const LayerState& L = layers_[static_cast<size_t>(a.layer)];
    if (L.rank_token_part.empty()) return amount;
    return amount - L.token_part + L.rank_token_part[static_cast<size_t>(x.ep_rank)];
  }

  StreamHooks stream_hooks(int64_t g) {
    StreamHooks h;
    h.on_start = [this, g](const Task& t) {
      GpuState& x = gpus_[static_cast<size_t>(g)];
      link_activity(x, t, +1);
      if (t.tag == 0) return;
      const StageState& st = stages_[static_cast<size_t>(x.stage)];
      const MemAction& a = st.actions[static_cast<size_t>(t.tag - 1)];
      const Bytes alloc = own_bytes(x, a, a.alloc);
      if (alloc.value() <= 0) return;
      x.current += alloc;
      x.peak = std::max(x.peak, x.current);
      sample_memory(x);
      if (x.current > capacity_ * o_.alpha) {
        ++report_.oom_count;
        if (report_.ooms.size() < o_.max_oom_events) {
          report_.ooms.push_back({iteration_, x.stage, a.layer, a.micro, x.local, 1, a.chunks,
                                  t.name, x.current, capacity_ * o_.alpha});
        }
      }
    };
    h.on_end = [this, g](const Task& t, SimTime start, SimTime end) {
      GpuState& x = gpus_[static_cast<size_t>(g)];
      link_activity(x, t, -1);
      if (o_.record_trace && x.local == 0) {
        if (report_.spans.size() < o_.max_trace_spans) {
          report_.spans.push_back(
              {x.stage, stream_name(t.stream), t.name, offset_ + start, offset_ + end});
        } else {
          report_.trace_truncated = true;
        }
      }
      if (t.tag == 0) return;
      const StageState& st = stages_[static_cast<size_t>(x.stage)];
      const MemAction& a = st.actions[static_cast<size_t>(t.tag - 1)];
      const Bytes release = own_bytes(x, a, a.release);
      if (release.value() <= 0) return;
      x.current -= release;
      sample_memory(x);
    };
    if (every_gpu()) {
      h.duration = [this, g](uint32_t id, const Task& t) {
        const double r = ratio(gpus_[static_cast<size_t>(g)], id);
        return r == 1.0 ? t.duration : to_sim_time(to_seconds(t.duration) * r);
      };
      h.communicate = [this, g](uint32_t id, const Task& t, std::function<void()> done) {
        const GpuState& x = gpus_[static_cast<size_t>(g)];
        const StageState& st = stages_[static_cast<size_t>(x.stage)];
        join(g, {x.stage, st.pass_serial, id, t.stream, 0}, t, ratio(x, id), std::move(done));
      };
      h.caller_started.assign(kStreams, false);
      for (int k : {kTpStream, kEpStream, kCpStream, kDpStream}) h.caller_started[k] = true;
      h.on_ready = [this, g](uint32_t id, const Task& t) {
        auto& ready = gpus_[static_cast<size_t>(g)].ready_collectives[t.stream];
        const std::pair<int, uint32_t> key{t.rank, id};
        ready.insert(std::lower_bound(ready.begin(), ready.end(), key), key);
        start_collectives(g, t.stream);
      };
      h.on_free = [this, g](int stream) { start_collectives(g, stream); };
    }
    return h;
  }

  // Starts, on every member at once, the first collective of GPU g's group on `stream` that all
  // members have ready while their streams are free. A collective never holds a member while
  // it waits for another, so GPUs that run ahead (lighter experts) cannot deadlock with the
  // ones behind, and each group issues its collectives in one order.
  void start_collectives(int64_t g, int stream) {
    const GpuState& x = gpus_[static_cast<size_t>(g)];
    const std::vector<int64_t>& peers = *x.peers[stream];
    for (const auto& ready : x.ready_collectives[stream]) {
      const std::pair<int, uint32_t> key = ready;  // erased below
      const bool startable = std::all_of(peers.begin(), peers.end(), [&](int64_t p) {
        const GpuState& y = gpus_[static_cast<size_t>(p)];
        const auto& ready = y.ready_collectives[stream];
        return y.gpu->stream_free(stream) && std::binary_search(ready.begin(), ready.end(), key);
      });
      if (!startable) continue;
      for (int64_t p : peers) {
        auto& ready = gpus_[static_cast<size_t>(p)].ready_collectives[stream];
        ready.erase(std::lower_bound(ready.begin(), ready.end(), key));
      }
      for (int64_t p : peers) gpus_[static_cast<size_t>(p)].gpu->start(key.second);
      return;
    }
  }

  // Whether a communication task crosses the NIC (tasks are built on the stage's first GPU).
  bool on_nic(const GpuState& x, const Task& t) const {
    return !t.links.empty() &&
           t.links.front() ==
               gpus_[static_cast<size_t>(stages_[static_cast<size_t>(x.stage)].first_gpu)].nic_out;
  }

  void link_activity(GpuState& x, const Task& t, int delta) {
    if (t.links.empty()) return;
    const bool nic = on_nic(x, t);
    int& active = nic ? x.active_nic : x.active_nvlink;
    SimTime& since = nic ? x.nic_since : x.nvlink_since;
    const SimTime now = queue_->now();
    if (o_.record_trace && x.local == 0) {
      report_.links.push_back({x.stage, nic, offset_ + now, active + delta});
    }
    if (delta > 0 && active++ == 0) since = now;
    if (delta < 0 && --active == 0) {
      StageReport& r = report_.stages[static_cast<size_t>(x.stage)];
      (nic ? r.nic_busy : r.nvlink_busy) +=
          to_seconds(now - since) * (1.0 / static_cast<double>(per_stage_));
    }
  }

  void sample_memory(const GpuState& x) {
    if (!o_.record_trace || x.local != 0) return;
    const SimTime now = queue_ ? queue_->now() : SimTime{};
    report_.memory.push_back({x.stage, offset_ + now, x.current});
  }

  static Task compute_task(const char* name, int stream, Seconds time) {
    Task t;
    t.name = name;
    t.stream = stream;
    t.duration = to_sim_time(time);
    return t;
  }

  int priority_of(int stream) const {
    if (!o_.comm_priorities) return 0;
    switch (stream) {
      case kCpStream:
        return 2;
      case kDpStream:
        return 3;
      default:
        return 0;  // EP and TP first
    }
  }
  static constexpr int kPipelinePriority = 1;

  // A communication task of `time` on the link its group crosses: sized so that alone it takes
  // exactly the planner's time.
  Task comm_task(const StageState& st, const char* name, int stream, Seconds time, bool nic,
                 Exchange exchange = Exchange::kRing) {
    if (!std::isfinite(time.value()) || time.value() < 0)
      throw std::logic_error(std::string("communication '") + name + "' has no finite time");
    Task t;
    t.name = name;
    t.stream = stream;
    const GpuState& first = gpus_[static_cast<size_t>(st.first_gpu)];
    t.links = {nic ? first.nic_out : first.nvlink_out};
    t.bytes = Bytes(time.value() * (nic ? ctx_.links.inter : ctx_.links.intra).value());
    t.priority = priority_of(stream);
    t.exchange = exchange;
    return t;
  }

  // The exchange a layer op's collective runs: a ring, or an all-to-all whose heavy side is the
  // receiver for the dispatch's forward and the combine's backward (tokens and their gradients
  // go to the hot experts' rank), the sender otherwise.
  static Exchange exchange_of(const LayerOp& op, bool backward) {
    if (op.pattern == CommPattern::kRing) return Exchange::kRing;
    return op.receives_tokens != backward ? Exchange::kAllToAllIntoHeavy
                                          : Exchange::kAllToAllFromHeavy;
  }

  // Appends one op (a slice of it) and returns its index.
  // MoNTA (experts tensor-parallel with EP): the expert all-to-all as its pieces. O1 sends 1/t of
  // the tokens across (EP stream, on the link the group crosses) and all-gathers the rest inside
  // the node (TP stream, NVLink); O2 and O3 cut that into N chunks whose all-to-all, all-gather
  // and token-order D2D copy pipeline: O2 copies on the all-gather's stream, O3 on the copy
  // engine (MoNTA Algorithms 1 and 2). Each chunk pays the per-chunk overhead on its all-to-all;
  // what the planner's op holds beyond MoNTA's time (FCDA chunk latencies) goes on the first.
  uint32_t add_monta(std::vector<Task>& g, const StageState& st, const LayerOp& op, double scale,
                     double load, bool backward, std::vector<uint32_t> after) {
    monta::Problem prob = expert_alltoall_problem(ctx_, plan_);
    prob.volume = prob.volume * (load / ctx_.skew.imbalance(m_, *p_.ep));
    const bool nic = crosses_nodes(ctx_, p_, OpKind::kEp);
    const bool o3 = plan_.alltoall == monta::Strategy::kO3;
    const int64_t n = plan_.alltoall == monta::Strategy::kO1 ? 1 : plan_.alltoall_chunks;
    const monta::ChunkCosts c = monta::chunk_costs(prob, n);
    const Seconds modeled =
        plan_.alltoall == monta::Strategy::kO1
            ? monta::o1_time(prob)
            : monta::at_chunks(prob, o3 ? monta::Pipelining::kO3 : monta::Pipelining::kO2, n).time;
    const Seconds residual = std::max(Seconds(0), op.time - modeled);
    const Seconds overhead = n > 1 ? prob.chunk_overhead : Seconds(0);
    auto push = [&](Task t, std::vector<uint32_t> deps) {
      t.after = std::move(deps);
      return append(g, std::move(t));
    };
    uint32_t last = 0;
    for (int64_t j = 0; j < n; ++j) {
      const Seconds aa = c.alltoall + overhead + (j == 0 ? residual : Seconds(0));
      const uint32_t a = push(
          comm_task(st, "MoNTA all-to-all", kEpStream, aa * scale, nic, exchange_of(op, backward)),
          after);
      last = push(comm_task(st, "MoNTA all-gather", kTpStream, c.allgather * scale, false), {a});
      if (plan_.alltoall != monta::Strategy::kO1) {
        last = push(compute_task("MoNTA D2D copy", o3 ? kCopyStream : kTpStream, c.d2d * scale),
                    {last});
      }
    }
    return last;
  }

  uint32_t add_op(std::vector<Task>& g, const StageState& st, const LayerOp& op, double scale,
                  double compute_scale, std::vector<uint32_t> after, double load = 1.0,
                  bool backward = false) {
    if (op.kind == OpKind::kEp && *p_.etp > 1 && *p_.ep > 1 &&
        plan_.alltoall != monta::Strategy::kBaseline) {
      return add_monta(g, st, op, scale, load, backward, std::move(after));
    }
    Task t = op.kind == OpKind::kCompute
                 ? compute_task(op.name, kCompute, op.time * (scale * compute_scale))
                 : comm_task(st, op.name, stream_of(op.kind),
                             (every_gpu() ? op.port_time() : op.time) * scale,
                             crosses_nodes(ctx_, p_, op.kind), exchange_of(op, backward));
    t.after = std::move(after);
    return append(g, std::move(t));
  }

  // Appends a task of the pass being built, naming the layer operator it runs (ref_).
  uint32_t append(std::vector<Task>& g, Task t) {
    g.push_back(std::move(t));
    ++report_.tasks;
    if (every_gpu()) {
      StageState& st = stages_[static_cast<size_t>(building_stage_)];
      st.refs.resize(g.size(), OpRef{});
      st.refs.back() = ref_;
    }
    return static_cast<uint32_t>(g.size() - 1);
  }

  int64_t add_action(StageState& st, MemAction a) {
    st.actions.push_back(a);
    return static_cast<int64_t>(st.actions.size());
  }

  void run_pass(const PassId& id, std::function<void()> done) {
    StageState& st = stages_[static_cast<size_t>(id.stage)];
    st.actions.clear();
    st.refs.clear();
    building_stage_ = id.stage;
    ref_ = OpRef{};
    const int64_t v = *p_.vpp;
    const int64_t begin = st.first_layer + st.num_layers * id.chunk / v;
    const int64_t end = st.first_layer + st.num_layers * (id.chunk + 1) / v;
    const int64_t slices = plan_.overlap ? kOverlapSlices : 1;
    const double share = 1.0 / static_cast<double>(slices);
    const bool full = plan_.recompute == Recompute::kFull;
    const bool last_stage = id.stage == *p_.pp - 1 && id.chunk == v - 1;
    std::vector<Task> g;
    std::vector<int64_t> tail(static_cast<size_t>(slices), -1);  // last task of each slice
    auto after_tail = [&](int64_t j) {
      return tail[static_cast<size_t>(j)] < 0
                 ? std::vector<uint32_t>{}
                 : std::vector<uint32_t>{static_cast<uint32_t>(tail[static_cast<size_t>(j)])};
    };
    auto all_tails = [&] {
      std::vector<uint32_t> out;
      for (int64_t t : tail)
        if (t >= 0) out.push_back(static_cast<uint32_t>(t));
      return out;
    };
    auto head_task = [&](const char* name, Seconds time) {
      if (time.value() <= 0) return;
      Task t = compute_task(name, kCompute, time);
      t.after = all_tails();
      append(g, std::move(t));
      std::fill(tail.begin(), tail.end(), static_cast<int64_t>(g.size() - 1));
    };
    // ZeRO-3: each layer's weights are gathered before its first operator, the next layer's
    // gather running while this one computes (FSDP's prefetch of one layer); a pass's compute
    // stalls on the DP stream when the gathers cannot keep up.
    std::vector<int64_t> gather_of;  // task index by layer - begin
    std::vector<uint32_t> gate;      // what the next chain's first operators also wait for
    if (plan_.zero_stage >= 3 && st.sync.all_gather.value() > 0 && end > begin) {
      gather_of.assign(static_cast<size_t>(end - begin), -1);
      const Seconds per_layer =
          st.sync.all_gather * (1.0 / static_cast<double>(v)) / static_cast<double>(end - begin);
      for (int64_t k = 0; k < end - begin; ++k) {
        const int64_t l = id.forward ? begin + k : end - 1 - k;
        append(g, comm_task(st, "ZeRO-3 parameter all-gather", kDpStream, per_layer,
                            st.sync.crosses_nodes));
        gather_of[static_cast<size_t>(l - begin)] = static_cast<int64_t>(g.size() - 1);
      }
    }
    auto gate_on = [&](int64_t layer) {
      gate.clear();
      if (gather_of.empty()) return;
      gate.push_back(static_cast<uint32_t>(gather_of[static_cast<size_t>(layer - begin)]));
    };
    // Rematerialization (MegaScale-MoE Sec. 4.1): backward gathers a layer's inputs again
    // instead of keeping them. `remat` holds, per slice, the gather the next chain's first
    // compute behind a communication (the block whose weight gradients need those inputs)
    // waits for; `last_comm` the last communication of the chain just built, per slice, which
    // the gather for the layer below follows, so it runs while this layer's remaining backward
    // computes rather than ahead of its own collectives.
    std::vector<uint32_t> remat;
    std::vector<int64_t> last_comm(static_cast<size_t>(slices), -1);
    // Runs layer `layer`'s `ops` (its forward list, or reversed: backward) as `slices` pipelined
    // chains continuing from the tails. `alloc_first` and `alloc_token` tag the first op and the
    // token op of slice 0; `release` tags slice (slices - 1)'s last op.
    auto chain = [&](int64_t layer, bool reversed, double compute_scale, int64_t token_op,
                     int64_t alloc_first, int64_t alloc_token, int64_t release) {
      const LayerState& L = layers_[static_cast<size_t>(layer)];
      const std::vector<LayerOp>& ops = reversed ? L.backward : L.forward;
      // Slices pipeline inside a layer; a layer starts once the one before has ended, so its
      // memory is released before the next allocates (and each layer pays its own pipeline
      // fill, as the planner's overlap residual has it).
      const int64_t barrier = tail[static_cast<size_t>(slices - 1)];
      std::fill(last_comm.begin(), last_comm.end(), barrier);
      for (int64_t j = 0; j < slices; ++j) {
        bool remat_pending = !remat.empty();
        for (size_t q = 0; q < ops.size(); ++q) {
          std::vector<uint32_t> after =
              q > 0 ? after_tail(j)
                    : (barrier < 0 ? std::vector<uint32_t>{}
                                   : std::vector<uint32_t>{static_cast<uint32_t>(barrier)});
          if (q == 0) after.insert(after.end(), gate.begin(), gate.end());
          if (remat_pending && q > 0 && ops[q].kind == OpKind::kCompute &&
              ops[q - 1].kind != OpKind::kCompute) {
            after.push_back(remat[static_cast<size_t>(j)]);
            remat_pending = false;
          }
          const size_t forward_index = reversed ? ops.size() - 1 - q : q;
          ref_ = {static_cast<int32_t>(layer), static_cast<int32_t>(forward_index)};
          const uint32_t i =
              add_op(g, st, ops[q], share, compute_scale, std::move(after), L.load, reversed);
          ref_ = OpRef{};
          if (j == 0 && q == 0 && alloc_first) g[i].tag = alloc_first;
          if (j == 0 && static_cast<int64_t>(q) == token_op && alloc_token) g[i].tag = alloc_token;
          if (j == slices - 1 && q + 1 == ops.size() && release) g[i].tag = release;
          if (ops[q].kind != OpKind::kCompute) last_comm[static_cast<size_t>(j)] = i;
          tail[static_cast<size_t>(j)] = i;
        }
      }
    };
    // Layer `layer`'s rematerializing gather, per slice, after the last communication of the
    // chain built before it (or the tails, first in a pass).
    auto rematerialize = [&](int64_t layer) {
      remat.clear();
      const LayerState& L = layers_[static_cast<size_t>(layer)];
      if (plan_.recompute != Recompute::kRematerialize || L.forward_comm.value() <= 0) return;
      const LayerOp gather{"rematerialized all-gather", OpKind::kEp, L.forward_comm * 0.5};
      for (int64_t j = 0; j < slices; ++j) {
        const int64_t before = last_comm[static_cast<size_t>(j)];
        remat.push_back(add_op(
            g, st, gather, share, 1.0,
            before < 0 ? after_tail(j) : std::vector<uint32_t>{static_cast<uint32_t>(before)}));
      }
    };
    ++st.pass_serial;

    if (id.forward) {
      for (int64_t l = begin; l < end; ++l) {
        const LayerState& L = layers_[static_cast<size_t>(l)];
        const int64_t a_first = add_action(
            st, {l, id.micro, L.chunks, full ? L.checkpoint : L.sequence_part, Bytes(0)});
        const int64_t a_token =
            full ? 0 : add_action(st, {l, id.micro, L.chunks, L.token_part, Bytes(0), true});
        gate_on(l);
        chain(l, false, 1.0, L.token_op, a_first, a_token, 0);
      }
      if (last_stage) head_task("output head + loss", output_head_time(ctx_, plan_));
    } else {
      if (last_stage) head_task("output head + loss backward", output_head_time(ctx_, plan_) * 2.0);
      rematerialize(end - 1);
      for (int64_t l = end - 1; l >= begin; --l) {
        const LayerState& L = layers_[static_cast<size_t>(l)];
        const Bytes held =
            full ? L.checkpoint + L.sequence_part + L.token_part : L.sequence_part + L.token_part;
        gate_on(l);
        if (full) {
          const int64_t a_first =
              add_action(st, {l, id.micro, L.chunks, L.sequence_part, Bytes(0)});
          const int64_t a_token =
              add_action(st, {l, id.micro, L.chunks, L.token_part, Bytes(0), true});
          chain(l, false, 1.0, L.token_op, a_first, a_token, 0);
        } else if (plan_.recompute != Recompute::kNone) {
          // Selective recompute and rematerialization redo the element-wise work (5 % of the
          // forward); rematerialization also replays the all-gather half of TP/EP
          // communication (`remat`, issued during the layer above's backward).
          const LayerOp redo{"selective recompute", OpKind::kCompute, L.forward_compute * 0.05};
          for (int64_t j = 0; j < slices; ++j)
            tail[static_cast<size_t>(j)] = add_op(g, st, redo, share, 1.0, after_tail(j));
        }
        const int64_t a_release = add_action(st, {l, id.micro, L.chunks, Bytes(0), held, true});
        chain(l, true, 2.0, -1, 0, 0, a_release);
        if (l > begin) rematerialize(l - 1);
      }
    }

    // Data-parallel synchronisation, asynchronous as Megatron overlaps it: ZeRO-1 reduce-
    // scatters a model chunk's gradients from the start of its last backward (with
    // interleaving, chunk v - 1's while the others still run), ZeRO-2 from the start of every
    // backward (the optimizer step waits for them). ZeRO-3's weight gathers are above.
    const double per_chunk = 1.0 / static_cast<double>(v);
    if (!id.forward && (plan_.zero_stage >= 2 || id.micro == microbatches_ - 1)) {
      for (int64_t k = st.first_gpu; k < st.first_gpu + st.num_gpus; ++k) {
        // Hierarchical (App. A.1) for SP-replicated weights: in the node first, then across.
        dp_async(k, "DP gradient reduce-scatter (in node)",
                 st.sync.reduce_scatter_in_node * per_chunk, {}, false);
        dp_async(k, "DP gradient reduce-scatter",
                 (st.sync.reduce_scatter - st.sync.reduce_scatter_in_node) * per_chunk);
      }
    }
    // Every GPU of the stage runs the graph; the pass ends when the last one is through (the
    // first pass of an iteration not before that GPU's parameters are in).
    // append() kept one OpRef per task in every-GPU mode; the graph's GPUs share them.
    std::shared_ptr<const std::vector<OpRef>> refs;
    if (every_gpu()) refs = std::make_shared<const std::vector<OpRef>>(std::move(st.refs));
    auto graph = std::make_shared<const TaskGraph>(std::move(g));
    report_.tasks += graph->size() * static_cast<uint64_t>(st.num_gpus - 1);
    st.gpus_left = st.num_gpus;
    st.pass_done = std::move(done);
    for (int64_t k = st.first_gpu; k < st.first_gpu + st.num_gpus; ++k) {
      std::function<void()> finish = [this, s = id.stage] {
        StageState& y = stages_[static_cast<size_t>(s)];
        if (--y.gpus_left == 0) std::exchange(y.pass_done, {})();
      };
      if (id.forward && id.micro == 0) {  // the chunk's first forward this iteration
        finish = [this, k, chunk = id.chunk, finish = std::move(finish)]() mutable {
          GpuState& x = gpus_[static_cast<size_t>(k)];
          if (x.chunks_gathered <= chunk) {
            x.deferred_done[static_cast<size_t>(chunk)] = std::move(finish);
          } else {
            finish();
          }
        };
      }
      GpuState& x = gpus_[static_cast<size_t>(k)];
      x.refs = refs;
      x.gpu->run(graph, std::move(finish));
    }
  }

  const TimeContext& ctx_;
  const ModelSpec& m_;
  const PlanChoice& plan_;
  const ParallelConfig& p_;
  const TrainingOptions& o_;
  RoutingGenerator routing_;
  Bytes capacity_;
  MemoryReport memory_;
  memfine::LayerShape shape_;
  int64_t microbatches_ = 1;
  TrainingReport report_;

  EventQueue* queue_ = nullptr;
  FlowNetwork* net_ = nullptr;
  int64_t iteration_ = 0;
  SimTime offset_;
  int64_t per_stage_ = 1;  // GPUs simulated per stage
  int64_t gpus_per_node_ = 1;
  int64_t group_size_[kStreams] = {};
  std::vector<Seconds> compute_total_;  // per GPU, all iterations
  std::vector<Bytes> peak_total_;
  std::vector<StageState> stages_;
  std::vector<GpuState> gpus_;
  std::vector<LayerState> layers_;
  std::map<CollectiveKey, Joining> joining_;
  CollectiveKey last_key_;          // the collective join() touched last, while being joined
  Joining* last_joined_ = nullptr;  // (a map's nodes stay put)
  std::vector<std::pair<FlowNetwork::Links, Bytes>> flows_scratch_;  // join's, kept between calls
  std::vector<std::unique_ptr<Joining>> landing_;  // collectives whose flows are in flight
  std::vector<Joining*> landing_free_;             // of those, the ones that have landed
  int64_t building_stage_ = 0;                     // the stage whose pass graph is being built
  OpRef ref_;  // the layer operator the tasks being appended run
};

}  // namespace

TrainingReport simulate_training(const TimeContext& ctx, const ClusterSpec& cluster,
                                 const PlanChoice& plan, const TrainingOptions& options) {
  if (options.iterations < 1) throw std::invalid_argument("simulate at least one iteration");
  if (plan.offload) throw std::invalid_argument("offload plans run in the APTMoE simulator");
  return Training(ctx, cluster, plan, options).run();
}

}  // namespace moe::sim
