#include "planner/default_efficiency.h"

namespace moe::defaults {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}

EfficiencyCurve alltoall_inter_node() {
  return EfficiencyCurve({{64.0 * 1024, 0.05},
                          {1 * kMiB, 0.35},
                          {8 * kMiB, 0.70},
                          {64 * kMiB, 0.88},
                          {512 * kMiB, 0.92}});
}

EfficiencyCurve allgather_intra_node() {
  return EfficiencyCurve({{64.0 * 1024, 0.04},
                          {1 * kMiB, 0.30},
                          {8 * kMiB, 0.62},
                          {64 * kMiB, 0.76},
                          {512 * kMiB, 0.80}});
}

EfficiencyCurve d2d_copy() {
  return EfficiencyCurve(
      {{64.0 * 1024, 0.05}, {1 * kMiB, 0.25}, {16 * kMiB, 0.42}, {256 * kMiB, 0.45}});
}

}  // namespace moe::defaults
