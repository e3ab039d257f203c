// Rank loads of each skew spec: what calibration's all-to-all-v sends and the simulator's
// routing drifts.
#include "planner/routing_skew.h"

#include <gtest/gtest.h>

#include <numeric>

#include "test_models.h"

namespace moe {

TEST(RoutingSkew, RankLoadsAverageOneAndPeakAtTheImbalance) {
  const ModelSpec m = testing_models::mixtral_8x7b();  // 8 experts, top-2
  for (const char* spec : {"balanced", "capacity=2", "G=0.3", "worst"}) {
    const RoutingSkew skew = parse_skew(spec, m);
    const std::vector<double> loads = skew.rank_loads(m, 8);
    ASSERT_EQ(loads.size(), 8u) << spec;
    EXPECT_NEAR(std::accumulate(loads.begin(), loads.end(), 0.0), 8.0, 1e-9) << spec;
    EXPECT_NEAR(*std::max_element(loads.begin(), loads.end()), skew.imbalance(m, 8), 1e-9) << spec;
  }
  // capacity=2: rank 0 takes twice its share, the other seven split the rest.
  const std::vector<double> capped = parse_skew("capacity=2", m).rank_loads(m, 8);
  EXPECT_DOUBLE_EQ(capped[0], 2.0);
  EXPECT_DOUBLE_EQ(capped[7], 6.0 / 7.0);
  // worst: one expert per rank and top-2, so a rank holds at most one copy of each token: the
  // busiest takes all 8 ranks' tokens once (4x), the rest share what is left.
  EXPECT_DOUBLE_EQ(parse_skew("worst", m).rank_loads(m, 8)[0], 4.0);
  // G = 0.5 wants 68 % of the routed copies on one expert, but with top-2 an expert takes at
  // most one copy of each token: its rank is held at 4x, in the planner's imbalance too.
  const RoutingSkew hot = parse_skew("G=0.5", m);
  EXPECT_DOUBLE_EQ(hot.rank_loads(m, 8)[0], 4.0);
  EXPECT_DOUBLE_EQ(hot.imbalance(m, 8), 4.0);
  // No experts to spread, or one rank: nothing to skew.
  EXPECT_EQ(parse_skew("capacity=2", m).rank_loads(m, 1), std::vector<double>{1.0});
}

}  // namespace moe
