// The schedule `affinity --execute` runs and predicts: two device slots for expert weights, so
// loads run ahead of the GPU by at most two experts, and the CPU experts beside them.
#include "calibrate/affinity_run.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "calibrate/device_info.h"

namespace moe::calibrate {

TEST(AffinityRun, TwoSlotsOverlapLoadsWithRuns) {
  // Loads dominate: the last run follows the last load.
  EXPECT_DOUBLE_EQ(two_slot_pipeline({2, 2, 2}, {1, 1, 1}), 7.0);
  // Runs dominate: the third load waits for the first run to free its slot (t = 11), and the
  // runs go back to back from t = 1.
  EXPECT_DOUBLE_EQ(two_slot_pipeline({1, 1, 1}, {10, 10, 10}), 31.0);
  // One slot serialises load and run.
  EXPECT_DOUBLE_EQ(two_slot_pipeline({1, 1}, {10, 10}, 1), 22.0);
  EXPECT_DOUBLE_EQ(two_slot_pipeline({}, {}), 0.0);
}

TEST(AffinityRun, SplitIsTheLaterOfItsGpuAndCpuPaths) {
  AffinityCase c{64, 128, true, {}};
  c.experts = {{0, 100, true, 2, 1, 8},
               {1, 50, true, 2, 1, 4},
               {2, 10, false, 2, 1, 3},
               {3, 5, false, 2, 1, 2}};
  const AffinityTimes t = predict_affinity(c);
  EXPECT_DOUBLE_EQ(t.load_all_s, 9.0);
  EXPECT_DOUBLE_EQ(t.split_gpu_s, 5.0);
  EXPECT_DOUBLE_EQ(t.split_cpu_s, 5.0);
  EXPECT_DOUBLE_EQ(t.split_s, 5.0);
  c.experts[3].cpu_s = 6;
  EXPECT_DOUBLE_EQ(predict_affinity(c).split_s, 9.0);
}

// On a GPU the split runs and times both schedules; without one it says so and the test skips.
TEST(AffinityRun, RunsBothSchedulesWhereAGpuIsPresent) {
  AffinityCase c{256, 512, true, {}};
  c.experts = {{0, 512, true, 1, 1, 1}, {1, 256, true, 1, 1, 1}, {2, 32, false, 1, 1, 1}};
  try {
    const AffinityTimes t = run_affinity(c, 0, 1, 2);
    EXPECT_GT(t.load_all_s, 0.0);
    EXPECT_GT(t.split_gpu_s, 0.0);
    EXPECT_GT(t.split_cpu_s, 0.0);
    // Each run takes the later path, so the median of those is at least either median.
    EXPECT_GE(t.split_s, std::max(t.split_gpu_s, t.split_cpu_s));
  } catch (const NoGpuError& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU"), std::string::npos);
    GTEST_SKIP() << e.what();
  }
}

}  // namespace moe::calibrate
