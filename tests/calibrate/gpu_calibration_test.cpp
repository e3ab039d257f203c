// The GPU calibration's CPU side (the sizes it sweeps, the curves it writes and what the planner
// makes of them) on any machine, and its GPU side where a GPU is present (skipped, saying why,
// where none is).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>

#include "calibrate/gpu_bench.h"
#include "calibrate/gpu_curves.h"
#include "calibrate/nccl_bench.h"
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
    const Seconds t = gemm_time(ctx, {peak, &ctx.eff.gemm}, static_cast<double>(g.shape.m),
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

TEST(NcclBench, ReadsTheLaunchersWorldAndCountsBusBandwidthAsNcclTests) {
  // nccl-tests' factors: 2(n-1)/n all-reduce, (n-1)/n all-gather/reduce-scatter/all-to-all,
  // 1 for send/recv; a world of one moves nothing between GPUs.
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllToAll, 16), 0.9375);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kSendRecv, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, 1), 0.0);

  auto world = [](std::map<std::string, std::string> env) {
    return world_from_environment([env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  const NcclWorld alone = world({});
  EXPECT_EQ(alone.size, 1);
  EXPECT_EQ(alone.rank, 0);
  const NcclWorld mpi = world({{"OMPI_COMM_WORLD_RANK", "9"},
                               {"OMPI_COMM_WORLD_SIZE", "16"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  EXPECT_EQ(mpi.rank, 9);
  EXPECT_EQ(mpi.size, 16);
  EXPECT_EQ(mpi.local_rank, 1);
  const NcclWorld slurm = world({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}});
  EXPECT_EQ(slurm.local_rank, 3);  // no local rank given: the global one
  EXPECT_EQ(world({{"MOEPLAN_RANK", "1"}, {"RANK", "5"}, {"MOEPLAN_WORLD_SIZE", "2"}}).rank, 1);
  EXPECT_THROW(world({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), GpuError);
  EXPECT_THROW(world({{"WORLD_SIZE", "two"}}), GpuError);

  // A collective curve is bus bandwidth over the link; a world of one writes no points.
  const BytesPerSec nvlink = gigabytes_per_sec(450);
  const double bytes = 1 << 28;
  const nlohmann::json curve = collective_curve(
      {{Collective::kAllGather, bytes, bytes / 360e9 * 0.875, 360e9 / 0.875 * 1.0, 360e9}}, nvlink,
      "test");
  EXPECT_NEAR(curve["points"][0]["efficiency"].get<double>(), 0.8, 1e-12);
  EXPECT_TRUE(collective_curve({{Collective::kAllGather, bytes, 1e-3, bytes / 1e-3, 0.0}}, nvlink,
                               "test")["points"]
                  .empty());
}

TEST(NcclBench, ADispatchMatrixSendsEachRanksBytesByTheReceiversLoads) {
  // Every rank sends 8 MB; rank 0 carries twice the balanced load (capacity=2 over 4 ranks).
  const std::vector<double> loads = {2.0, 2.0 / 3, 2.0 / 3, 2.0 / 3};
  const auto m = dispatch_matrix(loads, 8e6);
  ASSERT_EQ(m.size(), 4u);
  for (const auto& row : m) {
    EXPECT_NEAR(row[0] + row[1] + row[2] + row[3], 8e6, 1e-6);
    EXPECT_NEAR(row[0], 4e6, 1e-6);  // half of every rank's dispatch lands on rank 0
    EXPECT_NEAR(row[1], 4e6 / 3, 1e-6);
  }
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllToAllV, 4), 0.75);
}

TEST(GpuBench, BlockScaledFp8IsHoppersOwnAndNeedsWholeBlocksOfK) {
  EXPECT_EQ(gemm_curve_name(GemmType::kFp8Block), "gemm_fp8_block");
  EXPECT_EQ(gemm_dtype(GemmType::kFp8Block), Dtype::kFp8);
  EXPECT_EQ(gemm_curve_for(Dtype::kFp8), "gemm_fp8");  // the tensorwise curve
  EXPECT_TRUE(gemm_type_runs_on(GemmType::kFp8Block, 9, 0));
  EXPECT_FALSE(gemm_type_runs_on(GemmType::kFp8Block, 10, 0));  // Blackwell: MXFP8 instead
  EXPECT_FALSE(gemm_type_runs_on(GemmType::kFp8Block, 8, 9));
  EXPECT_TRUE(gemm_type_runs_on(GemmType::kFp8, 8, 9));
  EXPECT_FALSE(gemm_type_runs_on(GemmType::kFp8, 8, 0));
  EXPECT_TRUE(gemm_type_runs_on(GemmType::kBf16, 8, 0));
  EXPECT_TRUE(gemm_type_fits(GemmType::kFp8Block, 7168));
  EXPECT_FALSE(gemm_type_fits(GemmType::kFp8Block, 4096 + 16));
  EXPECT_TRUE(gemm_type_fits(GemmType::kFp8, 4096 + 16));
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
    const DeviceInfo d = probe_system().devices.at(0);
    for (GemmType t : {GemmType::kFp8, GemmType::kFp8Block}) {
      if (!gemm_type_runs_on(t, d.compute_major, d.compute_minor)) continue;
      const GemmTiming f = time_gemm({512, 1024, 768}, t, o);
      EXPECT_GT(f.seconds, 0.0) << gemm_type_name(t);
      EXPECT_LT(f.relative_error, 5e-2) << gemm_type_name(t);
    }
  } catch (const NoGpuError& e) {
    GTEST_SKIP() << e.what();
  }
}

TEST(GpuBench, ASustainedGemmRunsBackToBackBeforeItIsTimedWhereAGpuIsPresent) {
  // --sustain: the GEMM runs back to back for the time asked before the repeats are timed, so
  // the call lasts at least that long; the product is still checked.
  BenchOptions o;
  o.warmup = 1;
  o.repeats = 3;
  o.sustain_seconds = 0.3;
  try {
    const auto begin = std::chrono::steady_clock::now();
    const GemmTiming g = time_gemm({1024, 1024, 1024}, GemmType::kBf16, o);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    EXPECT_GE(wall, 0.3);
    EXPECT_GT(g.seconds, 0.0);
    EXPECT_LT(g.relative_error, 1e-2);
  } catch (const NoGpuError& e) {
    GTEST_SKIP() << e.what();
  }
}

}  // namespace moe::calibrate
