#include "simulator/gpu_streams.h"

#include <algorithm>
#include <stdexcept>

namespace moe::sim {

namespace {
// TaskPending::waiting of a task that has finished (a started one's is 0).
constexpr uint32_t kFinished = ~uint32_t{0};
}  // namespace

GpuStreams::GpuStreams(EventQueue& queue, FlowNetwork& net, int streams, StreamHooks hooks)
    : queue_(queue), net_(net), hooks_(std::move(hooks)), streams_(static_cast<size_t>(streams)) {
  if (hooks_.caller_started.size() > 32)
    throw std::invalid_argument("caller-started streams beyond the 32nd");
  for (size_t s = 0; s < hooks_.caller_started.size(); ++s)
    if (hooks_.caller_started[s]) caller_started_ |= 1u << s;
}

TaskGraph::TaskGraph(std::vector<Task> tasks) : tasks_(std::move(tasks)) {
  const size_t n = tasks_.size();
  waiting_.assign(n, 0);
  first_dependent_.assign(n + 1, 0);
  for (uint32_t i = 0; i < n; ++i) {
    min_stream_ = std::min(min_stream_, tasks_[i].stream);
    max_stream_ = std::max(max_stream_, tasks_[i].stream);
    const int64_t carried = tasks_[i].carries;
    if (carried >= 0) {
      if (carried <= static_cast<int64_t>(i) || carried >= static_cast<int64_t>(n))
        throw std::invalid_argument("task carries one outside its graph or before it");
      ++waiting_[static_cast<size_t>(carried)];  // its carrier's start
    }
    for (uint32_t d : tasks_[i].after) {
      if (d >= i) throw std::invalid_argument("task depends on a later one");
      ++first_dependent_[d + 1];
      ++waiting_[i];
    }
  }
  for (size_t i = 0; i < n; ++i) first_dependent_[i + 1] += first_dependent_[i];
  dependents_.resize(first_dependent_[n]);
  std::vector<uint32_t> next(first_dependent_.begin(), first_dependent_.end() - 1);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t d : tasks_[i].after) dependents_[next[d]++] = i;
  }
}

void GpuStreams::run(std::vector<Task> graph, std::function<void()> done) {
  run(std::make_shared<const TaskGraph>(std::move(graph)), std::move(done));
}

void GpuStreams::run(std::shared_ptr<const TaskGraph> graph, std::function<void()> done) {
  if (left_ != 0) throw std::logic_error("a GPU runs one task graph at a time");
  own_pending_.resize(graph->size());
  run(std::move(graph), std::move(done), PendingSlots{own_pending_.data(), 1});
}

void GpuStreams::run(std::shared_ptr<const TaskGraph> graph, std::function<void()> done,
                     PendingSlots slots) {
  if (left_ != 0) throw std::logic_error("a GPU runs one task graph at a time");
  if (graph->min_stream() < 0 || static_cast<size_t>(graph->max_stream()) >= streams_.size())
    throw std::invalid_argument("task on an unknown stream");
  graph_ = std::move(graph);
  done_ = std::move(done);
  left_ = graph_->size();
  slots_ = slots;
  for (uint32_t i = 0; i < graph_->size(); ++i) pending(i) = {graph_->waiting_[i], 0};
  idle_ = true;
  idle_since_ = queue_.now();
  if (left_ == 0) {
    auto finish = std::move(done_);
    finish();
    return;
  }
  // By the graph's own counts: a task the loop has made ready already (carried by one it
  // started) is not readied twice.
  for (uint32_t i = 0; i < graph_->size(); ++i) {
    if (graph_->waiting_[i] == 0) ready(i);
  }
}

void GpuStreams::ready(uint32_t task) {
  const Task& t = graph_->tasks_[task];
  if (caller_started(t.stream)) {
    hooks_.on_ready(task, t);
    return;
  }
  Stream& s = streams_[static_cast<size_t>(t.stream)];
  if (!s.running && s.ready.empty()) {
    launch(task);  // what dispatch would pick, without the heap
    return;
  }
  s.ready.push({t.rank, task});
  dispatch(t.stream);
}

void GpuStreams::dispatch(int stream) {
  Stream& s = streams_[static_cast<size_t>(stream)];
  if (caller_started(stream)) {
    if (!s.running && hooks_.on_free) hooks_.on_free(stream);
    return;
  }
  if (s.running || s.ready.empty()) return;
  const uint32_t id = s.ready.top().second;
  s.ready.pop();
  launch(id);
}

void GpuStreams::start(uint32_t id) {
  if (!graph_ || id >= graph_->size() || pending(id).waiting != 0 ||
      !stream_free(graph_->tasks_[id].stream))
    throw std::logic_error("started a task that is not ready or whose stream is busy");
  launch(id);
}

void GpuStreams::launch(uint32_t id) {
  const int stream = graph_->tasks_[id].stream;
  Stream& s = streams_[static_cast<size_t>(stream)];
  s.running = true;
  const SimTime start = queue_.now();
  s.started = start;
  if (stream == 0 && idle_) {
    // The main stream waited: charge it to whatever released this task (itself at a graph's
    // start, which the caller accounts as pipeline wait).
    SimTime& waited = streams_[static_cast<size_t>(pending(id).released_by)].waited;
    waited = waited + (start - idle_since_);
    idle_ = false;
  }
  const Task& t = graph_->tasks_[id];
  const SimTime stall = hooks_.on_start && hooked(t) ? hooks_.on_start(t) : SimTime{};
  if (stall.ps > 0) {
    queue_.after(stall, [this, id] { execute(id); });
    return;
  }
  execute(id);
}

void GpuStreams::execute(uint32_t id) {
  const Task& t = graph_->tasks_[id];
  if (t.carries >= 0) {
    const auto carried = static_cast<uint32_t>(t.carries);
    TaskPending& d = pending(carried);
    d.released_by = t.stream;
    if (--d.waiting == 0) ready(carried);
  }
  if (t.links.empty()) {
    const SimTime duration = hooks_.duration ? hooks_.duration(id, t) : t.duration;
    queue_.after(duration, [this, id] { elapsed(id); });
  } else if (hooks_.communicate) {
    hooks_.communicate(id, t, [this, id] { elapsed(id); });
  } else {
    net_.send(
        t.links, t.bytes, t.latency, [this, id](SimTime) { elapsed(id); }, t.priority);
  }
}

void GpuStreams::elapsed(uint32_t id) {
  const int64_t carried = graph_->tasks_[id].carries;
  if (carried >= 0 && pending(static_cast<uint32_t>(carried)).waiting != kFinished) {
    held_.emplace_back(static_cast<uint32_t>(carried), id);
    return;
  }
  finished(id);
}

void GpuStreams::finished(uint32_t id) {
  pending(id).waiting = kFinished;
  const Task& t = graph_->tasks_[id];
  Stream& s = streams_[static_cast<size_t>(t.stream)];
  const SimTime now = queue_.now();
  const SimTime start = s.started;
  s.busy = s.busy + (now - start);
  s.running = false;
  if (hooks_.on_end && hooked(t)) hooks_.on_end(t, start, now);
  for (uint32_t k = graph_->first_dependent_[id]; k < graph_->first_dependent_[id + 1]; ++k) {
    TaskPending& d = pending(graph_->dependents_[k]);
    d.released_by = t.stream;
    if (--d.waiting == 0) ready(graph_->dependents_[k]);
  }
  dispatch(t.stream);
  if (!streams_[0].running && !idle_) {
    idle_ = true;
    idle_since_ = now;
  }
  // What waited for this task ends with it (a handful at most are held at a time).
  for (size_t k = 0; k < held_.size();) {
    if (held_[k].first != id) {
      ++k;
      continue;
    }
    const uint32_t holder = held_[k].second;
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(k));
    finished(holder);
  }
  if (--left_ == 0) {
    idle_ = false;
    auto finish = std::move(done_);
    finish();
  }
}

}  // namespace moe::sim
