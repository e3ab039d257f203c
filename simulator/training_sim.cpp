#include "simulator/training_sim.h"

#include <algorithm>
#include <stdexcept>

#include "planner/search.h"
#include "simulator/training_run.h"

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
    case kD2hStream:
      return "d2h";
    case kH2dStream:
      return "h2d";
    case kHostStream:
      return "host";
    case kCarriedTpStream:
      return "tp (carried)";
    case kCarriedEpStream:
      return "ep (carried)";
  }
  return "?";
}

namespace training {

Training::Training(const TimeContext& ctx, const ClusterSpec& cluster, const PlanChoice& plan,
                   const TrainingOptions& o)
    : ctx_(ctx),
      m_(*ctx.model),
      plan_(plan),
      p_(plan.parallel),
      o_(o),
      routing_(m_, ctx.skew, o.dynamics, o.seed) {
  capacity_ = cluster.node.gpu.hbm_capacity;
  allocator_retry_ = to_sim_time(ctx.eff.allocator_retry);
  const MemoryRequest request = memory_request(ctx, plan, capacity_, o.alpha, o.static_override);
  memory_ = estimate_memory(m_, ctx.params, p_, request);
  shape_ = memory_.moe_shape;  // with the request's FP8 input and score bytes
  settle_mact_chunks(plan_, memory_);
  loss_ = cross_entropy_passes(ctx, plan_);
  if (o.static_override) loss_.held = Bytes(0);
  embedding_gradient_ = embedding_gradient_op(ctx, plan_).time;
  microbatches_ = *p_.gbs / (*p_.mbs * *p_.dp);
  per_stage_ = o.every_gpu ? p_.world() / *p_.pp : 1;
  gpus_per_node_ = std::max<int64_t>(cluster.node.num_gpus, 1);
  // Each communication stream's group (planner/parallel.h; expert TP without EP gathers and
  // scatters its tokens over the ETP group, MegaScale eq. 4); a group inside a node has all its
  // peers local (local_peers = n).
  for (const auto& [stream, kind] :
       {std::pair{kTpStream, GroupKind::kTp}, std::pair{kEpStream, GroupKind::kEp},
        std::pair{kCpStream, GroupKind::kCp}, std::pair{kDpStream, GroupKind::kDp},
        std::pair{kCarriedTpStream, GroupKind::kTp}, std::pair{kCarriedEpStream, GroupKind::kEp}}) {
    const GroupShape g = group_shape(p_, kind);
    group_size_[stream] = g.n;
    remote_peers_[stream] = static_cast<double>(g.n - ctx_.links.local_peers(g.n, g.stride));
  }
  report_.stages.resize(static_cast<size_t>(*p_.pp));
  report_.chunk_histogram.assign(static_cast<size_t>(o.chunk_bins.back() + 1), 0);
  report_.gpus_simulated = *p_.pp * per_stage_;
  compute_total_.assign(static_cast<size_t>(report_.gpus_simulated), Seconds(0));
  peak_total_.assign(static_cast<size_t>(report_.gpus_simulated), Bytes(0));
}

TrainingReport Training::run() {
  SimTime offset;
  for (int64_t it = 0; it < o_.iterations; ++it) {
    const SimTime took = run_iteration(it, offset);
    report_.iteration_times.push_back(to_seconds(took));
    offset = offset + took;
    if (o_.on_iteration) o_.on_iteration(it + 1, o_.iterations);
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

// Each stage's GPUs with their groups, links, node and memory at the iteration's start, and
// the link each stage boundary's sends take.
void Training::place_gpus(PipelineHooks& hooks) {
  for (int64_t s = 0; s < *p_.pp; ++s) {
    StageState& st = stages_[static_cast<size_t>(s)];
    const StageMemory& sm = memory_.stages[static_cast<size_t>(s)];
    st.first_gpu = s * per_stage_;
    st.num_gpus = per_stage_;
    st.static_bytes = sm.static_bytes;
    st.max_received = sm.max_received_tokens;
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
      x.group[kCarriedTpStream] = x.group[kTpStream];
      x.group[kCarriedEpStream] = x.group[kEpStream];
      for (int k2 : kGroupStreams) st.groups[k2][x.group[k2]].push_back(g);
      x.nvlink_out = net_->add_link(ctx_.links.intra);
      x.nvlink_in = net_->add_link(ctx_.links.intra);
      x.nic_out = net_->add_link(ctx_.links.inter);
      x.nic_in = net_->add_link(ctx_.links.inter);
      // Megatron's ranks fill a stage's GPUs in order, and a stage its nodes.
      x.node = g / gpus_per_node_;
      x.rail = g % gpus_per_node_;
      x.current = x.peak = st.static_bytes;
      x.gpu = std::make_unique<GpuStreams>(*queue_, *net_, kStreams, stream_hooks(g));
      sample_memory(x);
    }
    for (int64_t g = st.first_gpu; g < st.first_gpu + st.num_gpus; ++g) {
      GpuState& x = gpus_[static_cast<size_t>(g)];
      for (int k2 : kGroupStreams) x.peers[k2] = &st.groups[k2].at(x.group[k2]);
    }
    // A boundary leaves the node where the next stage's GPUs (the one before's, backward)
    // begin on another node, as boundary_hops prices it: where stages tile a node, only every
    // node's last stage sends over its NIC.
    const GpuState& first = gpus_[static_cast<size_t>(st.first_gpu)];
    const int64_t pp = *p_.pp;
    auto link_to = [&](int64_t to) {
      return boundary_crosses_nodes(ctx_, p_, s, to) ? first.nic_out : first.nvlink_out;
    };
    auto latency_to = [&](int64_t to) {
      return to_sim_time(boundary_crosses_nodes(ctx_, p_, s, to) ? ctx_.links.inter_latency
                                                                 : ctx_.links.intra_latency);
    };
    hooks.down_links.push_back({link_to((s + 1) % pp)});
    hooks.up_links.push_back({link_to((s + pp - 1) % pp)});
    hooks.down_latency.push_back(latency_to((s + 1) % pp));
    hooks.up_latency.push_back(latency_to((s + pp - 1) % pp));
  }
}

// Each stage gathers its parameters for this iteration at the start (Megatron's distributed
// optimizer with --overlap-param-gather), one model chunk after another: a chunk's first
// forward pass may run meanwhile but does not end before that chunk's weights are in (with
// interleaving, chunk 0 no longer waits for the weights of chunks 1 to v - 1).
void Training::start_parameter_gathers() {
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
}

// What the iteration left in each stage's report: compute busy and stream waits (a stage's
// GPUs averaged), peak memory, time outside passes, and the pipeline's spans for the trace.
void Training::add_stage_reports(const PipelineResult& pr, SimTime end) {
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
}

SimTime Training::run_iteration(int64_t it, SimTime offset) {
  EventQueue queue;
  if (o_.on_progress) {
    const Seconds expected = estimate_time(ctx_, plan_).iteration;
    queue.tick_every(o_.progress_events, [this, &queue, expected] {
      o_.on_progress(std::min(0.99, to_seconds(queue.now()) / expected));
    });
  }
  FlowNetwork net(queue);
  queue_ = &queue;
  net_ = &net;
  iteration_ = it;
  ready_to_step_ = 0;
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
  place_gpus(hooks);
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
  // Every GPU of the stage sends its share of a boundary's activations at once (rank r to rank
  // r of the next), over the link the first one's takes.
  hooks.on_send = [this](int64_t s, const std::vector<int>& links, int delta) {
    const StageState& st = stages_[static_cast<size_t>(s)];
    const bool nic =
        !links.empty() && links.front() == gpus_[static_cast<size_t>(st.first_gpu)].nic_out;
    for (int64_t g = st.first_gpu; g < st.first_gpu + st.num_gpus; ++g)
      link_activity(gpus_[static_cast<size_t>(g)], nic, delta);
  };
  hooks.on_stage_done = [this](int64_t s) {
    const StageState& st = stages_[static_cast<size_t>(s)];
    for (int64_t g = st.first_gpu; g < st.first_gpu + st.num_gpus; ++g) {
      gpus_[static_cast<size_t>(g)].optimizer_waiting = true;
      maybe_step(g);
    }
  };
  start_parameter_gathers();
  PipelineDriver driver(spec, queue, net, std::move(hooks));
  driver.start();
  report_.events += queue.run();
  if (!joining_.empty()) throw std::logic_error("a collective was never joined by its group");
  const PipelineResult pr = driver.finish();
  const SimTime end = queue.now();
  add_stage_reports(pr, end);
  return end;
}

}  // namespace training

TrainingReport simulate_training(const TimeContext& ctx, const ClusterSpec& cluster,
                                 const PlanChoice& plan, const TrainingOptions& options) {
  if (options.iterations < 1) throw std::invalid_argument("simulate at least one iteration");
  if (plan.offload) throw std::invalid_argument("offload plans run in the APTMoE simulator");
  // The plan's own GPUs decide which groups straddle nodes, as in the search.
  TimeContext own = ctx;
  own.links.world = plan.parallel.world();
  return training::Training(own, cluster, plan, options).run();
}

}  // namespace moe::sim
