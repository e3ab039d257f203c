#include "planner/aptmoe.h"

#include <gtest/gtest.h>

#include "planner/errors.h"

namespace moe::aptmoe {

TEST(AptMoe, PopularityMetricBounds) {
  // Eq. (2): uniform over E experts gives 1/E; all tokens on one expert gives 1.
  EXPECT_DOUBLE_EQ(popularity_metric({std::vector<double>(8, 0.125)}), 0.125);
  EXPECT_DOUBLE_EQ(popularity_metric({{1, 0, 0, 0, 0, 0, 0, 0}}), 1.0);
  // The mean over layers.
  EXPECT_DOUBLE_EQ(popularity_metric({std::vector<double>(8, 0.125), {1, 0, 0, 0, 0, 0, 0, 0}}),
                   0.5625);
}

TEST(AptMoe, ProportionsHitTheTargetG) {
  for (double g : {0.125, 0.2, 0.35, 0.6, 0.95}) {
    const auto p = proportions_for_g(8, g);
    double sum = 0;
    for (double x : p) sum += x;
    EXPECT_NEAR(sum, 1.0, 1e-12);
    EXPECT_NEAR(popularity_metric({p}), g, 1e-9) << "G = " << g;
  }
  EXPECT_THROW(proportions_for_g(8, 0.05), ConfigError);
  EXPECT_THROW(proportions_for_g(8, 1.5), ConfigError);
}

namespace {
std::vector<ExpertCost> costs(const std::vector<double>& tokens) {
  const Rates rates{FlopsPerSec(1e12), FlopsPerSec(100e12), BytesPerSec(25e9)};
  std::vector<ExpertCost> out;
  for (size_t e = 0; e < tokens.size(); ++e) {
    out.push_back(expert_cost(static_cast<int>(e), tokens[e], 8e6, 4, rates, Pass::kForward));
  }
  return out;
}
}  // namespace

TEST(AptMoe, ExpertCostIsFlopsOverRate) {
  const Rates rates{FlopsPerSec(1e12), FlopsPerSec(100e12), BytesPerSec(25e9)};
  const ExpertCost f = expert_cost(0, 1000, 8e6, 4, rates, Pass::kForward);
  // 2 x 8e6 weights x 1000 tokens = 1.6e10 FLOPs; 16 ms on a 1 TFLOP/s CPU.
  EXPECT_DOUBLE_EQ(f.cpu.value(), 0.016);
  EXPECT_DOUBLE_EQ(f.load.value(), 32e6 / 25e9);
  const ExpertCost b = expert_cost(0, 1000, 8e6, 4, rates, Pass::kBackward);
  EXPECT_DOUBLE_EQ(b.cpu.value(), 2 * f.cpu.value());
}

TEST(AptMoe, AFewTokensCallOnTheCpuStreamsTheExpertsWeights) {
  // 32 MB of FP32 weights at 100 GB/s: 0.32 ms a call, once a forward, three times a backward
  // (weights read, the gradient read and written). Four calls of 2 tokens: the floor, not the
  // 0.128 ms of FLOPs; 4,000 tokens: the FLOPs. A measured CPU curve holds the floor already.
  Rates rates{FlopsPerSec(1e12), FlopsPerSec(100e12), BytesPerSec(25e9)};
  rates.cpu_memory = BytesPerSec(100e9);
  rates.calls = 4;
  EXPECT_DOUBLE_EQ(expert_cost(0, 8, 8e6, 4, rates, Pass::kForward).cpu.value(), 4 * 32e6 / 100e9);
  EXPECT_DOUBLE_EQ(expert_cost(0, 8, 8e6, 4, rates, Pass::kBackward).cpu.value(),
                   3 * 4 * 32e6 / 100e9);
  // Fewer tokens than calls: only the calls that have one stream the weights.
  EXPECT_DOUBLE_EQ(expert_cost(0, 2, 8e6, 4, rates, Pass::kForward).cpu.value(), 2 * 32e6 / 100e9);
  EXPECT_DOUBLE_EQ(expert_cost(0, 4000, 8e6, 4, rates, Pass::kForward).cpu.value(), 0.064);
  const EfficiencyCurve measured = EfficiencyCurve::constant(1.0);
  rates.cpu_efficiency = &measured;
  EXPECT_DOUBLE_EQ(expert_cost(0, 8, 8e6, 4, rates, Pass::kForward).cpu.value(), 1.28e8 / 1e12);
}

TEST(AptMoe, AnExpertsGemmRunsAtOneMicroBatchsEfficiency) {
  // 1,000 tokens over four micro-batches: four GEMMs of 4e9 FLOPs, each at the curve's
  // efficiency there; an FP32 GEMM read at its BF16-equivalent size (x 16).
  const EfficiencyCurve curve(std::vector<EfficiencyCurve::Point>{{1e9, 0.2}, {1e11, 0.8}});
  Rates rates{FlopsPerSec(1e12), FlopsPerSec(20e12), BytesPerSec(25e9)};
  rates.gpu_efficiency = &curve;
  rates.calls = 4;
  const double at_call = curve.at(4e9);
  EXPECT_NEAR(expert_cost(0, 1000, 8e6, 4, rates, Pass::kForward).gpu.value(),
              1.6e10 / (20e12 * at_call), 1e-12);
  // The backward's GEMMs are the forward's shapes, twice over.
  EXPECT_NEAR(expert_cost(0, 1000, 8e6, 4, rates, Pass::kBackward).gpu.value(),
              3.2e10 / (20e12 * at_call), 1e-12);
  rates.gpu_curve_scale = 16;
  EXPECT_NEAR(expert_cost(0, 1000, 8e6, 4, rates, Pass::kForward).gpu.value(),
              1.6e10 / (20e12 * curve.at(6.4e10)), 1e-12);
  // Fewer tokens a call, a smaller GEMM further from the peak.
  rates.gpu_curve_scale = 1;
  rates.calls = 40;
  EXPECT_GT(expert_cost(0, 1000, 8e6, 4, rates, Pass::kForward).gpu.value(),
            1.6e10 / (20e12 * at_call) * 1.5);
}

TEST(AptMoe, LoadsPopularExpertsFirstAndStopsAtROne) {
  const Allocation a =
      allocate(costs({100, 5000, 20, 800, 3000, 10, 50, 1}), Fixed{Seconds(1e-3), Seconds(1e-5)});
  // Sorted by decreasing tokens.
  for (size_t i = 1; i < a.experts.size(); ++i)
    EXPECT_GE(a.experts[i - 1].tokens, a.experts[i].tokens);
  // GPU experts form a prefix of that order.
  bool seen_cpu = false;
  for (bool gpu : a.on_gpu) {
    if (!gpu) seen_cpu = true;
    EXPECT_FALSE(gpu && seen_cpu);
  }
  // R fell to <= 1, and it was still > 1 before the last load.
  EXPECT_LE(a.final_r, 1.0);
  ASSERT_GE(a.r_trace.size(), 2u);
  EXPECT_GT(a.r_trace[a.r_trace.size() - 2], 1.0);
  EXPECT_DOUBLE_EQ(a.r_trace.back(), a.final_r);
}

TEST(AptMoe, NothingLoadsWhenCpuWorkIsAlreadyHidden) {
  const Allocation a = allocate(costs({1, 1, 1, 1}), Fixed{Seconds(1.0), Seconds(0.0)});
  for (bool gpu : a.on_gpu) EXPECT_FALSE(gpu);
  EXPECT_EQ(a.r_trace.size(), 1u);
}

TEST(AptMoe, SkewLoadsFewerExperts) {
  // The same tokens concentrated on fewer experts need fewer loads to bring R under 1.
  auto loaded = [](const Allocation& a) {
    return std::count(a.on_gpu.begin(), a.on_gpu.end(), true);
  };
  const Fixed fixed{Seconds(1e-3), Seconds(0)};
  const Allocation flat = allocate(costs({1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}), fixed);
  const Allocation skewed = allocate(costs({7000, 200, 200, 200, 100, 100, 100, 100}), fixed);
  EXPECT_LT(loaded(skewed), loaded(flat));
}

}  // namespace moe::aptmoe
