#include "planner/units.h"

#include <gtest/gtest.h>

namespace moe {

TEST(Units, BytesOverBandwidthIsTime) {
  // 1 GB over 100 GB/s = 10 ms.
  const Seconds t = gigabytes(1) / gigabytes_per_sec(100);
  EXPECT_DOUBLE_EQ(t.value(), 0.01);
}

TEST(Units, FlopsOverRateIsTime) {
  const Seconds t = Flops(989e12) / teraflops_per_sec(989);
  EXPECT_DOUBLE_EQ(t.value(), 1.0);
}

TEST(Units, RatesTimesTimeGiveAmounts) {
  EXPECT_DOUBLE_EQ((gigabytes_per_sec(2) * Seconds(3)).value(), 6e9);
  EXPECT_DOUBLE_EQ((Bytes(8) / Seconds(2)).value(), 4.0);
}

TEST(Units, GigabitsAreEighthsOfGigabytes) {
  EXPECT_DOUBLE_EQ(gigabits_per_sec(200).value(), 25e9);
}

TEST(Units, LikeQuantitiesCompareAndDivideToNumbers) {
  EXPECT_LT(Bytes(1), Bytes(2));
  EXPECT_DOUBLE_EQ(Bytes(6) / Bytes(3), 2.0);
  Bytes b(1);
  b += Bytes(2);
  EXPECT_DOUBLE_EQ(b.value(), 3.0);
}

}  // namespace moe
