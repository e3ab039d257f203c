// The CPU part of `moeplan calibrate`: a sweep of the Eigen expert FFN over token counts for each
// thread count, turned into calibration curves ("cpu_expert_ffn" for all threads, and
// "cpu_expert_ffn_<n>t" per thread count) of forward efficiency against forward FLOPs, relative
// to the best rate measured at that thread count (recorded as reference_GFLOPS, which belongs in
// the cluster file's achievable_GFLOPS). planner/aptmoe's affinity split reads the curve by work.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calibrate/cpu_expert.h"

namespace moe::calibrate {

struct CpuSweep {
  ExpertShape shape;
  // From one token: APTMoE sends its coldest experts, a few tokens each, to the CPU, where a
  // curve that began at 16 would hold the 16-token time for them.
  std::vector<int64_t> tokens = {1, 4, 16, 64, 256, 1024, 4096};
  std::vector<int> threads;  // empty: 1 and every hardware thread
  int repeats = 5;
  // Wall time one point may take: fewer repeats where one pass is long, and a thread count stops
  // at the token count whose single pass (extrapolated from the last point) would overrun it. A
  // full-width expert at 4,096 tokens on one core takes minutes a pass, far past any lease.
  double seconds_per_point = 20;
};

// One curve per thread count, as calibration JSON (name -> curve object); `progress` is told
// about every finished point. Throws std::runtime_error when a result fails its reference check.
using CurveDone = std::function<void(const std::string& name, const nlohmann::json& curve)>;
void run_cpu_sweep(const CpuSweep& sweep, const std::vector<std::string>& skip,
                   const std::function<void(const CpuExpertTiming&)>& progress,
                   const CurveDone& done);

// A curve object from timings at one thread count.
nlohmann::json cpu_curve(const ExpertShape& shape, const std::vector<CpuExpertTiming>& timings);

}  // namespace moe::calibrate
