// `moeplan execute`'s measurement: check the device's layer against the CPU reference on a
// small case, then run the plan's layer at each chunk count (a warm-up, then the median of the
// repeats per operator and in total, the largest peak) beside the cost model's prediction.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "calibrate/layer_device.h"
#include "calibrate/moe_layer_case.h"
#include "calibrate/moe_layer_prediction.h"
#include "calibrate/moe_layer_run.h"

namespace moe::calibrate {

struct ExecuteOptions {
  std::vector<int64_t> chunks = {1, 2, 4, 8};
  int repeats = 5;
  uint32_t seed = 1;
  int64_t check_tokens = 16;  // the reference check's tokens (over top-k + 1 experts)
  // BF16 storage rounds each operator's output: the check allows this relative error.
  double check_tolerance = 3e-2;
};

struct ChunkExecution {
  int64_t chunks = 1;
  LayerPrediction predicted;
  LayerRun measured;  // medians per operator and in total; the largest peak of the repeats
};

struct LayerExecution {
  std::string device;
  MoeLayerCase layer;
  double check_error = 0;  // largest relative error of output and gradients vs the CPU
  std::vector<ChunkExecution> runs;
};

// Throws GpuError when the device disagrees with the reference beyond the tolerance, and
// InputError when a chunk count exceeds the tokens. `progress(i, n)` after each chunk count.
LayerExecution execute_layer(LayerDevice& device, const TimeContext& ctx, const MoeLayerCase& c,
                             const ExecuteOptions& o,
                             const std::function<void(size_t, size_t)>& progress = {});

}  // namespace moe::calibrate
