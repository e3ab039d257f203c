// What moeplan's cost model predicts for the layer `execute` runs: each operator's time from the
// planner's own GEMM roofline (gemm_time, the calibrated curve and shape discount, at the clock
// the GPU's power limit leaves a stream busy all the time) and its
// memory-bound rate for the gathers and the activation, and two peaks: MemFine eq. (2)'s
// received-token term at the chunk's size (what the planner budgets) and the working set the
// runner's buffers make (moe_layer_run.h frees each as soon as it can).
#pragma once

#include <array>
#include <vector>

#include "calibrate/moe_layer_case.h"
#include "calibrate/moe_layer_run.h"
#include "planner/time_model.h"

namespace moe::calibrate {

struct LayerPrediction {
  std::array<double, kLayerOps> seconds{};
  double total_seconds = 0;
  double memfine_peak_bytes = 0;  // eq. (2): D_t (2h + 2g) x ceil(s'' / c)
  double buffer_peak_bytes = 0;   // the largest chunk's backward working set, BF16
};

LayerPrediction predict_layer(const TimeContext& ctx, const MoeLayerCase& c,
                              const std::vector<ChunkRouting>& routing);

}  // namespace moe::calibrate
