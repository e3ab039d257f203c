// The GPU calibration's CPU side (the sizes it sweeps, the curves it writes and what the planner
// makes of them) on any machine, and its GPU side where a GPU is present (skipped, saying why,
// where none is).
#include <gtest/gtest.h>

#include <cmath>

#include "calibrate/gpu_bench.h"
#include "calibrate/gpu_curves.h"
#include "planner/io/loaders.h"
#include "planner/time_model.h"
#include "test_models.h"
#include "test_paths.h"

namespace moe::calibrate {

TEST(GpuCurves, SweepsThePlannersShapesAndSizes) {
  const std::vector<GemmShape> squares = gemm_shapes(nullptr, false);
  ASSERT_EQ(squares.size(), 6u);  // 256 .. 4096 and 8192
  EXPECT_EQ(squares.back().m, 8192);
  for (size_t i = 1; i < squares.size(); ++i) EXPECT_LT(squares[i - 1].flops(), squares[i].flops());

  const ModelSpec m = testing_models::mixtral_8x7b();
  const std::vector<GemmShape> shapes = gemm_shapes(&m, false);
  auto has = [&](int64_t rows, int64_t n, int64_t k) {
    return std::any_of(shapes.begin(), shapes.end(),
                       [&](const GemmShape& s) { return s.m == rows && s.n == n && s.k == k; });
  };
  EXPECT_TRUE(has(128, 2 * 14336, 4096));         // expert up projection (gated) at 128 tokens
  EXPECT_TRUE(has(32768, 4096, 14336));           // expert down projection at 32K tokens
  EXPECT_TRUE(has(4096, 4096 + 2 * 1024, 4096));  // QKV with GQA (8 KV heads)
  for (const GemmShape& s : shapes) EXPECT_EQ(s.m % 16 + s.n % 16 + s.k % 16, 0);

  const std::vector<double> sizes = transfer_sizes(false);
  EXPECT_EQ(sizes.front(), 4096.0);
  EXPECT_EQ(sizes.back(), 1073741824.0);
  EXPECT_EQ(transfer_sizes(true).size(), 3u);
}

TEST(GpuCurves, TheWrittenCurvesReproduceTheMeasurementsThroughThePlanner) {
  // Measurements of an imagined H100: two GEMMs, one with a shallow K that moeplan's shape
  // factor discounts, and three copies. Written as a calibration file and loaded back, the
  // planner's gemm_time gives the measured times and the copy curve the measured rates.
  const ClusterSpec cluster =
      io::load_cluster(std::string(MOEPLAN_SOURCE_DIR) + "/topologies/h100-1.json");
  const FlopsPerSec peak = cluster.node.gpu.peak_for(Dtype::kBf16);
  const std::vector<GemmTiming> gemms = {
      {{8192, 8192, 8192}, GemmType::kBf16, 2.0 * 8192 * 8192 * 8192 / (0.8 * peak.value()), 3e-3},
      {{4096, 4096, 176}, GemmType::kBf16, 2.0 * 4096 * 4096 * 176 / (0.3 * peak.value()), 3e-3}};
  const BytesPerSec hbm = cluster.node.gpu.hbm_bandwidth;
  std::vector<CopyTiming> copies;
  for (auto [bytes, share] : {std::pair{65536.0, 0.05}, {4194304.0, 0.3}, {268435456.0, 0.45}})
    copies.push_back({CopyKind::kDeviceToDevice, bytes, bytes / (share * hbm.value())});

  nlohmann::json doc = {{"format", "moeplan-calibration/1"},
                        {"curves",
                         {{"gemm", gemm_curve(gemms, peak, "test")},
                          {"d2d_copy", transfer_curve(copies, hbm, "test")}}}};
  const io::Calibration cal = io::calibration_from_json(doc, "test");
  const ModelSpec m = testing_models::mixtral_8x7b();
  const TimeContext ctx =
      make_time_context(m, cluster, efficiencies(cal.curves), RoutingSkew{}, 4096);
  for (const GemmTiming& g : gemms) {
    const Seconds t = gemm_time(ctx, peak, static_cast<double>(g.shape.m),
                                static_cast<double>(g.shape.k), static_cast<double>(g.shape.n));
    EXPECT_NEAR(t.value() / g.seconds, 1.0, 1e-9) << g.shape.k;
  }
  // The shallow GEMM's point is its measured 0.3 over the shape factor (K = 176: 0.58).
  const double factor = gemm_shape_factor(4096, 176, 4096);
  EXPECT_NEAR(ctx.eff.gemm.at(2.0 * 4096 * 4096 * 176), 0.3 / factor, 1e-9);
  EXPECT_LT(factor, 0.6);
  for (const CopyTiming& c : copies)
    EXPECT_NEAR(ctx.eff.d2d_copy.at(c.bytes), c.bytes / c.seconds / hbm.value(), 1e-9);
  EXPECT_EQ(doc["curves"]["d2d_copy"]["points"].size(), 3u);
}

TEST(GpuBench, TimesAndChecksAGemmAndACopyWhereAGpuIsPresent) {
  BenchOptions o;
  o.warmup = 1;
  o.repeats = 3;
  try {
    const GemmTiming g = time_gemm({512, 512, 512}, GemmType::kBf16, o);
    EXPECT_GT(g.seconds, 0.0);
    EXPECT_LT(g.relative_error, 1e-2);
    const CopyTiming c = time_copy(CopyKind::kBothDirections, 1 << 20, o);
    EXPECT_GT(c.seconds, 0.0);
  } catch (const NoGpuError& e) {
    GTEST_SKIP() << e.what();
  }
}

}  // namespace moe::calibrate
