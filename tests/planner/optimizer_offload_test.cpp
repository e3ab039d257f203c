// Megatron's optimizer CPU offload (--optimizer-cpu-offload --optimizer-offload-fraction): the
// states that leave the GPU, the step the CPU takes, and the plan file and arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/search.h"
#include "test_models.h"
#include "test_paths.h"

namespace moe {
namespace {

struct Case {
  ModelSpec m = testing_models::mixtral_8x7b();
  ClusterSpec cl =
      io::load_cluster(std::string(MOEPLAN_SOURCE_DIR) + "/topologies/h100-sxm-8.json");
  TimeContext ctx = make_time_context(m, cl, efficiencies(), RoutingSkew{}, 4096);
  PlanChoice choice(double offload, int zero) const {
    PlanChoice c;
    c.parallel = resolve(parse_parallel("tp=1,pp=1,ep=8,dp=8,mbs=1,gbs=64"));
    c.recompute = Recompute::kFull;
    c.zero_stage = zero;
    c.optimizer_offload = offload;
    return c;
  }
  StageMemory stage(double offload, int zero) const {
    const PlanChoice c = choice(offload, zero);
    return estimate_memory(m, ctx.params, c.parallel,
                           memory_request(ctx, c, cl.node.gpu.hbm_capacity, 1.0))
        .stages.front();
  }
};

TEST(OptimizerOffload, TheOffloadedShareOfTheStatesLeavesTheGpu) {
  // Without sharding (ZeRO-0) every parameter a GPU holds has its 12 bytes of FP32 master
  // weight, momentum and variance; offloading a share f sends 12 f bytes of each to the host.
  const Case k;
  const StageMemory kept = k.stage(0, 0);
  for (double f : {0.5, 1.0}) {
    const StageMemory sent = k.stage(f, 0);
    EXPECT_NEAR((kept.static_bytes - sent.static_bytes).value(), 12.0 * f * kept.params_per_gpu,
                1e3)
        << f;
    EXPECT_EQ(kept.activation_bytes, sent.activation_bytes);
  }
  // Mixtral-8x7B does not fit 8 x 80 GB as Megatron keeps it (experts unsharded, EP 8 = DP 8)
  // and does with the optimizer on the CPU.
  EXPECT_FALSE(k.stage(0, 1).fits);
  EXPECT_TRUE(k.stage(1.0, 1).fits);
}

TEST(OptimizerOffload, TheOffloadedStatesMustFitTheHostMemory) {
  // Each GPU's offloaded states take its share of the node's host memory (2 x 1,024 GB over 8
  // GPUs here): 12 bytes of each parameter it holds, Mixtral-8x7B unsharded (ZeRO-0).
  // With a tenth of the host memory the same plan does not fit, and the search says host
  // memory is what binds.
  Case k;
  const StageMemory roomy = k.stage(1.0, 0);
  EXPECT_NEAR(roomy.host_bytes.value(), 12.0 * roomy.params_per_gpu, 1e3);
  EXPECT_TRUE(roomy.host_fits);
  EXPECT_DOUBLE_EQ(k.ctx.host_memory_per_gpu.value(), 2048e9 / 8);
  for (CpuSocket& s : k.cl.node.cpus) s.memory = s.memory * 0.1;
  k.ctx = make_time_context(k.m, k.cl, efficiencies(), RoutingSkew{}, 4096);
  const StageMemory tight = k.stage(1.0, 0);
  EXPECT_FALSE(tight.host_fits);
  EXPECT_FALSE(tight.fits);
  // The search runs the offload as Megatron does, on the distributed optimizer (ZeRO-1: the
  // experts' states, over an expert-DP group of one, stay whole).
  SearchRequest req;
  req.num_gpus = 8;
  req.global_batch = 64;
  req.optimizer_offload = 1.0;
  req.fixed = parse_parallel("tp=1,pp=1,ep=8,cp=1");
  req.zero = 1;
  const SearchResult r = search_plans(k.ctx, req);
  EXPECT_TRUE(r.ranked.empty());
  ASSERT_TRUE(r.closest.has_value());
  EXPECT_EQ(r.closest->holder, "a GPU's share of host memory");
  EXPECT_DOUBLE_EQ(r.closest->capacity.value(), 204.8e9 / 8);
  EXPECT_NEAR(r.closest->needed.value(), k.stage(1.0, 1).host_bytes.value(), 1e3);
  // Megatron has no optimizer offload on plain DDP.
  req.zero = 0;
  EXPECT_THROW(search_plans(k.ctx, req), ConfigError);
}

TEST(OptimizerOffload, TheCpuStepsItsShareWhileTheGpuStepsTheRest) {
  // The GPU's Adam reads and writes 28 bytes a parameter of its shard at HBM's pace; the CPU's
  // share copies its FP32 gradients out and the new BF16 weights back over the host link and
  // steps at the socket's memory bandwidth (307 GB/s shared by 4 GPUs), the three overlapped.
  const Case k;
  const DpSync gpu_only = dp_sync_times(k.ctx, k.choice(0, 1), 0);
  const Seconds step_gpu = gpu_only.optimizer;
  const double local = step_gpu.value() * k.ctx.links.hbm.value() * k.ctx.eff.memory_bound / 28.0;
  EXPECT_DOUBLE_EQ(k.ctx.links.host_memory.value(), 307e9 / 4);
  EXPECT_NEAR(k.ctx.links.host.value(), 63.0e9 / 2, 0.1e9);
  const double copy_rate = k.ctx.links.host.value() * k.ctx.eff.pcie_h2d.at(1e9);
  for (double f : {0.5, 1.0}) {
    const double on_cpu = local * f;
    const double expected =
        std::max({step_gpu.value() * (1 - f), on_cpu * 4.0 / copy_rate,
                  on_cpu * 28.0 / (k.ctx.links.host_memory.value() * k.ctx.eff.memory_bound),
                  on_cpu * 2.0 / copy_rate});
    EXPECT_NEAR(dp_sync_times(k.ctx, k.choice(f, 1), 0).optimizer.value(), expected,
                1e-9 * expected)
        << f;
  }
  // The CPU is the slower: the whole iteration waits for it.
  EXPECT_GT(estimate_time(k.ctx, k.choice(1.0, 1)).optimizer, step_gpu * 10.0);
}

TEST(OptimizerOffload, PlanFilesAndMegatronArgumentsCarryTheShare) {
  const Case k;
  Plan plan;
  plan.choice = k.choice(0.5, 1);
  plan.score = score_plan(k.ctx, plan.choice, k.cl.node.gpu.hbm_capacity, 1.0);
  const std::vector<std::string> args = megatron_arguments(plan, k.m, k.cl.node.num_gpus);
  for (const char* flag : {"--optimizer-cpu-offload", "--optimizer-offload-fraction 0.5",
                           "--use-precision-aware-optimizer", "--overlap-cpu-optimizer-d2h-h2d"})
    EXPECT_NE(std::find(args.begin(), args.end(), flag), args.end()) << flag;
  const nlohmann::json ds = io::deepspeed_config(plan)["zero_optimization"];
  EXPECT_EQ(ds["offload_optimizer"]["device"], "cpu");
  EXPECT_DOUBLE_EQ(ds["offload_optimizer"]["ratio"].get<double>(), 0.5);
  nlohmann::json j = io::plan_to_json(plan, k.m, k.cl);
  EXPECT_DOUBLE_EQ(io::plan_choice_from_json(j, "plan.json").optimizer_offload, 0.5);
  j["switches"]["optimizer_offload"] = 1.5;
  EXPECT_THROW(io::plan_choice_from_json(j, "plan.json"), InputError);
}

TEST(OptimizerOffload, Fp8WeightsStayBf16UnlessTheRecipeIsDelayed) {
  // Megatron asserts that --fp8-param-gather beside --optimizer-cpu-offload runs delayed
  // scaling: other FP8 recipes drop the flag and keep BF16 weights (2 bytes a parameter on the
  // GPU and on the DP all-gather); delayed keeps FP8 weights.
  const Case k;
  auto flagged = [&](Fp8Recipe recipe, double offload) {
    Plan plan;
    plan.choice = k.choice(offload, 1);
    plan.choice.precision = Precision::kFp8;
    plan.choice.fp8_recipe = recipe;
    const std::vector<std::string> args = megatron_arguments(plan, k.m, k.cl.node.num_gpus);
    return std::find(args.begin(), args.end(), "--fp8-param-gather") != args.end();
  };
  EXPECT_TRUE(flagged(Fp8Recipe::kTensorwise, 0));
  EXPECT_FALSE(flagged(Fp8Recipe::kTensorwise, 1));
  EXPECT_TRUE(flagged(Fp8Recipe::kDelayed, 1));
  PlanChoice c = k.choice(1.0, 0);
  c.precision = Precision::kFp8;
  c.fp8_recipe = Fp8Recipe::kBlockwise;
  EXPECT_DOUBLE_EQ(parameter_bytes(c), 2.0);
  const MemoryReport bf16_weights = estimate_memory(
      k.m, k.ctx.params, c.parallel, memory_request(k.ctx, c, k.cl.node.gpu.hbm_capacity, 1.0));
  c.fp8_recipe = Fp8Recipe::kDelayed;
  EXPECT_DOUBLE_EQ(parameter_bytes(c), 1.0);
  const MemoryReport fp8_weights = estimate_memory(
      k.m, k.ctx.params, c.parallel, memory_request(k.ctx, c, k.cl.node.gpu.hbm_capacity, 1.0));
  const StageMemory& s = bf16_weights.stages.front();
  EXPECT_NEAR((s.static_bytes - fp8_weights.stages.front().static_bytes).value(), s.params_per_gpu,
              1e3);
}

}  // namespace
}  // namespace moe
