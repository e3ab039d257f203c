#include "simulator/offload_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include "simulator/gpu_streams.h"

namespace moe::sim {

namespace {

// Weights move on the copy lanes; the CPU experts' tokens and outputs on lanes of their own
// (separate CUDA streams), so a few MB of activations never queue behind a layer's load but
// still share the PCIe link with it.
enum Lane { kGpu = 0, kH2d, kD2h, kCpu, kTokensH2d, kTokensD2h, kLanes };

// The forward load of one GPU expert (compared by address: the one name for such tasks).
constexpr const char* kLoadExpert = "load expert";

class OffloadSim {
 public:
  OffloadSim(const TimeContext& ctx, const ClusterSpec& cluster, const OffloadRun& run)
      : ctx_(ctx), m_(*ctx.model), cluster_(cluster), run_(run) {
    if (run.gpus < 1 || run.stages < run.gpus || run.stages > m_.num_layers)
      throw std::invalid_argument("offload run needs gpus <= stages <= layers");
    micro_ = run.global_batch / run.microbatch_size;
    if (micro_ < 1) throw std::invalid_argument("offload run needs at least one micro-batch");
    rates_ = offload_rates(ctx, cluster, run.gpus, run.precision, micro_);
    act_bytes_ = run.precision == Precision::kFp32 ? 4.0 : 2.0;
  }

  OffloadReport run() {
    EventQueue queue;
    FlowNetwork net(queue);
    // One uplink per PCIe switch and direction, at the cluster file's rate. A transfer's bytes
    // are its copy time times that rate (on_wire): a copy alone on the link takes what the
    // pcie_h2d curve gives its size, and sharing slows it in proportion.
    const NodeSpec& node = cluster_.node;
    for (int64_t g = 0; g < run_.gpus; ++g) {
      const SwitchKey key{g / node.num_gpus,
                          node.switch_of_gpu(static_cast<int>(g % node.num_gpus))};
      if (!h2d_.count(key)) {
        h2d_[key] = net.add_link(node.host_link_bandwidth());
        d2h_[key] = net.add_link(node.host_link_bandwidth());
      }
      switch_of_.push_back(key);
    }
    build();
    OffloadReport r;
    StreamHooks hooks;
    GpuStreams* streams_of = nullptr;
    const bool apt = run_.system == OffloadSystem::kAptMoe;
    copy_.assign(static_cast<size_t>(run_.gpus), CopyQueue{});
    if (apt) {
      hooks.on_start = [&](const Task& t) {
        // The stage whose layers the GPU now runs: its loads become inter-layer loads.
        if (t.stream % kLanes == kGpu) {
          int64_t& current = copy_[static_cast<size_t>(t.stream / kLanes)].current_visit;
          current = std::max(current, t.tag);
        }
        return SimTime{};
      };
    }
    if (apt && run_.historical_accuracy < 1.0) {
      hooks.communicate = [&](uint32_t, const Task& t, std::function<void()> done) {
        CopyQueue& q = copy_[static_cast<size_t>(t.stream / kLanes)];
        // An expert picked in the inter-stage phase is a historical pick: one in
        // 1 / (1 - accuracy) of them is the wrong expert, and the right one follows it.
        bool wrong = false;
        if (t.name == kLoadExpert && t.tag > q.current_visit) {
          q.wrong_picks += 1.0 - std::clamp(run_.historical_accuracy, 0.0, 1.0);
          wrong = q.wrong_picks >= 1.0;
          if (wrong) q.wrong_picks -= 1.0;
        }
        net.send(
            t.links, t.bytes, SimTime{},
            [&net, &t, wrong, done = std::move(done)](SimTime) {
              if (!wrong) return done();
              net.send(
                  t.links, t.bytes, SimTime{}, [done](SimTime) { done(); }, t.priority);
            },
            t.priority);
      };
    }
    if (apt && run_.load_window > 0) {
      hooks.caller_started.assign(static_cast<size_t>(run_.gpus * kLanes), false);
      for (int64_t g = 0; g < run_.gpus; ++g)
        hooks.caller_started[static_cast<size_t>(stream(g, kH2d))] = true;
      hooks.on_ready = [&](uint32_t id, const Task& t) {
        copy_[static_cast<size_t>(t.stream / kLanes)].pending.push_back(id);
        pump(*streams_of, t.stream / kLanes);
      };
      hooks.on_free = [&](int s) { pump(*streams_of, s / kLanes); };
    }
    if (run_.record_trace) {
      hooks.on_end = [&](const Task& t, SimTime start, SimTime end) {
        if (end == start) return;  // joins ("stage done")
        if (r.spans.size() >= run_.max_trace_spans) {
          r.trace_truncated = true;
          return;
        }
        static const char* const kLaneNames[kLanes] = {"gpu", "h2d",        "d2h",
                                                       "cpu", "tokens h2d", "tokens d2h"};
        r.spans.push_back({t.stream / kLanes, kLaneNames[t.stream % kLanes], t.name, start, end});
      };
    }
    GpuStreams streams(queue, net, static_cast<int>(run_.gpus * kLanes), std::move(hooks));
    streams_of = &streams;
    SimTime end;
    graph_of_ = std::make_shared<const TaskGraph>(std::move(graph_));
    streams.run(graph_of_, [&] { end = queue.now(); });
    r.events = queue.run();
    r.tasks = tasks_;
    r.optimizer = offload_optimizer_time(ctx_, cluster_, run_.gpus);
    r.iteration = to_seconds(end) + r.optimizer;
    r.tokens_per_second =
        static_cast<double>(run_.global_batch * ctx_.seq_len) / r.iteration.value();
    for (int64_t g = 0; g < run_.gpus; ++g) {
      r.gpu_busy.push_back(to_seconds(streams.busy(static_cast<int>(g * kLanes + kGpu))));
      r.h2d_busy.push_back(to_seconds(streams.busy(static_cast<int>(g * kLanes + kH2d))));
      r.cpu_busy.push_back(to_seconds(streams.busy(static_cast<int>(g * kLanes + kCpu))));
    }
    return r;
  }

 private:
  int64_t gpu_of(int64_t stage) const {
    return offload_gpu_of(run_.system, run_.stages, run_.gpus, stage);
  }

  int stream(int64_t g, Lane lane) const { return static_cast<int>(g * kLanes + lane); }

  // Demand-priority scheduling with a bounded launch window (OffloadRun::load_window).
  struct CopyQueue {
    std::vector<uint32_t> pending;  // ready, not yet launched
    std::deque<uint32_t> launched;  // launched, not yet started, in stream order
    int64_t current_visit = -1;
    double wrong_picks = 0;  // historical picks owed a miss (OffloadRun::historical_accuracy)
  };
  // 0 inter-expert, 1 inter-layer, 2 inter-stage: lower is more urgent.
  int urgency(const CopyQueue& q, const Task& t) const {
    if (t.rank < 0) return 0;
    return t.tag <= q.current_visit ? 1 : 2;
  }
  // Launches the next batch: the window's worth of the most urgent pending loads.
  void launch_batch(CopyQueue& q) {
    const auto& tasks = graph_of_->tasks();
    auto key = [&](uint32_t id) { return std::pair{urgency(q, tasks[id]), id}; };
    std::sort(q.pending.begin(), q.pending.end(),
              [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
    const size_t n = std::min(q.pending.size(), static_cast<size_t>(run_.load_window));
    q.launched.insert(q.launched.end(), q.pending.begin(), q.pending.begin() + n);
    q.pending.erase(q.pending.begin(), q.pending.begin() + n);
  }
  void pump(GpuStreams& streams, int64_t g) {
    CopyQueue& q = copy_[static_cast<size_t>(g)];
    // Nothing launched (the batch event has fired, or the stream was idle): the polling host
    // launches what is pending now.
    if (q.launched.empty()) launch_batch(q);
    if (q.launched.empty() || !streams.stream_free(stream(g, kH2d))) return;
    const uint32_t id = q.launched.front();
    q.launched.pop_front();
    streams.start(id);
    // The event sits before the batch's last load: once that load starts, the next batch goes.
    if (q.launched.empty()) launch_batch(q);
  }

  uint32_t add(Task t) {
    t.tag = visits_;
    graph_.push_back(std::move(t));
    ++tasks_;
    return static_cast<uint32_t>(graph_.size() - 1);
  }
  // What a copy lasting `time` alone occupies on a link of the GPU's PCIe rate: loads are
  // priced as times (planner/aptmoe.h), at the pinned-copy efficiency of their size.
  Bytes on_wire(Seconds time) const { return Bytes(time.value() * rates_.pcie.value()); }
  Bytes on_wire(Bytes bytes) const { return on_wire(rates_.load_time(bytes)); }
  Task transfer(int64_t g, Lane lane, const char* name, Bytes bytes, std::vector<uint32_t> after) {
    Task t;
    t.name = name;
    t.stream = stream(g, lane);
    const SwitchKey key = switch_of_[static_cast<size_t>(g)];
    t.links = {lane == kD2h || lane == kTokensD2h ? d2h_.at(key) : h2d_.at(key)};
    t.bytes = bytes;
    t.after = std::move(after);
    return t;
  }
  Task work(int64_t g, Lane lane, const char* name, Seconds time, std::vector<uint32_t> after) {
    Task t;
    t.name = name;
    t.stream = stream(g, lane);
    t.duration = to_sim_time(time);
    t.after = std::move(after);
    return t;
  }

  void build() {
    const double m = static_cast<double>(micro_);
    const double tokens =
        offload_pass_tokens(run_.global_batch, run_.microbatch_size, ctx_.seq_len);
    const double h = static_cast<double>(m_.hidden_size);
    const bool apt = run_.system == OffloadSystem::kAptMoe;
    const bool prefetch = run_.system != OffloadSystem::kGPipeOffload;
    // out[s][i]: tasks whose end means micro-batch i has left stage s (this pass).
    std::vector<std::vector<std::vector<uint32_t>>> fwd_out(static_cast<size_t>(run_.stages));
    std::vector<std::vector<uint32_t>> visit_end(static_cast<size_t>(run_.gpus));  // per visit
    std::vector<int64_t> last_compute(static_cast<size_t>(run_.gpus), -1);

    for (aptmoe::Pass pass : {aptmoe::Pass::kForward, aptmoe::Pass::kBackward}) {
      const bool fwd = pass == aptmoe::Pass::kForward;
      std::vector<std::vector<std::vector<uint32_t>>> out(static_cast<size_t>(run_.stages));
      for (int64_t k = 0; k < run_.stages; ++k) {
        const int64_t s = fwd ? k : run_.stages - 1 - k;
        const int64_t g = gpu_of(s);
        auto& visits = visit_end[static_cast<size_t>(g)];
        // Memory holds two stages: this visit's loads wait for the one two visits back (with
        // prefetch), or for everything before (without).
        std::vector<uint32_t> load_after;
        if (prefetch) {
          if (visits.size() >= 2) load_after = {visits[visits.size() - 2]};
        } else if (last_compute[static_cast<size_t>(g)] >= 0) {
          load_after = {static_cast<uint32_t>(last_compute[static_cast<size_t>(g)])};
        }
        // Inputs of each micro-batch: the previous stage's outputs (forward), the next stage's
        // (backward), or this stage's own forward (the last stage turning around).
        std::vector<std::vector<uint32_t>> input(static_cast<size_t>(micro_));
        if (fwd && s > 0) input = out[static_cast<size_t>(s - 1)];
        if (!fwd && s < run_.stages - 1) input = out[static_cast<size_t>(s + 1)];
        if (!fwd && s == run_.stages - 1) input = fwd_out[static_cast<size_t>(s)];

        std::vector<OffloadLayer> costs;
        Seconds stage_load;
        const int64_t first = offload_stage_first_layer(m_.num_layers, run_.stages, s);
        const int64_t count = offload_stage_layers(m_.num_layers, run_.stages, s);
        for (int64_t j = 0; j < count; ++j) {
          costs.push_back(offload_layer(ctx_, rates_, first + j, run_.stages, pass, tokens,
                                        run_.precision, run_.system));
          stage_load += costs.back().load;
        }
        // Whole-stage load for the baselines; per layer for APTMoE; none when backward finds
        // the stage still on the GPU.
        const bool resident =
            !fwd && offload_resident_in_backward(run_.system, run_.stages, run_.gpus, s);
        int64_t stage_load_task = -1;
        if (!apt && !resident) {
          stage_load_task = add(transfer(g, kH2d, "load stage", on_wire(stage_load), load_after));
        }
        // Loads first (the copy stream serves them in this order), then every micro-batch
        // through the stage's layers in GPipe order, then the gradients back to the host.
        // Forward, APTMoE prefetches the experts its predictor picks; the mispredicted share
        // waits for the gate (backward knows the routing from forward).
        const double missed =
            apt && fwd ? 1.0 - std::clamp(run_.predictor_accuracy, 0.0, 1.0) : 0.0;
        auto demand_of = [&](int64_t j) {
          return costs[static_cast<size_t>(j)].expert_load * missed;
        };
        // APTMoE loads by block: the layer's attention and gate, then each of its GPU experts.
        // How many experts `share` of a layer's GPU experts is (at least one when it moves bytes).
        auto experts_in = [&](const OffloadLayer& c, Seconds expert_time, double share) {
          const double n =
              std::ceil(c.loaded_share * static_cast<double>(m_.num_routed_experts) * share);
          return expert_time.value() > 0 ? std::max<int64_t>(1, static_cast<int64_t>(n)) : 0;
        };
        auto add_blocks = [&](const char* name, Seconds time, int64_t pieces,
                              const std::vector<uint32_t>& after, int rank,
                              std::vector<uint32_t>& into) {
          for (int64_t k = 0; k < pieces; ++k) {
            Task t = transfer(g, kH2d, name, on_wire(time / static_cast<double>(pieces)), after);
            t.rank = rank;
            into.push_back(add(std::move(t)));
          }
        };
        std::vector<std::vector<uint32_t>> loads(static_cast<size_t>(count));
        std::vector<std::vector<uint32_t>> demand(static_cast<size_t>(count));
        for (int64_t jj = 0; jj < count && !resident; ++jj) {
          const int64_t j = fwd ? jj : count - 1 - jj;
          const OffloadLayer& c = costs[static_cast<size_t>(j)];
          auto& into = loads[static_cast<size_t>(j)];
          if (!apt) {
            into.push_back(static_cast<uint32_t>(stage_load_task));
            continue;
          }
          const Seconds experts_ahead = c.expert_load - demand_of(j);
          add_blocks(fwd ? "load attention and gate" : "load attention and gate (backward)",
                     c.load - c.expert_load, 1, load_after, 0, into);
          add_blocks(fwd ? kLoadExpert : "load expert (backward)", experts_ahead,
                     experts_in(c, experts_ahead, 1.0 - missed), load_after, 0, into);
        }
        std::vector<std::vector<uint32_t>> layer_done(static_cast<size_t>(count));
        for (int64_t i = 0; i < micro_; ++i) {
          std::vector<uint32_t> after = input[static_cast<size_t>(i)];
          for (int64_t jj = 0; jj < count; ++jj) {
            const int64_t j = fwd ? jj : count - 1 - jj;
            const OffloadLayer& c = costs[static_cast<size_t>(j)];
            const auto& loaded = loads[static_cast<size_t>(j)];
            after.insert(after.end(), loaded.begin(), loaded.end());
            if (i == 0 && !resident && demand_of(j).value() > 0) {
              // The first micro-batch reaching the layer's gate names the experts the predictor
              // missed: they load then, ahead of every queued prefetch (inter-expert before
              // inter-layer loading).
              add_blocks("load mispredicted expert", demand_of(j),
                         experts_in(c, demand_of(j), missed), after, -1,
                         demand[static_cast<size_t>(j)]);
            }
            const auto& urgent = demand[static_cast<size_t>(j)];
            after.insert(after.end(), urgent.begin(), urgent.end());
            std::vector<uint32_t> joined = {
                add(work(g, kGpu, fwd ? "layer forward" : "layer backward", c.gpu / m, after))};
            if (c.cpu.value() > 0) {
              // The CPU experts' tokens go to the host and their outputs come back.
              const Bytes act = on_wire(Bytes(c.cpu_tokens / m * h * act_bytes_));
              const uint32_t down =
                  add(transfer(g, kTokensD2h, "tokens to CPU experts", act, after));
              const uint32_t cpu = add(
                  work(g, kCpu, fwd ? "CPU experts" : "CPU experts backward", c.cpu / m, {down}));
              joined.push_back(add(transfer(g, kTokensH2d, "CPU expert outputs", act, {cpu})));
            }
            after = joined;
            auto& done = layer_done[static_cast<size_t>(j)];
            done.insert(done.end(), joined.begin(), joined.end());
          }
          input[static_cast<size_t>(i)] = after;
        }
        std::vector<uint32_t> done_all;
        for (int64_t j = 0; j < count; ++j) {
          const auto& done = layer_done[static_cast<size_t>(j)];
          if (!fwd) {
            add(transfer(g, kD2h, "offload gradients", on_wire(costs[static_cast<size_t>(j)].load),
                         done));
          }
          done_all.insert(done_all.end(), done.begin(), done.end());
        }
        out[static_cast<size_t>(s)] = input;
        // The visit ends when its last layer has run every micro-batch.
        const uint32_t end = add(work(g, kGpu, "stage done", Seconds(0), done_all));
        ++visits_;
        visits.push_back(end);
        last_compute[static_cast<size_t>(g)] = end;
      }
      if (fwd) fwd_out = out;
    }
  }

  const TimeContext& ctx_;
  const ModelSpec& m_;
  const ClusterSpec& cluster_;
  OffloadRun run_;
  int64_t micro_ = 1;
  aptmoe::Rates rates_;
  double act_bytes_ = 4;
  using SwitchKey = std::pair<int64_t, int>;  // (node, PCIe switch in the node)
  std::map<SwitchKey, int> h2d_, d2h_;
  std::vector<SwitchKey> switch_of_;
  std::vector<Task> graph_;
  std::shared_ptr<const TaskGraph> graph_of_;
  std::vector<CopyQueue> copy_;
  int64_t visits_ = 0;  // tasks carry their visit's number in Task::tag
  uint64_t tasks_ = 0;
};

}  // namespace

OffloadRun offload_run(const PlanChoice& plan, OffloadSystem system) {
  OffloadRun r;
  r.gpus = plan.offload_gpus;
  r.stages = *plan.parallel.pp;
  r.microbatch_size = *plan.parallel.mbs;
  r.global_batch = *plan.parallel.gbs;
  r.precision = plan.precision;
  r.system = system;
  r.predictor_accuracy = plan.predictor_accuracy;
  r.historical_accuracy = plan.historical_accuracy;
  r.load_window = plan.load_window;
  return r;
}

OffloadReport simulate_offload(const TimeContext& ctx, const ClusterSpec& cluster,
                               const OffloadRun& run) {
  return OffloadSim(ctx, cluster, run).run();
}

}  // namespace moe::sim
