// Routing over a run: the planner's skew without dynamics, drift by depth and iteration, seeded
// jitter.
#include "simulator/routing_generator.h"

#include <gtest/gtest.h>

#include <numeric>

#include "planner/errors.h"
#include "test_models.h"

namespace moe::sim {

namespace {
const ModelSpec kMixtral = testing_models::mixtral_8x7b();
const ModelSpec kMemFine = testing_models::memfine_model(16);
}  // namespace

TEST(RoutingGenerator, BalancedIsOneEverywhere) {
  const RoutingGenerator g(kMixtral, RoutingSkew{}, {}, 7);
  for (int64_t l : {0, 15, 31})
    for (int64_t it : {0, 9}) EXPECT_DOUBLE_EQ(g.busiest_load(l, it, 8), 1.0);
}

TEST(RoutingGenerator, WithoutDynamicsItIsThePlannersImbalance) {
  for (const char* spec : {"G=0.3", "capacity=2.5", "worst"}) {
    const RoutingSkew skew = parse_skew(spec, kMemFine);
    const RoutingGenerator g(kMemFine, skew, {}, 1);
    for (int64_t ep : {8, 32})
      EXPECT_NEAR(g.busiest_load(3, 0, ep), skew.imbalance(kMemFine, ep), 1e-12) << spec;
  }
}

TEST(RoutingGenerator, RankLoadsAverageOneAndPeakAtTheBusiestLoad) {
  // Every EP rank's load (the every-GPU simulation's): a distribution keeps its mean at
  // balanced, and a load spec puts its imbalance on rank 0 and spreads the rest evenly.
  for (const char* spec : {"G=0.3", "capacity=2.5", "worst"}) {
    const RoutingGenerator g(kMemFine, parse_skew(spec, kMemFine), {}, 1);
    for (int64_t ep : {8, 32}) {
      const std::vector<double> loads = g.rank_loads(3, 0, ep);
      ASSERT_EQ(loads.size(), static_cast<size_t>(ep));
      EXPECT_NEAR(std::accumulate(loads.begin(), loads.end(), 0.0) / static_cast<double>(ep), 1.0,
                  1e-9)
          << spec;
      EXPECT_DOUBLE_EQ(RoutingGenerator::busiest_of(loads), g.busiest_load(3, 0, ep)) << spec;
    }
  }
  const RoutingGenerator capacity(kMemFine, parse_skew("capacity=2.5", kMemFine), {}, 1);
  const std::vector<double> loads = capacity.rank_loads(3, 0, 8);
  EXPECT_DOUBLE_EQ(loads[0], 2.5);
  EXPECT_DOUBLE_EQ(loads[7], (8.0 - 2.5) / 7.0);
}

TEST(RoutingGenerator, DriftGrowsWithDepthAndSettlesOverIterations) {
  const RoutingGenerator g(kMemFine, parse_skew("capacity=18.21", kMemFine), {5.0, 0.0}, 1);
  // Iteration 0: the excess over balanced grows as (l + 1) / L; the last layer sees all of it.
  EXPECT_NEAR(g.busiest_load(15, 0, 32), 18.21, 1e-12);
  EXPECT_NEAR(g.busiest_load(7, 0, 32), 1.0 + 17.21 * 8.0 / 16.0, 1e-12);
  for (int64_t l = 1; l < 16; ++l)
    EXPECT_GT(g.busiest_load(l, 0, 32), g.busiest_load(l - 1, 0, 32));
  for (int64_t it = 1; it < 30; ++it)
    EXPECT_LT(g.busiest_load(15, it, 32), g.busiest_load(15, it - 1, 32));
  // It settles at a quarter of the excess.
  EXPECT_NEAR(g.busiest_load(15, 1000, 32), 1.0 + 17.21 * 0.25, 1e-9);
}

TEST(RoutingGenerator, JitterIsSeededAndKeepsProportions) {
  const RoutingSkew skew = parse_skew("G=0.2", kMixtral);
  const RoutingGenerator a(kMixtral, skew, {0.0, 0.2}, 42);
  const RoutingGenerator b(kMixtral, skew, {0.0, 0.2}, 42);
  const RoutingGenerator c(kMixtral, skew, {0.0, 0.2}, 43);
  const std::vector<double> pa = a.proportions(3, 5);
  EXPECT_EQ(pa, b.proportions(3, 5));  // bit-identical for the same seed
  EXPECT_NE(pa, c.proportions(3, 5));
  EXPECT_NE(pa, a.proportions(3, 6));  // and it moves between iterations
  EXPECT_NEAR(std::accumulate(pa.begin(), pa.end(), 0.0), 1.0, 1e-12);
  for (double x : pa) EXPECT_GT(x, 0.0);
  // Asking in another order gives the same numbers (counter-based noise).
  (void)c.proportions(0, 0);
  EXPECT_EQ(a.busiest_load(3, 5, 4), b.busiest_load(3, 5, 4));
}

TEST(RoutingGenerator, ParsesDynamicsBesideTheSkew) {
  const RoutingSpec s = parse_routing_spec("G=0.3,drift=20,jitter=0.1");
  EXPECT_EQ(s.skew, "G=0.3");
  EXPECT_DOUBLE_EQ(s.dynamics.drift_iterations, 20.0);
  EXPECT_DOUBLE_EQ(s.dynamics.jitter, 0.1);
  EXPECT_EQ(parse_routing_spec("drift=4").skew, "balanced");
  EXPECT_THROW(parse_routing_spec("G=0.3,drift=soon"), InputError);
  EXPECT_THROW(parse_routing_spec("G=0.3,jitter=-1"), InputError);
  EXPECT_THROW(parse_routing_spec("G=0.3,worst"), InputError);
}

}  // namespace moe::sim
