// APTMoE-style offloaded fine-tuning as events (APTMoE Sec. III and its baselines, Sec. IV).
//
// Weights live in host memory. Each GPU has a compute stream, a host-to-device and a
// device-to-host copy stream and the CPU cores bound to its process; the host-to-device and
// device-to-host flows of all GPUs under one PCIe switch share that switch's uplink (max-min).
// Stages run GPipe-style: a GPU visits its stages in order (forward ascending, backward
// descending) and runs every micro-batch through a stage's layers once they are loaded.
//   GPipeOffload  GPU g's GPipe stage cut into consecutive sub-stages, each loaded whole and
//                 only after the previous sub-stage has run (no prefetch).
//   Mobius        stages cross-mapped (stage s on GPU s mod G); a stage's load may start while
//                 the GPU runs the one before (two stages fit in memory), and its compute waits
//                 for the whole stage.
//   APTMoE        the same mapping and memory budget, but loading by block (a layer's
//                 attention and gate, then each GPU expert: inter-stage and inter-layer
//                 phases), experts split by eq. (1) between GPU and CPU, the CPU
//                 experts' tokens sent to the host and their outputs back over PCIe, and the
//                 load queue served in demand order (current layer first). With a popularity
//                 predictor below 1, the GPU experts it misses load only once the first
//                 micro-batch reaches the layer's gate, ahead of any queued prefetch.
// Backward sends each loaded layer's gradients back to the host over the other direction; CPU
// experts' gradients are already there. The optimizer step runs on the CPUs at the end.
// Activations between stages (a few MB per micro-batch) are not modelled.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/cluster_spec.h"
#include "planner/offload.h"
#include "planner/plan.h"
#include "planner/time_model.h"
#include "simulator/sim_time.h"
#include "simulator/training_sim.h"

namespace moe::sim {

struct OffloadRun {
  int64_t gpus = 1;
  int64_t stages = 1;
  int64_t microbatch_size = 1;
  int64_t global_batch = 1;
  Precision precision = Precision::kFp32;
  OffloadSystem system = OffloadSystem::kAptMoe;
  // APTMoE's popularity predictor (Sec. III-B): the share of the GPU experts' bytes it picks
  // right ahead of the gate (the paper: 0.85 one layer ahead with 8 experts, 0.64 four layers
  // ahead with 128). The rest is loaded on demand once the gate has run (inter-expert phase),
  // ahead of any prefetch still queued. 1: an oracle, every load prefetched.
  double predictor_accuracy = 1.0;
  // APTMoE's demand-priority scheduling (Sec. III-C, Fig. 10): the host launches up to this many
  // block loads (an attention block with its gate, or one expert) onto the copy stream at once,
  // with an event before the last; when it fires the host launches the next batch, most urgent
  // first: inter-expert (experts the predictor missed), then inter-layer (the stage the GPU is
  // running), then inter-stage (the next one). A load already launched is never overtaken, so a
  // larger window hides the host's launches but makes an urgent load wait longer. 0: an ideal
  // scheduler that picks the most urgent ready load each time the copy engine frees (the paper
  // does not give its number).
  int64_t load_window = 0;
  // APTMoE's historical expert popularity (Sec. III-B): the inter-stage phase, loading the next
  // stage while the GPU runs this one, picks experts by last iteration's ranking; this share of
  // its picks is right (the paper: 73.3 % of the least-activated experts stay so on NLLB-MoE).
  // A wrong pick loads a block the layer does not use, and the right one loads after it.
  // Experts loaded once the stage runs follow the predictor (predictor_accuracy) instead.
  double historical_accuracy = 1.0;
  bool record_trace = false;
  size_t max_trace_spans = 200000;
};

struct OffloadReport {
  Seconds iteration;
  double tokens_per_second = 0;
  Seconds optimizer;
  std::vector<Seconds> gpu_busy, cpu_busy, h2d_busy;  // per GPU
  uint64_t events = 0;
  uint64_t tasks = 0;
  // When record_trace: TraceSpan::stage is the GPU, lanes "gpu", "h2d", "d2h", "cpu".
  std::vector<TraceSpan> spans;
  bool trace_truncated = false;
};

OffloadReport simulate_offload(const TimeContext& ctx, const ClusterSpec& cluster,
                               const OffloadRun& run);

// The run an offload plan describes.
OffloadRun offload_run(const PlanChoice& plan, OffloadSystem system);

}  // namespace moe::sim
