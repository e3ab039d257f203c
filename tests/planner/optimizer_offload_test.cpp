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

}  // namespace
}  // namespace moe
