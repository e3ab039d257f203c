// APTMoE's affinity split run for real (`moeplan affinity --execute`): one layer's forward over
// its experts in allocation order, two ways. Load-all copies every expert's BF16 weights over
// PCIe (pinned host memory, a copy stream, two device slots so the next expert loads while this
// one computes) and runs each on the GPU. The split loads only the experts eq. (1) put on the
// GPU and runs the rest on the CPU (FP32 Eigen, calibrate/cpu_expert.h) at the same time.
// The MHA block and the gate load the same way in both and are left out of both.
//
// The prediction runs the same two-slot schedule over the planner's per-expert load, GPU and CPU
// times (planner/aptmoe.h), so predicted and measured describe one schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/aptmoe.h"
#include "planner/model_spec.h"

namespace moe::calibrate {

struct AffinityExpert {
  int expert = 0;
  int64_t tokens = 0;
  bool on_gpu = false;
  double load_s = 0, gpu_s = 0, cpu_s = 0;  // the planner's prediction
};

struct AffinityCase {
  int64_t hidden = 0, ffn = 0;
  bool gated = false;
  std::vector<AffinityExpert> experts;  // allocation order (decreasing intensity)
};

struct AffinityTimes {
  double load_all_s = 0;   // every expert loaded and run on the GPU
  double split_s = 0;      // the later of the two paths below
  double split_gpu_s = 0;  // the GPU experts' loads and runs
  double split_cpu_s = 0;  // the CPU experts, one after another on the host's threads
};

// The case of an eq. (1) allocation of model `m`'s experts (tokens rounded, at least 1 each).
AffinityCase affinity_case(const ModelSpec& m, const aptmoe::Allocation& a);

// Loads and GPU runs through `slots` device slots: a load waits for its slot to be freed by
// the run two experts back; a run waits for its load and for the previous run.
double two_slot_pipeline(const std::vector<double>& load, const std::vector<double>& run,
                         int slots = 2);
AffinityTimes predict_affinity(const AffinityCase& c);

// On GPU `device` with `threads` CPU threads: a warm-up, then the median of `repeats` runs.
// Throws NoGpuError without a GPU.
AffinityTimes run_affinity(const AffinityCase& c, int device, int threads, int repeats);

}  // namespace moe::calibrate
