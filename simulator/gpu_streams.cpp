#include "simulator/gpu_streams.h"

#include <stdexcept>

namespace moe::sim {

GpuStreams::GpuStreams(EventQueue& queue, FlowNetwork& net, int streams, StreamHooks hooks)
    : queue_(queue),
      net_(net),
      hooks_(std::move(hooks)),
      ready_(static_cast<size_t>(streams)),
      running_(static_cast<size_t>(streams), false),
      busy_(static_cast<size_t>(streams)),
      waited_(static_cast<size_t>(streams)) {}

void GpuStreams::run(std::vector<Task> graph, std::function<void()> done) {
  if (left_ != 0) throw std::logic_error("a GPU runs one task graph at a time");
  graph_ = std::move(graph);
  done_ = std::move(done);
  left_ = graph_.size();
  dependents_.assign(graph_.size(), {});
  waiting_.assign(graph_.size(), 0);
  released_by_.assign(graph_.size(), 0);
  for (uint32_t i = 0; i < graph_.size(); ++i) {
    const Task& t = graph_[i];
    if (t.stream < 0 || static_cast<size_t>(t.stream) >= ready_.size())
      throw std::invalid_argument("task on an unknown stream");
    for (uint32_t d : t.after) {
      if (d >= i) throw std::invalid_argument("task depends on a later one");
      dependents_[d].push_back(i);
      ++waiting_[i];
    }
  }
  idle_ = true;
  idle_since_ = queue_.now();
  if (graph_.empty()) {
    auto finish = std::move(done_);
    finish();
    return;
  }
  for (uint32_t i = 0; i < graph_.size(); ++i) {
    if (waiting_[i] == 0) ready(i);
  }
}

void GpuStreams::ready(uint32_t task) {
  const int s = graph_[task].stream;
  ready_[static_cast<size_t>(s)].push({graph_[task].rank, task});
  dispatch(s);
}

void GpuStreams::dispatch(int stream) {
  const size_t s = static_cast<size_t>(stream);
  if (running_[s] || ready_[s].empty()) return;
  const uint32_t id = ready_[s].top().second;
  ready_[s].pop();
  running_[s] = true;
  const SimTime start = queue_.now();
  if (stream == 0 && idle_) {
    // The main stream waited: charge it to whatever released this task (itself at a graph's
    // start, which the caller accounts as pipeline wait).
    waited_[static_cast<size_t>(released_by_[id])] =
        waited_[static_cast<size_t>(released_by_[id])] + (start - idle_since_);
    idle_ = false;
  }
  const Task& t = graph_[id];
  if (hooks_.on_start) hooks_.on_start(t);
  if (t.links.empty()) {
    queue_.after(t.duration, [this, id, start] { finished(id, start); });
  } else {
    net_.send(
        t.links, t.bytes, SimTime{}, [this, id, start](SimTime) { finished(id, start); },
        t.priority);
  }
}

void GpuStreams::finished(uint32_t id, SimTime start) {
  const Task& t = graph_[id];
  const size_t s = static_cast<size_t>(t.stream);
  const SimTime now = queue_.now();
  busy_[s] = busy_[s] + (now - start);
  running_[s] = false;
  if (hooks_.on_end) hooks_.on_end(t, start, now);
  for (uint32_t d : dependents_[id]) {
    released_by_[d] = t.stream;
    if (--waiting_[d] == 0) ready(d);
  }
  dispatch(t.stream);
  if (!running_[0] && !idle_) {
    idle_ = true;
    idle_since_ = now;
  }
  if (--left_ == 0) {
    idle_ = false;
    auto finish = std::move(done_);
    finish();
  }
}

}  // namespace moe::sim
