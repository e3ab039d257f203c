#include "planner/efficiency_curve.h"

#include <gtest/gtest.h>

#include <cmath>

#include "planner/errors.h"

namespace moe {

TEST(EfficiencyCurve, InterpolatesInLogSize) {
  const EfficiencyCurve c({{1e6, 0.2}, {1e8, 0.8}});
  // 1e7 is halfway between 1e6 and 1e8 in log size.
  EXPECT_NEAR(c.at(1e7), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(c.at(1e6), 0.2);
  EXPECT_DOUBLE_EQ(c.at(1e8), 0.8);
}

TEST(EfficiencyCurve, FlatAboveAndLatencyBoundBelow) {
  const EfficiencyCurve c({{1e6, 0.2}, {1e8, 0.8}});
  EXPECT_DOUBLE_EQ(c.at(1e10), 0.8);
  // Below the smallest point the transfer time stays that of the smallest point:
  // time = size / (B eff) is constant, so eff halves when size halves.
  EXPECT_DOUBLE_EQ(c.at(5e5), 0.1);
}

TEST(EfficiencyCurve, ConstantIsTheDegenerateCurve) {
  const EfficiencyCurve c = EfficiencyCurve::constant(0.7);
  for (double s : {2.0, 1e3, 1e9}) EXPECT_DOUBLE_EQ(c.at(s), 0.7);
}

TEST(EfficiencyCurve, SortsPointsAndRejectsBadOnes) {
  const EfficiencyCurve c({{1e8, 0.8}, {1e6, 0.2}});
  EXPECT_DOUBLE_EQ(c.points().front().size, 1e6);
  EXPECT_THROW(EfficiencyCurve(std::vector<EfficiencyCurve::Point>{}), ConfigError);
  EXPECT_THROW(EfficiencyCurve({{1e6, 0.0}}), ConfigError);
  EXPECT_THROW(EfficiencyCurve({{1e6, 2.0}}), ConfigError);
  EXPECT_THROW(EfficiencyCurve({{-1, 0.5}}), ConfigError);
  EXPECT_THROW(EfficiencyCurve({{1e6, 0.5}, {1e6, 0.6}}), ConfigError);
}

TEST(EfficiencyCurve, MonotoneCurveGivesMonotoneRatesEverywhere) {
  // Invariant: achieved rate eff(size) x B never falls as size grows for a rising curve.
  const EfficiencyCurve c({{65536, 0.05}, {1 << 20, 0.35}, {8 << 20, 0.7}, {64 << 20, 0.9}});
  double last = 0;
  for (double s = 1024; s < 1e9; s *= 1.3) {
    EXPECT_GE(c.at(s) + 1e-15, last);
    last = c.at(s);
  }
}

}  // namespace moe
