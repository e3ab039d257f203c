#include "planner/one_change.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "planner/planner_inputs.h"

namespace moe {

namespace {

const OneChange* find(const std::vector<OneChange>& changes, const std::string& change) {
  const auto it = std::find_if(changes.begin(), changes.end(),
                               [&](const OneChange& k) { return k.change == change; });
  return it == changes.end() ? nullptr : &*it;
}

}  // namespace

TEST(OneChange, EachChangeIsTheRunWithOnlyThatTurned) {
  // Mixtral-8x7B on 32 H100 as a Megatron default would run it: the unfused permutation, no
  // overlap, the all-gather dispatcher, plain DDP. Each change is priced as the run with that
  // one switch or size turned, the fitting ones first and each group by time.
  const Inputs s("mixtral-8x7b.json", "h100-256.json");
  PlanChoice r = plan_of("tp=2,pp=4,ep=8,etp=1,cp=1,vpp=1,mbs=1,gbs=256,dp=4");
  r.permute_fusion = false;
  r.overlap = false;
  r.dispatcher = megascale::Dispatcher::kAllGather;
  r.zero_stage = 1;
  const Bytes hbm = s.cluster.node.gpu.hbm_capacity;
  const PlanScore base = score_plan(s.ctx, r, hbm, 1.0, std::nullopt);
  const std::vector<OneChange> changes = one_change_at_a_time(s.ctx, r, hbm, 1.0, std::nullopt);
  ASSERT_GE(changes.size(), 12u);
  for (size_t i = 1; i < changes.size(); ++i) {
    const OneChange &a = changes[i - 1], &b = changes[i];
    EXPECT_TRUE(a.score.memory.fits >= b.score.memory.fits);
    if (a.score.memory.fits == b.score.memory.fits) {
      EXPECT_LE(a.score.time.iteration, b.score.time.iteration);
    }
  }
  // Fusing the permutation turns that switch alone, and moves fewer bytes.
  const OneChange* fused = find(changes, "--moe-permute-fusion");
  ASSERT_NE(fused, nullptr);
  PlanChoice expected = r;
  expected.permute_fusion = true;
  EXPECT_EQ(fused->choice.describe(), expected.describe());
  EXPECT_LE(fused->score.time.iteration, base.time.iteration);
  // Full recompute is slower and leaner.
  const OneChange* full = find(changes, "--recompute-granularity full");
  ASSERT_NE(full, nullptr);
  EXPECT_GT(full->score.time.iteration, base.time.iteration);
  EXPECT_LT(full->score.peak_bytes, base.peak_bytes);
  // What the run has already, or the layout cannot take, is not offered: the run's own
  // dispatcher and ZeRO stage, a micro-batch of 1/2, FP8 back to BF16.
  EXPECT_EQ(find(changes, "--moe-token-dispatcher-type allgather"), nullptr);
  EXPECT_NE(find(changes, "--moe-token-dispatcher-type alltoall"), nullptr);
  EXPECT_EQ(find(changes, "--use-distributed-optimizer"), nullptr);
  EXPECT_NE(find(changes, "plain DDP (no --use-distributed-optimizer)"), nullptr);
  EXPECT_NE(find(changes, "--micro-batch-size 2"), nullptr);
  EXPECT_EQ(find(changes, "--micro-batch-size 0"), nullptr);
  EXPECT_EQ(find(changes, "BF16 (no --fp8-format)"), nullptr);
  EXPECT_NE(find(changes, "--overlap-moe-expert-parallel-comm --tp-comm-overlap"), nullptr);
  // Virtual stages where the layers split: 32 over 4 stages take 2 and 8 a stage, not 64.
  EXPECT_NE(find(changes, "--num-virtual-stages-per-pipeline-rank 2"), nullptr);
  // A batch the doubled micro-batch does not split into is left out: GBS 4 over dp 4.
  PlanChoice small = plan_of("tp=2,pp=4,ep=8,etp=1,cp=1,vpp=1,mbs=1,gbs=4,dp=4");
  EXPECT_EQ(
      find(one_change_at_a_time(s.ctx, small, hbm, 1.0, std::nullopt), "--micro-batch-size 2"),
      nullptr);
  // An APTMoE offload plan is not a Megatron run.
  PlanChoice offload = r;
  offload.offload = true;
  EXPECT_TRUE(one_change_at_a_time(s.ctx, offload, hbm, 1.0, std::nullopt).empty());
}

}  // namespace moe
