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

TEST(Parallel, EndStagesTakeTheirOwnLayerCounts) {
  const ModelSpec m = testing_models::mixtral_8x7b();  // 32 layers
  // pp = 5 cannot split 32 layers evenly; with 5 on the first and 3 on the last stage the
  // other 24 split 8 / 8 / 8.
  EXPECT_THROW(check(resolve(parse_parallel("pp=5")), m), ConfigError);
  const ParallelConfig p = resolve(parse_parallel("pp=5,pp_first=5,pp_last=3"));
  EXPECT_NO_THROW(check(p, m));
  EXPECT_EQ(layers_in_stage(m, p, 0), 5);
  EXPECT_EQ(layers_in_stage(m, p, 1), 8);
  EXPECT_EQ(layers_in_stage(m, p, 3), 8);
  EXPECT_EQ(layers_in_stage(m, p, 4), 3);
  EXPECT_EQ(first_layer_of_stage(m, p, 2), 13);
  int64_t total = 0;
  for (int64_t s = 0; s < 5; ++s) total += layers_in_stage(m, p, s);
  EXPECT_EQ(total, 32);
  EXPECT_THROW(check(resolve(parse_parallel("pp=5,pp_first=4,pp_last=3")), m),
               ConfigError);  // 25 over 3
  EXPECT_THROW(check(resolve(parse_parallel("pp=4,vpp=2,pp_first=2")), m), ConfigError);
}

}  // namespace moe
