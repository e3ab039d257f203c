// Megatron's precision-aware optimizer (--use-precision-aware-optimizer with its state types)
// and the BF16 gradient buffer --grad-reduce-in-bf16 gives: the bytes a parameter keeps, the
// memory and Adam step they change, the plan file and the search.
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

constexpr AdamStates kBf16Moments{true, StateDtype::kFp32, StateDtype::kBf16, StateDtype::kBf16};

struct Case {
  ModelSpec m = testing_models::mixtral_8x7b();
  ClusterSpec cl =
      io::load_cluster(std::string(MOEPLAN_SOURCE_DIR) + "/topologies/h100-sxm-8.json");
  TimeContext ctx = make_time_context(m, cl, efficiencies(), RoutingSkew{}, 4096);
  // Experts and attention over TP 8, no DP: every state of a GPU's parameters is its own.
  PlanChoice choice(AdamStates adam, bool bf16_gradients = false) const {
    PlanChoice c;
    c.parallel = resolve(parse_parallel("tp=8,pp=1,ep=1,etp=8,dp=1,mbs=1,gbs=8"));
    c.recompute = Recompute::kFull;
    c.adam = adam;
    c.dp_bf16_compression = bf16_gradients;
    return c;
  }
  StageMemory stage(const PlanChoice& c) const {
    return estimate_memory(m, ctx.params, c.parallel,
                           memory_request(ctx, c, cl.node.gpu.hbm_capacity, 1.0))
        .stages.front();
  }
};

TEST(AdamStates, BytesAParameterAsMegatronKeepsThem) {
  PlanChoice c;
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(c), 12.0);  // FP32 master, momentum, variance
  EXPECT_DOUBLE_EQ(gradient_bytes(c), 4.0);
  // BF16 moments beside BF16 weights: Transformer Engine stores the FP32 master as the 16 bits
  // the weight lacks (store_param_remainders), 2 + 2 + 2.
  c.adam = kBf16Moments;
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(c), 6.0);
  // FP8 weights (--fp8-param-gather) leave no BF16 bits to complete: the whole FP32 master.
  c.precision = Precision::kFp8;
  c.fp8_recipe = Fp8Recipe::kMxfp8;
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(c), 8.0);
  // So does the CPU offload, whose host-side Adam is not Transformer Engine's.
  c.precision = Precision::kBf16;
  c.optimizer_offload = 0.5;
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(c), 8.0);
  c.optimizer_offload = 0;
  // FP32 moments under the flag still store remainders; FP16 masters and FP8 moments.
  c.adam = {true, StateDtype::kFp32, StateDtype::kFp32, StateDtype::kFp32};
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(c), 10.0);
  c.adam = {true, StateDtype::kFp16, StateDtype::kFp8, StateDtype::kFp8};
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(c), 4.0);
  // Megatron's gradient buffer takes the weights' BF16 type when gradients reduce in BF16.
  c.dp_bf16_compression = true;
  EXPECT_DOUBLE_EQ(gradient_bytes(c), 2.0);
  c.precision = Precision::kFp32;
  EXPECT_DOUBLE_EQ(gradient_bytes(c), 4.0);
}

TEST(AdamStates, WhatMegatronRefusesIsNamed) {
  PlanChoice c;
  EXPECT_EQ(adam_states_problem(c), "");
  c.adam = kBf16Moments;
  EXPECT_EQ(adam_states_problem(c), "");
  c.zero_stage = 0;
  EXPECT_NE(adam_states_problem(c).find("needs the distributed optimizer"), std::string::npos);
  c.zero_stage = 1;
  c.precision = Precision::kFp32;
  EXPECT_NE(adam_states_problem(c).find("FP32 training"), std::string::npos);
  c.precision = Precision::kBf16;
  c.adam.main_params = StateDtype::kBf16;
  EXPECT_NE(adam_states_problem(c).find("fp32 or fp16, not bf16"), std::string::npos);
  c.adam = {false, StateDtype::kFp32, StateDtype::kBf16, StateDtype::kFp32};
  EXPECT_NE(adam_states_problem(c).find("precision-aware"), std::string::npos);
  c.adam = {};
  c.optimizer_offload = 1;
  c.zero_stage = 0;
  EXPECT_NE(adam_states_problem(c).find("optimizer CPU offload"), std::string::npos);
}

TEST(AdamStates, TheStaticMemoryDropsByTheBytesSaved) {
  const Case k;
  const StageMemory fp32 = k.stage(k.choice({}));
  const StageMemory bf16 = k.stage(k.choice(kBf16Moments));
  const StageMemory grads = k.stage(k.choice({}, true));
  EXPECT_NEAR((fp32.static_bytes - bf16.static_bytes).value(), 6.0 * fp32.params_per_gpu, 1e3);
  EXPECT_NEAR((fp32.static_bytes - grads.static_bytes).value(), 2.0 * fp32.params_per_gpu, 1e3);
  EXPECT_EQ(fp32.activation_bytes, bf16.activation_bytes);
}

TEST(AdamStates, DeepSpeedReducesAndAccumulatesInBf16WhereMegatronDoes) {
  const Case k;
  Plan plan;
  plan.choice = k.choice({}, true);
  nlohmann::json ds = io::deepspeed_config(plan);
  EXPECT_EQ(ds["communication_data_type"], "bf16");
  EXPECT_EQ(ds["data_types"]["grad_accum_dtype"], "bf16");
  plan.choice = k.choice({});
  ds = io::deepspeed_config(plan);
  EXPECT_FALSE(ds.contains("communication_data_type"));
  EXPECT_FALSE(ds.contains("data_types"));
}

TEST(AdamStates, TheAdamStepMovesTheNarrowerStates) {
  // Adam reads and writes the master weights and both moments and writes the weight: 2 x 12 +
  // 4 bytes a parameter in FP32, 2 x 6 + 4 with BF16 moments and remainders.
  const Case k;
  const Seconds fp32 = dp_sync_times(k.ctx, k.choice({}), 0).optimizer;
  const Seconds bf16 = dp_sync_times(k.ctx, k.choice(kBf16Moments), 0).optimizer;
  EXPECT_NEAR(bf16.value() / fp32.value(), 16.0 / 28.0, 1e-12);
}

TEST(AdamStates, APlanFileAndMegatronsArgumentsCarryThem) {
  const Case k;
  Plan plan;
  plan.choice = k.choice({true, StateDtype::kFp16, StateDtype::kBf16, StateDtype::kFp8});
  plan.score = score_plan(k.ctx, plan.choice, k.cl.node.gpu.hbm_capacity, 1.0);
  const std::vector<std::string> args = megatron_arguments(plan, k.m, k.cl.node.num_gpus);
  for (const char* flag : {"--use-precision-aware-optimizer", "--main-params-dtype fp16",
                           "--exp-avg-dtype bf16", "--exp-avg-sq-dtype fp8"})
    EXPECT_NE(std::find(args.begin(), args.end(), flag), args.end()) << flag;
  nlohmann::json j = io::plan_to_json(plan, k.m, k.cl);
  EXPECT_EQ(io::plan_choice_from_json(j, "plan.json").adam, plan.choice.adam);
  // Megatron's Adam: no key, and no flag.
  Plan plain;
  plain.choice = k.choice({});
  plain.score = score_plan(k.ctx, plain.choice, k.cl.node.gpu.hbm_capacity, 1.0);
  EXPECT_FALSE(io::plan_to_json(plain, k.m, k.cl)["switches"].contains("adam_states"));
  const std::vector<std::string> plain_args = megatron_arguments(plain, k.m, 8);
  EXPECT_EQ(std::find(plain_args.begin(), plain_args.end(), "--use-precision-aware-optimizer"),
            plain_args.end());
  // What Megatron would refuse, named by its key.
  j["switches"]["zero_stage"] = 0;
  try {
    io::plan_choice_from_json(j, "plan.json");
    ADD_FAILURE() << "a precision-aware optimizer on plain DDP was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/switches/adam_states"), std::string::npos) << e.what();
  }
  j["switches"]["zero_stage"] = 1;
  j["switches"]["adam_states"]["exp_avg"] = "int4";
  EXPECT_THROW(io::plan_choice_from_json(j, "plan.json"), InputError);
}

TEST(AdamStates, TheSearchFitsWhatBf16GradientsLeaveRoomFor) {
  // Mixtral-8x7B on 8 x H100 with experts over EP 8 (expert DP 1): with FP32 gradients and Adam
  // no layout of these sizes fits 80 GB; BF16 gradients and BF16 moments take 6 + 2 bytes a
  // parameter off, and it fits with both, as Megatron would run it.
  const Case k;
  SearchRequest req;
  req.num_gpus = 8;
  req.global_batch = 64;
  req.fixed = parse_parallel("tp=1,pp=1,ep=8,cp=1,mbs=1");
  req.recompute = Recompute::kFull;
  req.zero = 1;
  req.dp_bf16_compression = false;
  EXPECT_TRUE(search_plans(k.ctx, req).ranked.empty());
  req.dp_bf16_compression = true;
  req.adam = kBf16Moments;
  const SearchResult r = search_plans(k.ctx, req);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_EQ(r.ranked.front().choice.adam, kBf16Moments);
  EXPECT_TRUE(r.ranked.front().choice.dp_bf16_compression);
  req.zero = 0;
  EXPECT_THROW(search_plans(k.ctx, req), ConfigError);
}

}  // namespace
}  // namespace moe
