#include "simulator/pipeline.h"

#include <fmt/format.h>

#include <functional>
#include <stdexcept>

#include "planner/pipeline_schedule.h"

namespace moe::sim {

using Op = SchedulePass;

class PipelineDriver::Impl {
 public:
  Impl(const PipelineSpec& spec, EventQueue& queue, FlowNetwork& net, PipelineHooks hooks)
      : spec_(spec), queue_(queue), net_(net), hooks_(std::move(hooks)) {
    p_ = static_cast<int64_t>(spec.stages.size());
    v_ = spec.chunks;
    m_ = spec.microbatches;
    if (p_ == 0 || m_ <= 0 || v_ <= 0)
      throw std::invalid_argument("pipeline needs stages, chunks and micro-batches");
    if (v_ > 1 && m_ % p_ != 0)
      throw std::invalid_argument("interleaving needs micro-batches divisible by stages");
    for (int64_t s = 0; s < p_; ++s) order_.push_back(schedule_order(s, p_, m_, v_, spec.gpipe));
    next_.assign(p_, 0);
    running_.assign(p_, false);
    const size_t cells = static_cast<size_t>(p_ * v_ * m_);
    fwd_arrived_.assign(cells, 0);
    bwd_arrived_.assign(cells, 0);
    fwd_done_.assign(cells, 0);
    result_.busy.assign(p_, SimTime{});
    for (int64_t i = 0; i < m_; ++i)
      fwd_arrived_[cell(0, 0, i)] = 1;  // the data loader feeds chunk 0
    // One link per boundary and direction unless the caller gives the stage's own; the wrap from
    // the last stage to the first carries chunk-to-chunk traffic when interleaving.
    for (int64_t s = 0; s < p_; ++s) {
      const bool given = static_cast<size_t>(s) < hooks_.down_links.size();
      down_.push_back(given ? hooks_.down_links[s]
                            : std::vector<int>{net_.add_link(spec.boundary_bandwidth)});
      up_.push_back(given ? hooks_.up_links[s]
                          : std::vector<int>{net_.add_link(spec.boundary_bandwidth)});
    }
  }

  void start() {
    for (int64_t s = 0; s < p_; ++s) try_start(s);
  }

  PipelineResult finish() {
    for (int64_t s = 0; s < p_; ++s) {
      if (next_[s] != order_[s].size()) throw std::logic_error("pipeline schedule deadlocked");
    }
    result_.makespan = queue_.now();
    return std::move(result_);
  }

 private:
  size_t cell(int64_t s, int64_t c, int64_t i) const {
    return static_cast<size_t>((s * v_ + c) * m_ + i);
  }
  bool last_chunk(int64_t s, int64_t c) const { return s == p_ - 1 && c == v_ - 1; }

  bool ready(int64_t s, const Op& op) const {
    if (op.forward) return fwd_arrived_[cell(s, op.chunk, op.micro)];
    return last_chunk(s, op.chunk) ? fwd_done_[cell(s, op.chunk, op.micro)]
                                   : bwd_arrived_[cell(s, op.chunk, op.micro)];
  }

  void try_start(int64_t s) {
    if (running_[s] || next_[s] >= order_[s].size()) return;
    const Op op = order_[s][next_[s]];
    if (!ready(s, op)) return;
    running_[s] = true;
    const SimTime start = queue_.now();
    if (hooks_.run) {
      hooks_.run(PassId{s, op.chunk, op.micro, op.forward},
                 [this, s, op, start] { finish_pass(s, op, start); });
      return;
    }
    const SimTime whole = op.forward ? spec_.stages[s].forward : spec_.stages[s].backward;
    const SimTime length{(whole.ps + v_ - 1) / v_};  // one chunk of the stage's layers
    queue_.after(length, [this, s, op, start] { finish_pass(s, op, start); });
  }

  void finish_pass(int64_t s, const Op& op, SimTime start) {
    const SimTime now = queue_.now();
    result_.busy[s] = result_.busy[s] + (now - start);
    const std::string label =
        v_ > 1 ? fmt::format("{}{}.{}", op.forward ? 'F' : 'B', op.micro, op.chunk)
               : fmt::format("{}{}", op.forward ? 'F' : 'B', op.micro);
    result_.spans.push_back({s, "compute", label, start, now});
    running_[s] = false;
    ++next_[s];
    if (op.forward) {
      fwd_done_[cell(s, op.chunk, op.micro)] = 1;
      if (!last_chunk(s, op.chunk)) {
        // Next stage, or the first stage's next chunk after the last stage.
        const int64_t to = s + 1 < p_ ? s + 1 : 0;
        const int64_t chunk = s + 1 < p_ ? op.chunk : op.chunk + 1;
        send(s, down_[s], latency(hooks_.down_latency, s), label, [this, to, chunk, op] {
          fwd_arrived_[cell(to, chunk, op.micro)] = 1;
          try_start(to);
        });
      }
    } else if (s > 0 || op.chunk > 0) {
      const int64_t to = s > 0 ? s - 1 : p_ - 1;
      const int64_t chunk = s > 0 ? op.chunk : op.chunk - 1;
      send(s, up_[s], latency(hooks_.up_latency, s), label, [this, to, chunk, op] {
        bwd_arrived_[cell(to, chunk, op.micro)] = 1;
        try_start(to);
      });
    }
    if (next_[s] == order_[s].size() && hooks_.on_stage_done) hooks_.on_stage_done(s);
    try_start(s);
  }

  SimTime latency(const std::vector<SimTime>& given, int64_t s) const {
    return static_cast<size_t>(s) < given.size() ? given[static_cast<size_t>(s)]
                                                 : spec_.boundary_latency;
  }

  void send(int64_t from, const std::vector<int>& links, SimTime latency, const std::string& label,
            std::function<void()> arrived) {
    const SimTime start = queue_.now();
    if (hooks_.on_send) hooks_.on_send(from, links, +1);
    net_.send(
        links, spec_.boundary_bytes, latency,
        [this, from, &links, label, start, arrived = std::move(arrived)](SimTime t) {
          result_.spans.push_back({from, "send", "send " + label, start, t});
          if (hooks_.on_send) hooks_.on_send(from, links, -1);
          arrived();
        },
        hooks_.boundary_priority);
  }

  const PipelineSpec& spec_;
  EventQueue& queue_;
  FlowNetwork& net_;
  PipelineHooks hooks_;
  int64_t p_ = 0, v_ = 1, m_ = 0;
  std::vector<std::vector<Op>> order_;
  std::vector<size_t> next_;
  std::vector<bool> running_;
  std::vector<char> fwd_arrived_, bwd_arrived_, fwd_done_;
  std::vector<std::vector<int>> down_, up_;
  PipelineResult result_;
};

PipelineDriver::PipelineDriver(const PipelineSpec& spec, EventQueue& queue, FlowNetwork& net,
                               PipelineHooks hooks)
    : impl_(std::make_unique<Impl>(spec, queue, net, std::move(hooks))) {}
PipelineDriver::~PipelineDriver() = default;
void PipelineDriver::start() {
  impl_->start();
}
PipelineResult PipelineDriver::finish() {
  return impl_->finish();
}

PipelineResult simulate_pipeline(const PipelineSpec& spec) {
  EventQueue queue;
  FlowNetwork net(queue);
  PipelineDriver driver(spec, queue, net, {});
  driver.start();
  const uint64_t events = queue.run();
  PipelineResult r = driver.finish();
  r.events = events;
  return r;
}

}  // namespace moe::sim
