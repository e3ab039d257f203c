#include "planner/host_time.h"

#include <gtest/gtest.h>

#include "planner/efficiencies.h"
#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/planner_inputs.h"
#include "planner/search.h"

namespace moe {

namespace {

struct Qwen3OnH800 {
  ModelSpec model = io::load_model(root("models/hf/qwen3-235b-a22b.config.json"));
  ClusterSpec cluster = io::load_cluster(root("topologies/h800-2048.json"));
  TimeContext ctx(const Efficiencies& eff = efficiencies()) const {
    return make_time_context(model, cluster, eff, RoutingSkew{}, 4096);
  }
};

PlanChoice layout(const char* fixed, megascale::Dispatcher d = megascale::Dispatcher::kAllToAll) {
  PlanChoice c;
  c.parallel = resolve(parse_parallel(fixed));
  c.dispatcher = d;
  c.overlap = false;
  return c;
}

double ms(Seconds s) {
  return s.value() * 1e3;
}
}  // namespace

TEST(HostTime, ALayersPartsLessWhatCudaGraphsCapture) {
  // Defaults: attention 3.5 ms, router 1.5, dense FFN 1.5, experts 10 (all-to-all) or 4.5
  // (DeepEP, all-gather), forward and backward together, half each.
  const Qwen3OnH800 q;
  const TimeContext ctx = q.ctx();
  PlanChoice c = layout("tp=2,pp=32,ep=8,cp=1,mbs=1,gbs=2048");
  EXPECT_NEAR(ms(layer_host_time(ctx, c, true).forward), 7.5, 1e-9);
  EXPECT_NEAR(ms(layer_host_time(ctx, c, true).backward), 7.5, 1e-9);
  EXPECT_NEAR(ms(layer_host_time(ctx, c, false).forward), 2.5, 1e-9);
  c.dispatcher = megascale::Dispatcher::kDeepEp;
  EXPECT_NEAR(ms(layer_host_time(ctx, c, true).forward), 4.75, 1e-9);
  // Attention and router captured: the experts stay eager.
  c.cuda_graph = CudaGraph::kAttention;
  EXPECT_NEAR(ms(layer_host_time(ctx, c, true).forward), 2.25, 1e-9);
  EXPECT_NEAR(ms(layer_host_time(ctx, c, false).forward), 0.75, 1e-9);
  c.cuda_graph = CudaGraph::kFullIteration;
  EXPECT_EQ(layer_host_time(ctx, c, true).forward.value(), 0.0);
  // Recompute replays the forward's host work: all of it (full) or the moe module's block.
  c = layout("tp=2,pp=32,ep=8,cp=1,mbs=1,gbs=2048");
  c.recompute = Recompute::kFull;
  EXPECT_NEAR(ms(layer_host_time(ctx, c, true).recompute), 7.5, 1e-9);
  c.recompute = Recompute::kSelective;
  c.recompute_modules = kRecomputeMoe | kRecomputeLayernorm;
  EXPECT_NEAR(ms(layer_host_time(ctx, c, true).recompute), 5.75, 1e-9);
  c.recompute_modules = kRecomputeMoeAct | kRecomputeLayernorm;
  EXPECT_EQ(layer_host_time(ctx, c, true).recompute.value(), 0.0);
}

TEST(HostTime, MicroBatchOneWaitsForTheHostAndMicroBatchFourDoesNot) {
  // Qwen3-235B-A22B on 256 H800, PP 32: at micro-batch 1 a layer's GPU work is shorter than
  // its host time and the GPUs wait (the breakdown says so); at 4 the host hides.
  const Qwen3OnH800 q;
  const TimeContext ctx = q.ctx();
  PlanChoice one = layout("tp=2,pp=32,ep=8,cp=1,mbs=1,gbs=2048");
  one.recompute = Recompute::kSelective;
  const TimeBreakdown t1 = estimate_time(ctx, one);
  EXPECT_GT(t1.host / t1.iteration, 0.25);
  const TimeBreakdown without = estimate_time(q.ctx(without_host_time(efficiencies())), one);
  EXPECT_EQ(without.host.value(), 0.0);
  // The iteration grows by the host's exposure, and the bubble with the longer passes, less
  // the lead the last stage's head and loss gave it without the host (its passes paced the
  // pipeline then: 2.4 % of the exposure).
  const double grown = (t1.iteration - without.iteration) / t1.host;
  EXPECT_GE(grown, 0.95);
  EXPECT_LT(grown, 1.1);
  PlanChoice four = layout("tp=2,pp=32,ep=8,cp=1,mbs=4,gbs=4096");
  four.recompute = Recompute::kFull;
  EXPECT_EQ(estimate_time(ctx, four).host.value(), 0.0);
  // Full-iteration CUDA graphs take it away.
  one.cuda_graph = CudaGraph::kFullIteration;
  EXPECT_NEAR(estimate_time(ctx, one).iteration / without.iteration, 1.0, 1e-9);
}

TEST(HostTime, TheSearchMovesToLargerMicroBatchesWhenHostBound) {
  // Free to choose the micro-batch, the search avoids the host-bound one.
  const Qwen3OnH800 q;
  SearchRequest req;
  req.num_gpus = 256;
  req.global_batch = 2048;
  req.fixed = parse_parallel("tp=2,pp=32,ep=8,cp=1,vpp=1");
  req.dispatcher = megascale::Dispatcher::kAllToAll;
  req.overlap = false;
  req.threads = 1;
  const SearchResult with = search_plans(q.ctx(), req);
  ASSERT_FALSE(with.ranked.empty());
  EXPECT_GT(*with.ranked.front().choice.parallel.mbs, 1);
  const SearchResult free = search_plans(q.ctx(without_host_time(efficiencies())), req);
  ASSERT_FALSE(free.ranked.empty());
  EXPECT_EQ(*free.ranked.front().choice.parallel.mbs, 1);
}

TEST(HostTime, CalibrationConstantsSetEachCostInMicroseconds) {
  Efficiencies e = efficiencies({}, {{"host_experts_alltoall_us", 2000}, {"host_router_us", 0}});
  EXPECT_NEAR(e.host.experts_alltoall.value(), 2e-3, 1e-15);
  EXPECT_EQ(e.host.router.value(), 0.0);
  EXPECT_NEAR(constants_of(e).at("host_experts_alltoall_us"), 2000, 1e-9);
  EXPECT_THROW(set_constant(e, "host_attention_us", -1), ConfigError);
  try {
    set_constant(e, "host_everything_us", 1);
    FAIL();
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("host_experts_flex_us"), std::string::npos);
  }
}

TEST(HostTime, PlanArgumentsNameTheCudaGraphs) {
  const Qwen3OnH800 q;
  Plan p;
  p.choice = layout("tp=2,pp=32,ep=8,cp=1,mbs=1,gbs=2048");
  auto has = [&](const char* arg) {
    for (const std::string& a : megatron_arguments(p, q.model))
      if (a == arg) return true;
    return false;
  };
  EXPECT_FALSE(has("--cuda-graph-impl transformer_engine"));
  p.choice.cuda_graph = CudaGraph::kAttention;
  EXPECT_TRUE(has("--cuda-graph-impl transformer_engine"));
  EXPECT_TRUE(has("--cuda-graph-scope attn moe_router moe_preprocess"));
  p.choice.cuda_graph = CudaGraph::kFullIteration;
  EXPECT_TRUE(has("--cuda-graph-impl local"));
  EXPECT_TRUE(has("--cuda-graph-scope full_iteration"));
}

}  // namespace moe
