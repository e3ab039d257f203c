// One GPU's work as a graph of tasks on streams.
//
// A stream runs one task at a time: compute tasks for their duration, communication tasks as a
// flow over their links (sharing bandwidth with every other flow there). Tasks on different
// streams run concurrently; a task starts when its dependencies are done and its stream is free.
// When several tasks of a stream are ready, the lowest `rank` goes first, then the earliest in
// the graph's order: the order a well-scheduled framework issues kernels in (MegaScale-MoE
// orders its overlapped operators by hand), rather than CUDA's strict per-stream FIFO, which
// would stall on the first task that waits for communication.
//
// Compute on the main stream (stream 0) is what the GPU spends its SMs on; time it sits idle
// while a graph is unfinished is charged to the stream whose task it was waiting for (exposed
// communication by kind).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <vector>

#include "simulator/flow_network.h"
#include "simulator/port_loads.h"

namespace moe::sim {

struct Task {
  const char* name = "";
  int stream = 0;
  SimTime duration;        // compute tasks (no links)
  std::vector<int> links;  // communication tasks: a flow of `bytes` over these
  Bytes bytes;
  SimTime latency;  // before the flow's bytes start: it holds no link (LayerOp::latency)
  Exchange exchange = Exchange::kRing;  // a collective's pattern, for callers that expand it
  int priority = 0;                     // of its flow (FlowNetwork::send)
  int rank = 0;                         // among a stream's ready tasks, lower goes first (APTMoE's
                                        // on-demand loads before prefetches)
  std::vector<uint32_t> after;          // indices of earlier tasks this one waits for
  // A task that carries task `carries` (a later one of the graph, which waits for nothing
  // else): that task starts when this one does, and this one does not end before it has. A
  // fused kernel moves its data as it computes, and holds its SMs until the data has landed,
  // however long the links take; an all-to-all that leaves the node sends its local peers'
  // bytes beside the NIC's. -1: none.
  int64_t carries = -1;
  int64_t tag = 0;  // the caller's, passed back to the hooks
};

struct StreamHooks {
  // Before it runs (memory allocation); returns how long the task's stream stalls first (a
  // caching allocator that had to free its cache and retry), zero mostly.
  std::function<SimTime(const Task&)> on_start;
  std::function<void(const Task&, SimTime start, SimTime end)> on_end;
  // False: on_start and on_end only see tasks with links or a nonzero tag (a caller whose hooks
  // do nothing for plain compute spares two calls a task).
  bool every_task = true;
  // For GPUs that run one shared graph (every GPU of a pipeline stage runs the same operators;
  // their durations, sizes and links are their own): `duration` gives this GPU's time for a
  // compute task, `communicate` runs a communication task (a collective that waits for its
  // group) and calls `done` when it has landed. Unset, a compute task takes its `duration` and a
  // communication task is one flow over its `links`.
  std::function<SimTime(uint32_t id, const Task&)> duration;
  std::function<void(uint32_t id, const Task&, std::function<void()> done)> communicate;
  // Streams whose tasks the caller starts (collectives, which start together on every member
  // of their group, as NCCL requires one issue order per communicator): a ready task there is
  // reported to `on_ready`, a stream that frees up to `on_free`, and the caller calls start().
  std::vector<bool> caller_started;
  std::function<void(uint32_t id, const Task&)> on_ready;
  std::function<void(int stream)> on_free;
};

// What a GPU tracks of each task of its running graph until it starts.
struct TaskPending {
  uint32_t waiting = 0;  // dependencies not yet finished
  int released_by = 0;   // stream of the dependency that finished last
};

// Where a GPU keeps its TaskPending entries: task i's at base[i * stride]. GPUs that run one
// graph side by side (a pipeline stage's, in lockstep) interleave theirs, so the stage's GPUs
// finishing one operator together touch one cache line rather than one each.
struct PendingSlots {
  TaskPending* base = nullptr;
  size_t stride = 1;
};

// A task graph checked and indexed once, for any number of GPUs to run.
class TaskGraph {
 public:
  // Throws std::invalid_argument when a task depends on itself or a later one.
  explicit TaskGraph(std::vector<Task> tasks);
  const std::vector<Task>& tasks() const { return tasks_; }
  size_t size() const { return tasks_.size(); }
  // The range of the tasks' streams (checked once per GPU run, not once per task).
  int min_stream() const { return min_stream_; }
  int max_stream() const { return max_stream_; }

 private:
  friend class GpuStreams;
  std::vector<Task> tasks_;
  std::vector<uint32_t> first_dependent_;  // CSR: dependents of i are [first[i], first[i + 1])
  std::vector<uint32_t> dependents_;
  std::vector<uint32_t> waiting_;  // dependencies of each task
  int min_stream_ = 0, max_stream_ = 0;
};

class GpuStreams {
 public:
  GpuStreams(EventQueue& queue, FlowNetwork& net, int streams, StreamHooks hooks);

  // Runs a graph (tasks in issue order; `after` must point backwards); `done` runs when every
  // task has finished. One graph at a time.
  void run(std::vector<Task> graph, std::function<void()> done);
  void run(std::shared_ptr<const TaskGraph> graph, std::function<void()> done);
  // The same, keeping each task's pending state in `slots` (graph->size() entries at its
  // stride), which must outlive the run.
  void run(std::shared_ptr<const TaskGraph> graph, std::function<void()> done, PendingSlots slots);

  // Starts ready task `id` of a caller-started stream, which must be free.
  void start(uint32_t id);
  bool stream_free(int stream) const { return !streams_[static_cast<size_t>(stream)].running; }

  // Main-stream idle time inside graphs that `stream`'s tasks released.
  SimTime waited_on(int stream) const { return streams_[static_cast<size_t>(stream)].waited; }
  SimTime busy(int stream) const { return streams_[static_cast<size_t>(stream)].busy; }

 private:
  void ready(uint32_t task);
  void dispatch(int stream);
  void launch(uint32_t task);
  void execute(uint32_t task);  // after launch's stall, if any
  bool caller_started(int stream) const {
    return stream < 32 && (caller_started_ >> stream & 1u) != 0;
  }
  void elapsed(uint32_t task);  // a task's own time is up, or its flow has landed
  void finished(uint32_t task);
  bool hooked(const Task& t) const { return hooks_.every_task || t.tag != 0 || !t.links.empty(); }

  EventQueue& queue_;
  FlowNetwork& net_;
  StreamHooks hooks_;
  uint32_t caller_started_ = 0;  // hooks_.caller_started as bits: asked once per task
  std::shared_ptr<const TaskGraph> graph_;
  TaskPending& pending(uint32_t task) { return slots_.base[task * slots_.stride]; }
  // What a finishing task touches sits together: a run of every GPU keeps thousands of these
  // objects, and each event's cache misses were most of its cost.
  std::vector<TaskPending> own_pending_;  // by task of the running graph, unless the caller's
  PendingSlots slots_;
  using Ready = std::pair<int, uint32_t>;  // (rank, task)
  struct Stream {
    bool running = false;
    SimTime started;  // of its running task
    SimTime busy, waited;
    std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  };
  std::vector<Stream> streams_;
  size_t left_ = 0;
  // Tasks whose own time is up, each waiting for the task it carries: (carried, task).
  std::vector<std::pair<uint32_t, uint32_t>> held_;
  bool idle_ = false;
  SimTime idle_since_;
  std::function<void()> done_;
};

}  // namespace moe::sim
