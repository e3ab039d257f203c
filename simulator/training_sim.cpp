#include "simulator/training_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <stdexcept>

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
};

struct DpCollective {
  const char* name = "";
  Seconds time;
  std::function<void()> then;
};

// What a task does to memory, and where to report it.
struct MemAction {
  int64_t layer = 0, micro = 0, chunks = 1;
  Bytes alloc;    // at start
  Bytes release;  // at end
};

struct StageState {
  int nvlink = 0, nic = 0;  // link indices
  std::unique_ptr<GpuStreams> gpu;
  Bytes static_bytes, current, peak;
  double max_received = 0;  // MACT's s'_max for the stage
  int64_t first_layer = 0, num_layers = 0;
  DpSync sync;
  int active_nvlink = 0, active_nic = 0;
  SimTime nvlink_since, nic_since;
  std::vector<MemAction> actions;  // of the running pass graph; tags index it (1-based)
  // Asynchronous data-parallel collectives, one after another on the DP stream.
  std::deque<DpCollective> dp_queue;
  bool dp_busy = false;
  bool params_pending = false;          // the iteration's parameter all-gather is in flight
  std::function<void()> deferred_done;  // the first pass, finished before its parameters
  bool optimizer_waiting = false;       // the last pass is done; gradients still reducing
};

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
    shape_ = moe_layer_shape(m_, p_, ctx.seq_len, request.bytes_per_element);
    microbatches_ = *p_.gbs / (*p_.mbs * *p_.dp);
    report_.stages.resize(static_cast<size_t>(*p_.pp));
    report_.chunk_histogram.assign(static_cast<size_t>(o.chunk_bins.back() + 1), 0);
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
        double received = static_cast<double>(ctx_.seq_len);
        if (L.moe) {
          L.load = routing_.busiest_load(l, it, *p_.ep);
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
        L.forward = layer_forward_ops(ctx_, plan_, ctx_.params.layers[static_cast<size_t>(l)],
                                      L.moe, L.load, L.chunks);
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
    const int64_t span = boundary_span(p_);
    PipelineHooks hooks;
    hooks.boundary_priority = o_.comm_priorities ? kPipelinePriority : 0;
    for (int64_t s = 0; s < *p_.pp; ++s) {
      StageState& st = stages_[static_cast<size_t>(s)];
      st.nvlink = net.add_link(ctx_.links.intra);
      st.nic = net.add_link(ctx_.links.inter);
      const StageMemory& sm = memory_.stages[static_cast<size_t>(s)];
      st.static_bytes = st.current = st.peak = sm.static_bytes;
      st.max_received = sm.max_received_tokens;
      st.first_layer = sm.first_layer;
      st.num_layers = sm.num_layers;
      st.sync = dp_sync_times(ctx_, plan_, s);
      st.gpu = std::make_unique<GpuStreams>(queue, net, kStreams, stream_hooks(s));
      const int link = ctx_.links.crosses_nodes(span) ? st.nic : st.nvlink;
      hooks.down_links.push_back({link});
      hooks.up_links.push_back({link});
      sample_memory(s);
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
    passes_done_.assign(static_cast<size_t>(*p_.pp), 0);
    hooks.run = [this](const PassId& id, std::function<void()> done) {
      run_pass(id, std::move(done));
    };
    hooks.on_stage_done = [this](int64_t s) {
      StageState& st = stages_[static_cast<size_t>(s)];
      st.optimizer_waiting = true;
      maybe_step(s);
    };
    // Each stage gathers its parameters for this iteration at the start (Megatron's distributed
    // optimizer with --overlap-param-gather): the first pass may run meanwhile but does not end
    // before they are in.
    for (int64_t s = 0; s < *p_.pp; ++s) {
      StageState& st = stages_[static_cast<size_t>(s)];
      // ZeRO-3 gathers weights for every pass instead (in run_pass).
      if (st.sync.all_gather.value() <= 0 || plan_.zero_stage >= 3) continue;
      st.params_pending = true;
      dp_async(s, "DP parameter all-gather", st.sync.all_gather, [this, s] {
        StageState& x = stages_[static_cast<size_t>(s)];
        x.params_pending = false;
        if (x.deferred_done) std::exchange(x.deferred_done, {})();
      });
    }
    PipelineDriver driver(spec, queue, net, std::move(hooks));
    driver.start();
    report_.events += queue.run();
    const PipelineResult pr = driver.finish();
    const SimTime end = queue.now();
    for (int64_t s = 0; s < *p_.pp; ++s) {
      StageState& st = stages_[static_cast<size_t>(s)];
      StageReport& r = report_.stages[static_cast<size_t>(s)];
      r.compute_busy += to_seconds(st.gpu->busy(kCompute));
      for (int k = 0; k < kStreams; ++k) r.waited[k] += to_seconds(st.gpu->waited_on()[k]);
      r.pipeline_wait += to_seconds(end - pr.busy[static_cast<size_t>(s)]);
      r.static_bytes = st.static_bytes;
      r.peak_bytes = std::max(r.peak_bytes, st.peak);
    }
    if (o_.record_trace) {
      for (const Span& sp : pr.spans) {
        report_.spans.push_back({sp.stage, sp.lane == "send" ? "pp send" : "passes", sp.name,
                                 offset_ + sp.start, offset_ + sp.end});
      }
    }
    return end;
  }

  // Queues a data-parallel collective on the stage's DP stream; `then` runs when it lands.
  void dp_async(int64_t s, const char* name, Seconds time, std::function<void()> then = {}) {
    if (time.value() <= 0) {
      if (then) then();
      return;
    }
    stages_[static_cast<size_t>(s)].dp_queue.push_back({name, time, std::move(then)});
    dp_next(s);
  }

  void dp_next(int64_t s) {
    StageState& st = stages_[static_cast<size_t>(s)];
    if (st.dp_busy || st.dp_queue.empty()) return;
    DpCollective next = std::move(st.dp_queue.front());
    st.dp_queue.pop_front();
    st.dp_busy = true;
    const Task t = comm_task(st, next.name, kDpStream, next.time, st.sync.crosses_nodes);
    const SimTime start = queue_->now();
    link_activity(st, t, +1);
    net_->send(
        t.links, t.bytes, SimTime{},
        [this, s, t, start, then = std::move(next.then)](SimTime end) {
          StageState& x = stages_[static_cast<size_t>(s)];
          link_activity(x, t, -1);
          if (o_.record_trace)
            report_.spans.push_back({s, "dp", t.name, offset_ + start, offset_ + end});
          x.dp_busy = false;
          if (then) then();
          dp_next(s);
          maybe_step(s);
        },
        t.priority);
  }

  // The optimizer step, once the stage's passes are done and its gradients reduced.
  void maybe_step(int64_t s) {
    StageState& st = stages_[static_cast<size_t>(s)];
    if (!st.optimizer_waiting || st.dp_busy || !st.dp_queue.empty()) return;
    st.optimizer_waiting = false;
    Task step;
    step.name = "optimizer step";
    step.duration = to_sim_time(st.sync.optimizer);
    st.gpu->run({step}, [] {});
  }

  StreamHooks stream_hooks(int64_t s) {
    StreamHooks h;
    h.on_start = [this, s](const Task& t) {
      StageState& st = stages_[static_cast<size_t>(s)];
      link_activity(st, t, +1);
      if (t.tag == 0) return;
      const MemAction& a = st.actions[static_cast<size_t>(t.tag - 1)];
      if (a.alloc.value() <= 0) return;
      st.current += a.alloc;
      st.peak = std::max(st.peak, st.current);
      sample_memory(s);
      if (st.current > capacity_ * o_.alpha) {
        ++report_.oom_count;
        if (report_.ooms.size() < o_.max_oom_events) {
          report_.ooms.push_back({iteration_, s, a.layer, a.micro, 1, a.chunks, t.name, st.current,
                                  capacity_ * o_.alpha});
        }
      }
    };
    h.on_end = [this, s](const Task& t, SimTime start, SimTime end) {
      StageState& st = stages_[static_cast<size_t>(s)];
      link_activity(st, t, -1);
      if (o_.record_trace) {
        if (report_.spans.size() < o_.max_trace_spans) {
          report_.spans.push_back(
              {s, stream_name(t.stream), t.name, offset_ + start, offset_ + end});
        } else {
          report_.trace_truncated = true;
        }
      }
      if (t.tag == 0) return;
      const MemAction& a = st.actions[static_cast<size_t>(t.tag - 1)];
      if (a.release.value() <= 0) return;
      st.current -= a.release;
      sample_memory(s);
    };
    return h;
  }

  void link_activity(StageState& st, const Task& t, int delta) {
    if (t.links.empty()) return;
    const bool nic = t.links.front() == st.nic;
    int& active = nic ? st.active_nic : st.active_nvlink;
    SimTime& since = nic ? st.nic_since : st.nvlink_since;
    const SimTime now = queue_->now();
    if (o_.record_trace) {
      report_.links.push_back({&st - stages_.data(), nic, offset_ + now, active + delta});
    }
    if (delta > 0 && active++ == 0) since = now;
    if (delta < 0 && --active == 0) {
      StageReport& r = report_.stages[static_cast<size_t>(&st - stages_.data())];
      (nic ? r.nic_busy : r.nvlink_busy) += to_seconds(now - since);
    }
  }

  void sample_memory(int64_t s) {
    if (!o_.record_trace) return;
    const SimTime now = queue_ ? queue_->now() : SimTime{};
    report_.memory.push_back({s, offset_ + now, stages_[static_cast<size_t>(s)].current});
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
  Task comm_task(const StageState& st, const char* name, int stream, Seconds time, bool nic) {
    if (!std::isfinite(time.value()) || time.value() < 0)
      throw std::logic_error(std::string("communication '") + name + "' has no finite time");
    Task t;
    t.name = name;
    t.stream = stream;
    t.links = {nic ? st.nic : st.nvlink};
    t.bytes = Bytes(time.value() * (nic ? ctx_.links.inter : ctx_.links.intra).value());
    t.priority = priority_of(stream);
    return t;
  }

  // Appends one op (a slice of it) and returns its index.
  // MoNTA (experts tensor-parallel with EP): the expert all-to-all as its pieces. O1 sends 1/t of
  // the tokens across (EP stream, on the link the group crosses) and all-gathers the rest inside
  // the node (TP stream, NVLink); O2 and O3 cut that into N chunks whose all-to-all, all-gather
  // and token-order D2D copy pipeline: O2 copies on the all-gather's stream, O3 on the copy
  // engine (MoNTA Algorithms 1 and 2). Each chunk pays the per-chunk overhead on its all-to-all;
  // what the planner's op holds beyond MoNTA's time (FCDA chunk latencies) goes on the first.
  uint32_t add_monta(std::vector<Task>& g, const StageState& st, const LayerOp& op, double scale,
                     double load, std::vector<uint32_t> after) {
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
      g.push_back(std::move(t));
      ++report_.tasks;
      return static_cast<uint32_t>(g.size() - 1);
    };
    uint32_t last = 0;
    for (int64_t j = 0; j < n; ++j) {
      const Seconds aa = c.alltoall + overhead + (j == 0 ? residual : Seconds(0));
      const uint32_t a = push(comm_task(st, "MoNTA all-to-all", kEpStream, aa * scale, nic), after);
      last = push(comm_task(st, "MoNTA all-gather", kTpStream, c.allgather * scale, false), {a});
      if (plan_.alltoall != monta::Strategy::kO1) {
        last = push(compute_task("MoNTA D2D copy", o3 ? kCopyStream : kTpStream, c.d2d * scale),
                    {last});
      }
    }
    return last;
  }

  uint32_t add_op(std::vector<Task>& g, const StageState& st, const LayerOp& op, double scale,
                  double compute_scale, std::vector<uint32_t> after, double load = 1.0) {
    if (op.kind == OpKind::kEp && *p_.etp > 1 && *p_.ep > 1 &&
        plan_.alltoall != monta::Strategy::kBaseline) {
      return add_monta(g, st, op, scale, load, std::move(after));
    }
    Task t = op.kind == OpKind::kCompute
                 ? compute_task(op.name, kCompute, op.time * (scale * compute_scale))
                 : comm_task(st, op.name, stream_of(op.kind), op.time * scale,
                             crosses_nodes(ctx_, p_, op.kind));
    t.after = std::move(after);
    g.push_back(std::move(t));
    ++report_.tasks;
    return static_cast<uint32_t>(g.size() - 1);
  }

  int64_t add_action(StageState& st, MemAction a) {
    st.actions.push_back(a);
    return static_cast<int64_t>(st.actions.size());
  }

  void run_pass(const PassId& id, std::function<void()> done) {
    StageState& st = stages_[static_cast<size_t>(id.stage)];
    st.actions.clear();
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
      g.push_back(compute_task(name, kCompute, time));
      g.back().after = all_tails();
      ++report_.tasks;
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
        g.push_back(comm_task(st, "ZeRO-3 parameter all-gather", kDpStream, per_layer,
                              st.sync.crosses_nodes));
        ++report_.tasks;
        gather_of[static_cast<size_t>(l - begin)] = static_cast<int64_t>(g.size() - 1);
      }
    }
    auto gate_on = [&](int64_t layer) {
      gate.clear();
      if (gather_of.empty()) return;
      gate.push_back(static_cast<uint32_t>(gather_of[static_cast<size_t>(layer - begin)]));
    };
    // Runs `ops` as `slices` pipelined chains continuing from the tails. `alloc_first` and
    // `alloc_token` tag the first op and the token op of slice 0; `release` tags slice
    // (slices - 1)'s last op.
    auto chain = [&](const std::vector<LayerOp>& ops, double compute_scale, int64_t token_op,
                     int64_t alloc_first, int64_t alloc_token, int64_t release, double load) {
      // Slices pipeline inside a layer; a layer starts once the one before has ended, so its
      // memory is released before the next allocates (and each layer pays its own pipeline
      // fill, as the planner's overlap residual has it).
      const int64_t barrier = tail[static_cast<size_t>(slices - 1)];
      for (int64_t j = 0; j < slices; ++j) {
        for (size_t q = 0; q < ops.size(); ++q) {
          std::vector<uint32_t> after =
              q > 0 ? after_tail(j)
                    : (barrier < 0 ? std::vector<uint32_t>{}
                                   : std::vector<uint32_t>{static_cast<uint32_t>(barrier)});
          if (q == 0) after.insert(after.end(), gate.begin(), gate.end());
          const uint32_t i = add_op(g, st, ops[q], share, compute_scale, std::move(after), load);
          if (j == 0 && q == 0 && alloc_first) g[i].tag = alloc_first;
          if (j == 0 && static_cast<int64_t>(q) == token_op && alloc_token) g[i].tag = alloc_token;
          if (j == slices - 1 && q + 1 == ops.size() && release) g[i].tag = release;
          tail[static_cast<size_t>(j)] = i;
        }
      }
    };
    const int64_t passes_per_iteration = 2 * microbatches_ * v;
    const int64_t pass_index = passes_done_[static_cast<size_t>(id.stage)]++;
    const bool first_pass = pass_index == 0;
    const bool last_pass = pass_index == passes_per_iteration - 1;

    if (id.forward) {
      for (int64_t l = begin; l < end; ++l) {
        const LayerState& L = layers_[static_cast<size_t>(l)];
        const int64_t a_first = add_action(
            st, {l, id.micro, L.chunks, full ? L.checkpoint : L.sequence_part, Bytes(0)});
        const int64_t a_token =
            full ? 0 : add_action(st, {l, id.micro, L.chunks, L.token_part, Bytes(0)});
        gate_on(l);
        chain(L.forward, 1.0, L.token_op, a_first, a_token, 0, L.load);
      }
      if (last_stage) head_task("output head + loss", output_head_time(ctx_, plan_));
    } else {
      if (last_stage) head_task("output head + loss backward", output_head_time(ctx_, plan_) * 2.0);
      for (int64_t l = end - 1; l >= begin; --l) {
        const LayerState& L = layers_[static_cast<size_t>(l)];
        const Bytes held =
            full ? L.checkpoint + L.sequence_part + L.token_part : L.sequence_part + L.token_part;
        gate_on(l);
        if (full) {
          const int64_t a_first =
              add_action(st, {l, id.micro, L.chunks, L.sequence_part, Bytes(0)});
          const int64_t a_token = add_action(st, {l, id.micro, L.chunks, L.token_part, Bytes(0)});
          chain(L.forward, 1.0, L.token_op, a_first, a_token, 0, L.load);
        } else if (plan_.recompute != Recompute::kNone) {
          // Selective recompute and rematerialization redo the element-wise work (5 % of the
          // forward); rematerialization also replays the all-gather half of TP/EP
          // communication, beside the gradient computation.
          std::vector<LayerOp> redo = {
              {"selective recompute", OpKind::kCompute, L.forward_compute * 0.05}};
          if (plan_.recompute == Recompute::kRematerialize && L.forward_comm.value() > 0) {
            redo.push_back({"rematerialized all-gather", OpKind::kEp, L.forward_comm * 0.5});
          }
          for (int64_t j = 0; j < slices; ++j) {
            const uint32_t i = add_op(g, st, redo[0], share, 1.0, after_tail(j));
            if (redo.size() > 1) add_op(g, st, redo[1], share, 1.0, after_tail(j));
            tail[static_cast<size_t>(j)] = i;
          }
        }
        const int64_t a_release = add_action(st, {l, id.micro, L.chunks, Bytes(0), held});
        chain(L.backward, 2.0, -1, 0, 0, a_release, L.load);
      }
    }

    // Data-parallel synchronisation, asynchronous as Megatron overlaps it: ZeRO-1 reduce-
    // scatters gradients from the start of the stage's last backward, ZeRO-2 from the start of
    // every backward (the optimizer step waits for them). ZeRO-3's weight gathers are above.
    const double per_chunk = 1.0 / static_cast<double>(v);
    if (!id.forward && (plan_.zero_stage >= 2 || last_pass)) {
      dp_async(id.stage, "DP gradient reduce-scatter",
               st.sync.reduce_scatter * (plan_.zero_stage >= 2 ? per_chunk : 1.0));
    }
    if (first_pass) {
      done = [this, s = id.stage, done = std::move(done)]() mutable {
        StageState& x = stages_[static_cast<size_t>(s)];
        if (x.params_pending) {
          x.deferred_done = std::move(done);
        } else {
          done();
        }
      };
    }
    st.gpu->run(std::move(g), std::move(done));
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
  std::vector<StageState> stages_;
  std::vector<LayerState> layers_;
  std::vector<int64_t> passes_done_;
};

}  // namespace

TrainingReport simulate_training(const TimeContext& ctx, const ClusterSpec& cluster,
                                 const PlanChoice& plan, const TrainingOptions& options) {
  if (options.iterations < 1) throw std::invalid_argument("simulate at least one iteration");
  if (plan.offload) throw std::invalid_argument("offload plans run in the APTMoE simulator");
  return Training(ctx, cluster, plan, options).run();
}

}  // namespace moe::sim
