#include "planner/parallel.h"

#include <gtest/gtest.h>

#include "planner/errors.h"
#include "test_models.h"

namespace moe {

TEST(Parallel, ParsesEveryKey) {
  const ParallelConfig p = parse_parallel("tp=1,pp=4,ep=32,etp=1,dp=32,cp=1,vpp=1,mbs=1,gbs=960");
  EXPECT_EQ(*p.tp, 1);
  EXPECT_EQ(*p.pp, 4);
  EXPECT_EQ(*p.ep, 32);
  EXPECT_EQ(*p.gbs, 960);
  EXPECT_FALSE(p.edp.has_value());
}

TEST(Parallel, EmptyTextIsAnEmptyLayout) {
  EXPECT_FALSE(parse_parallel("").tp.has_value());
}

TEST(Parallel, RejectsBadItems) {
  EXPECT_THROW(parse_parallel("tp=0"), InputError);
  EXPECT_THROW(parse_parallel("tp=-2"), InputError);
  EXPECT_THROW(parse_parallel("tp=two"), InputError);
  EXPECT_THROW(parse_parallel("xp=2"), InputError);
  EXPECT_THROW(parse_parallel("tp=2,tp=4"), InputError);
  EXPECT_THROW(parse_parallel("tp"), InputError);
  EXPECT_THROW(parse_parallel("tp=2,,pp=2"), InputError);
}

TEST(Parallel, DerivesDpFromTheExpertSide) {
  // Folding: tp*cp*dp = etp*ep*edp, so ep=32 with tp=cp=1 needs dp=32.
  const ParallelConfig p = resolve(parse_parallel("tp=1,pp=4,ep=32"));
  EXPECT_EQ(*p.dp, 32);
  EXPECT_EQ(*p.edp, 1);
  EXPECT_EQ(p.world(), 128);
}

TEST(Parallel, DerivesExpertDp) {
  const ParallelConfig p = resolve(parse_parallel("tp=2,dp=8,ep=4"));
  EXPECT_EQ(*p.edp, 4);  // 2*8 / 4
}

TEST(Parallel, RejectsAFoldingThatCannotHold) {
  EXPECT_THROW(resolve(parse_parallel("tp=1,pp=4,ep=32,dp=1")), ConfigError);
  EXPECT_THROW(resolve(parse_parallel("tp=2,dp=2,ep=4,edp=2")), ConfigError);
}

TEST(Parallel, ChecksDivisibilityAgainstTheModel) {
  const ModelSpec m = testing_models::mixtral_8x7b();  // 32 heads, 8 KV heads, 8 experts, 32 layers
  EXPECT_NO_THROW(check(resolve(parse_parallel("tp=8,ep=8,dp=1")), m));
  EXPECT_THROW(check(resolve(parse_parallel("tp=16")), m), ConfigError);           // 8 KV heads
  EXPECT_THROW(check(resolve(parse_parallel("tp=1,ep=3,dp=3")), m), ConfigError);  // 8 experts
  EXPECT_THROW(check(resolve(parse_parallel("pp=64")), m), ConfigError);           // 32 layers
  EXPECT_THROW(check(resolve(parse_parallel("pp=2,vpp=32")), m), ConfigError);
  EXPECT_THROW(check(resolve(parse_parallel("dp=4,mbs=1,gbs=10")), m), ConfigError);
}

TEST(Parallel, UnevenLayerSplitSpreadsTheRemainder) {
  const ModelSpec m = testing_models::mixtral_8x7b();  // 32 layers
  EXPECT_EQ(layers_in_stage(m, 5, 0), 7);
  EXPECT_EQ(layers_in_stage(m, 5, 1), 7);
  EXPECT_EQ(layers_in_stage(m, 5, 2), 6);
  EXPECT_EQ(first_layer_of_stage(m, 5, 2), 14);
  int64_t total = 0;
  for (int64_t s = 0; s < 5; ++s) total += layers_in_stage(m, 5, s);
  EXPECT_EQ(total, 32);
}

}  // namespace moe
