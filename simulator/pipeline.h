// A pipeline-parallel iteration as events: each stage's GPU runs its micro-batches' forward and
// backward passes in schedule order, one at a time, and activations (forward) and gradients
// (backward) cross each stage boundary as flows on that boundary's link.
//
// Schedules: 1F1B (stage s runs min(p - s - 1, m) warm-up forwards, then alternates one
// forward and one backward, then drains), interleaved 1F1B (each stage holds v model chunks;
// Megatron's order: (p - s - 1) x 2 + (v - 1) x p warm-up passes, chunks taken p micro-batches
// at a time) and GPipe (all forwards, then all backwards). With equal stages and free links,
// 1F1B and GPipe take (m + p - 1)(t_f + t_b) and interleaved (m + (p - 1)/v)(t_f + t_b), which
// tests check.
// Leaf durations come from the planner (stage_times); the simulator adds the waiting.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "simulator/flow_network.h"

namespace moe::sim {

struct StageWork {
  SimTime forward, backward;  // one micro-batch on this stage
};

struct PipelineSpec {
  std::vector<StageWork> stages;
  int64_t microbatches = 1;
  int64_t chunks = 1;  // v: model chunks per stage (interleaved when > 1; m must divide by p)
  bool gpipe = false;
  Bytes boundary_bytes;            // activation (or gradient) of one micro-batch at a boundary
  BytesPerSec boundary_bandwidth;  // per direction
  SimTime boundary_latency;
};

// One span of activity, for reports and traces.
struct Span {
  int64_t stage = 0;
  std::string lane;  // "compute" or "send"
  std::string name;  // "F3", "B3", "send F3"
  SimTime start, end;
};

struct PipelineResult {
  SimTime makespan;
  std::vector<SimTime> busy;  // compute time per stage
  std::vector<Span> spans;
  uint64_t events = 0;
};

PipelineResult simulate_pipeline(const PipelineSpec& spec);

// One pass of the schedule: forward or backward of micro-batch `micro` on model chunk `chunk`.
struct PassId {
  int64_t stage = 0;
  int64_t chunk = 0;
  int64_t micro = 0;
  bool forward = true;
};

// The schedule on a caller's queue and network, for simulations whose passes are more than a
// duration: `run` starts a pass and calls `done` when it ends (the pipeline runs one pass per
// stage at a time, in schedule order). Boundary transfers go over `down_links[s]` /
// `up_links[s]` when given (so they share the stage's NIC with other traffic), else over links
// of their own, each after `down_latency[s]` / `up_latency[s]` when given, else the spec's
// boundary latency. `on_stage_done` fires when a stage has run its last pass.
struct PipelineHooks {
  std::function<void(const PassId&, std::function<void()> done)> run;
  std::function<void(int64_t stage)> on_stage_done;
  std::vector<std::vector<int>> down_links, up_links;
  std::vector<SimTime> down_latency, up_latency;
  // A boundary send from `stage` over `links` starts (+1) or lands (-1): the caller's link
  // busy figures count it.
  std::function<void(int64_t stage, const std::vector<int>& links, int delta)> on_send;
  int boundary_priority = 0;  // of the boundary flows (FlowNetwork::send)
};
class PipelineDriver {
 public:
  PipelineDriver(const PipelineSpec& spec, EventQueue& queue, FlowNetwork& net,
                 PipelineHooks hooks);
  ~PipelineDriver();
  void start();
  // Valid once the queue has run dry; throws std::logic_error if the schedule deadlocked.
  PipelineResult finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe::sim
