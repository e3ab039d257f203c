#include "simulator/pipeline.h"

#include <fmt/format.h>

#include <functional>
#include <stdexcept>

namespace moe::sim {

namespace {

struct Op {
  bool forward = true;
  int64_t micro = 0;
};

// The order in which one stage runs its passes.
std::vector<Op> stage_order(int64_t stage, int64_t stages, int64_t m, bool gpipe) {
  std::vector<Op> ops;
  if (gpipe) {
    for (int64_t i = 0; i < m; ++i) ops.push_back({true, i});
    for (int64_t i = 0; i < m; ++i) ops.push_back({false, i});
    return ops;
  }
  const int64_t warmup = std::min(stages - stage - 1, m);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back({true, f});
  while (f < m) {
    ops.push_back({true, f++});
    ops.push_back({false, b++});
  }
  while (b < m) ops.push_back({false, b++});
  return ops;
}

class Pipeline {
 public:
  explicit Pipeline(const PipelineSpec& spec) : spec_(spec), net_(queue_) {
    const int64_t p = static_cast<int64_t>(spec.stages.size());
    const int64_t m = spec.microbatches;
    if (p == 0 || m <= 0) throw std::invalid_argument("pipeline needs stages and micro-batches");
    for (int64_t s = 0; s < p; ++s) order_.push_back(stage_order(s, p, m, spec.gpipe));
    next_.assign(p, 0);
    running_.assign(p, false);
    fwd_arrived_.assign(p, std::vector<char>(m, 0));
    bwd_arrived_.assign(p, std::vector<char>(m, 0));
    fwd_done_.assign(p, std::vector<char>(m, 0));
    result_.busy.assign(p, SimTime{});
    for (int64_t i = 0; i < m; ++i) fwd_arrived_[0][i] = 1;  // the data loader feeds stage 0
    // One link per boundary and direction.
    for (int64_t s = 0; s + 1 < p; ++s) {
      down_.push_back(net_.add_link(spec.boundary_bandwidth));
      up_.push_back(net_.add_link(spec.boundary_bandwidth));
    }
  }

  PipelineResult run() {
    for (size_t s = 0; s < order_.size(); ++s) try_start(static_cast<int64_t>(s));
    result_.events = queue_.run();
    for (size_t s = 0; s < order_.size(); ++s) {
      if (next_[s] != order_[s].size()) throw std::logic_error("pipeline schedule deadlocked");
    }
    result_.makespan = queue_.now();
    return std::move(result_);
  }

 private:
  bool ready(int64_t s, const Op& op) const {
    const int64_t last = static_cast<int64_t>(order_.size()) - 1;
    if (op.forward) return fwd_arrived_[s][op.micro];
    return s == last ? fwd_done_[s][op.micro] : bwd_arrived_[s][op.micro];
  }

  void try_start(int64_t s) {
    if (running_[s] || next_[s] >= order_[s].size()) return;
    const Op op = order_[s][next_[s]];
    if (!ready(s, op)) return;
    running_[s] = true;
    const SimTime start = queue_.now();
    const SimTime length = op.forward ? spec_.stages[s].forward : spec_.stages[s].backward;
    queue_.after(length, [this, s, op, start] { finish(s, op, start); });
  }

  void finish(int64_t s, const Op& op, SimTime start) {
    const SimTime now = queue_.now();
    result_.busy[s] = result_.busy[s] + (now - start);
    result_.spans.push_back(
        {s, "compute", fmt::format("{}{}", op.forward ? 'F' : 'B', op.micro), start, now});
    running_[s] = false;
    ++next_[s];
    const int64_t last = static_cast<int64_t>(order_.size()) - 1;
    if (op.forward) {
      fwd_done_[s][op.micro] = 1;
      if (s < last)
        send(s, s + 1, down_[s], op, [this, s, op] {
          fwd_arrived_[s + 1][op.micro] = 1;
          try_start(s + 1);
        });
    } else if (s > 0) {
      send(s, s - 1, up_[s - 1], op, [this, s, op] {
        bwd_arrived_[s - 1][op.micro] = 1;
        try_start(s - 1);
      });
    }
    try_start(s);
  }

  void send(int64_t from, int64_t to, int link, const Op& op, std::function<void()> arrived) {
    (void)to;
    const SimTime start = queue_.now();
    net_.send(
        {link}, spec_.boundary_bytes, spec_.boundary_latency,
        [this, from, op, start, arrived = std::move(arrived)](SimTime t) {
          result_.spans.push_back(
              {from, "send", fmt::format("send {}{}", op.forward ? 'F' : 'B', op.micro), start, t});
          arrived();
        });
  }

  const PipelineSpec& spec_;
  EventQueue queue_;
  FlowNetwork net_;
  std::vector<std::vector<Op>> order_;
  std::vector<size_t> next_;
  std::vector<bool> running_;
  std::vector<std::vector<char>> fwd_arrived_, bwd_arrived_, fwd_done_;
  std::vector<int> down_, up_;
  PipelineResult result_;
};

}  // namespace

PipelineResult simulate_pipeline(const PipelineSpec& spec) {
  return Pipeline(spec).run();
}

}  // namespace moe::sim
