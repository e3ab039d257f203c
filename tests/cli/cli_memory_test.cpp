// `memory` run as a user would: MemFine's Table 4, precision, unfused attention scores.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "cli/cli_run.h"

constexpr const char* kMemFine =
    "memory --model models/memfine-model-1.json --cluster topologies/memfine-32x64gb.json "
    "--parallel tp=1,pp=4,ep=32,cp=1,vpp=1,mbs=1 --recompute full --received-tokens 596797 "
    "--static-override 43.0";

TEST(Cli, MemFineAcceptance) {
  // 22.9 / 11.9 / 3.65 GB activation for 1 / 2 / 8 chunks; MACT picks 2.
  for (auto [chunks, gb] : {std::pair{"1", 22.9}, {"2", 11.9}, {"8", 3.65}}) {
    const nlohmann::json j = run_json(std::string(kMemFine) + " --chunks " + chunks + " --json");
    EXPECT_NEAR(j["stages"][0]["activation_bytes"].get<double>() / 1e9, gb, 0.005);
    EXPECT_EQ(j["mact_chunks"].get<int>(), 2);
    EXPECT_EQ(j["stages"][0]["fits"].get<bool>(), std::string(chunks) != "1");
    for (const char* key : {"static_bytes", "activation_bytes", "total_bytes", "fits"}) {
      EXPECT_TRUE(j["stages"][0].contains(key)) << key;
    }
  }
  const Result text = run(std::string(kMemFine) + " --chunks 2");
  EXPECT_NE(text.out.find("11.90 GB"), std::string::npos);
  EXPECT_NE(text.out.find("MACT picks c = 2"), std::string::npos);
  // The layout needs 128 GPUs; the cluster has 32: a warning, not a failure.
  EXPECT_NE(text.err.find("warning: layout"), std::string::npos);
}

TEST(Cli, MemorySaysNoTokenFitsWhereStaticMemoryOverflows) {
  // DeepSeek-V3 whole on one H800: 12 TB of static memory leaves no room for a received token;
  // eq. (8)'s negative s'_max reads "none" (it printed -5638908).
  const Result r =
      run("memory --model models/deepseek-v3.json --cluster topologies/h800-2048.json --parallel "
          "tp=1,pp=1,ep=1,cp=1,mbs=1 --seq-len 4096");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string row = r.out.substr(r.out.find("\n0 "), 160);
  EXPECT_NE(row.find("NO    none"), std::string::npos) << row;
  EXPECT_EQ(r.out.find(" -"), std::string::npos) << r.out;
}

TEST(Cli, StaticMemoryFollowsPrecision) {
  // Eq. (1) per parameter without sharding: bf16 weights 2 + 4 + 12 = 18 bytes; fp32 weights 20.
  const std::string base =
      "memory --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json --parallel "
      "tp=1,ep=8 --zero 0 --json";
  const auto bf16 = nlohmann::json::parse(run(base).out);
  const auto fp32 = nlohmann::json::parse(run(base + " --weights fp32").out);
  const double params = bf16["stages"][0]["params_per_gpu"].get<double>();
  EXPECT_NEAR(bf16["stages"][0]["static_bytes"].get<double>(), 18 * params, 1.0);
  EXPECT_NEAR(fp32["stages"][0]["static_bytes"].get<double>(), 20 * params, 1.0);
  // Megatron's precision-aware optimizer (ZeRO-1 here, over DP 1 nothing is sharded):
  // BF16 moments beside BF16 weights keep 2 + 4 + (2 + 2 + 2) bytes, beside FP8 ones 1 + 4 +
  // (4 + 2 + 2); with BF16 gradients 2 bytes fewer.
  const std::string zero1 =
      "memory --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json --parallel "
      "tp=8,pp=1,ep=1,etp=8 --json --adam-moments bf16";
  auto per_param = [&](const std::string& extra) {
    const auto j = nlohmann::json::parse(run(zero1 + extra).out);
    return j["stages"][0]["static_bytes"].get<double>() /
           j["stages"][0]["params_per_gpu"].get<double>();
  };
  EXPECT_NEAR(per_param(""), 12.0, 1e-9);
  EXPECT_NEAR(per_param(" --weights fp8"), 13.0, 1e-9);
  EXPECT_NEAR(per_param(" --grads bf16"), 10.0, 1e-9);
  expect_one_line_error(run(base + " --adam-moments bf16"),
                        "--adam-moments: the precision-aware optimizer needs the distributed "
                        "optimizer (ZeRO 1-3)");
}

TEST(Cli, MemoryCountsAnUnfusedKernelsScores) {
  // GPT 1.7B at s = 2048, one sequence, 24 heads, no recompute: the unfused kernel keeps
  // 5 x 24 x 2048^2 bytes a layer, 24 layers in the one-stage 1F1B stage; --explain says so.
  const std::string base =
      "memory --model models/gpt-1.7b.json --cluster topologies/selene-a100-3072.json "
      "--parallel tp=1,pp=1,mbs=1 --seq-len 2048 --recompute none";
  const auto fused = nlohmann::json::parse(run(base + " --json").out);
  const auto unfused = nlohmann::json::parse(run(base + " --attention-kernel unfused --json").out);
  EXPECT_NEAR(unfused["stages"][0]["activation_bytes"].get<double>() -
                  fused["stages"][0]["activation_bytes"].get<double>(),
              5.0 * 24 * 2048 * 2048 * 24, 1.0);
  EXPECT_NE(
      run(base + " --attention-kernel unfused --explain").out.find("unfused attention scores"),
      std::string::npos);
  expect_one_line_error(run(base + " --attention-kernel naive"),
                        "--attention-kernel: 'naive' is not one of fused, unfused");
  // A dense model: no received tokens, MACT or chunk sweep, which are the MoE layers'.
  const Result dense = run(base);
  ASSERT_EQ(dense.code, 0) << dense.err;
  for (const char* absent : {"s''", "s'_max", "MACT", "FCDA chunk sweep"})
    EXPECT_EQ(dense.out.find(absent), std::string::npos) << absent << "\n" << dense.out;
  EXPECT_NE(dense.out.find("fits"), std::string::npos) << dense.out;
}

TEST(Cli, MemoryPutsTheMtpModuleOnTheLastStage) {
  // DeepSeek-V3's multi-token-prediction module runs on the last stage: its row says so and
  // counts the module's MoE layer (5 + 1).
  const std::string base =
      "memory --model models/hf/deepseek-v3.config.json --cluster topologies/h100-1024.json "
      "--parallel tp=2,pp=8,ep=64,dp=64,mbs=1,pp_first=8,pp_last=5 --seq-len 4096";
  const Result text = run(base);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("56-60 +1 MTP"), std::string::npos) << text.out;
  const nlohmann::json j = run_json(base + " --json");
  EXPECT_EQ(j["stages"][7]["moe_layers"].get<int>(), 6);
  EXPECT_EQ(j["stages"][6]["moe_layers"].get<int>(), 8);
}

TEST(Cli, MegatronLayoutsEvaluateAsGiven) {
  // Megatron's own DeepSeek-V3 layout shape (its docs, at pp 8 x vpp 4 here): memory shows each
  // stage's interleaved layers and the MTP module on stage 6; plan evaluates exactly that
  // layout and hands it back as Megatron's argument, quoted for the shell.
  const std::string layout = "\"tp=2,pp=8,ep=64,cp=1,mbs=1,layout=Et*3|(tt|)*29,m|L\"";
  const Result mem =
      run("memory --model models/hf/deepseek-v3.config.json --cluster topologies/h100-1024.json "
          "--seq-len 4096 --parallel " +
          layout.substr(0, layout.size() - 1) + ",dp=64\"");
  ASSERT_EQ(mem.code, 0) << mem.err;
  EXPECT_NE(mem.out.find("0-2, 17-18, 33-34, 49-50"), std::string::npos) << mem.out;
  EXPECT_NE(mem.out.find("13-14, 29-30, 45-46 +1 MTP"), std::string::npos) << mem.out;
  const Result plan =
      run("plan --model models/hf/deepseek-v3.config.json --cluster topologies/h100-1024.json "
          "--global-batch 8192 --seq-len 4096 --precision fp8 --top 3 --parallel " +
          layout);
  ASSERT_EQ(plan.code, 0) << plan.err;
  EXPECT_NE(plan.out.find("--pipeline-model-parallel-layout 'Et*3|(t*2|)*29m|L'"),
            std::string::npos)
      << plan.out;
  EXPECT_EQ(plan.out.find("--num-layers-per-virtual-pipeline-stage"), std::string::npos);
  // A layout that misses a layer: one line naming the field and the count, exit 2.
  const Result bad =
      run("plan --model models/hf/deepseek-v3.config.json --cluster topologies/h100-1024.json "
          "--global-batch 8192 --seq-len 4096 --parallel \"tp=2,pp=8,ep=64,cp=1,mbs=1,"
          "layout=Et*2|(tt|)*29,m|L\"");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("60 decoder layers (t), but the model has 61"), std::string::npos)
      << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

TEST(Cli, MemoryOffloadsTheActivationsOfTheModulesNamed) {
  // Mixtral-8x7B on 4 stages: each layer sends 8,192 x (4,096 + 14,336) x 2 bytes, and stage 0
  // holds 4 micro-batches of 8 layers, two layers' worth of which stay on the GPU.
  const std::string base =
      "memory --model models/mixtral-8x7b.json --cluster topologies/h100-256.json "
      "--parallel tp=1,pp=4,ep=8,dp=8,mbs=1,vpp=1 --json";
  const auto kept = nlohmann::json::parse(run(base).out);
  const auto sent = nlohmann::json::parse(run(base + " --offload-modules expert_fc1 moe_act").out);
  const double per_layer = 8192.0 * (4096 + 14336) * 2;
  EXPECT_DOUBLE_EQ(sent["stages"][0]["offloaded_per_layer_bytes"].get<double>(), per_layer);
  EXPECT_NEAR(kept["stages"][0]["activation_bytes"].get<double>() -
                  sent["stages"][0]["activation_bytes"].get<double>(),
              per_layer * 30, 1.0);
  expect_one_line_error(run(base + " --recompute full --offload-modules moe_act"),
                        "--offload-modules: Megatron offloads activations under recompute none");
}

TEST(Cli, MemoryPutsTheOffloadedOptimizerStatesInHostMemory) {
  // Llama 3 70B at tp = 2 under ZeRO-3 over dp = 4: each GPU holds 35.28 B parameters' share of
  // 12-byte Adam states sharded four ways, 105.8 GB, all sent to its 256 GB share of the node's
  // 2 x 1,024 GB of host memory.
  const std::string base =
      "memory --model models/hf/llama-3-70b.config.json --cluster topologies/h100-sxm-8.json "
      "--parallel tp=2,pp=1,dp=4,mbs=1 --zero 3 --seq-len 4096 --optimizer-offload 1";
  const auto j = nlohmann::json::parse(run(base + " --json").out);
  EXPECT_NEAR(j["stages"][0]["host_bytes"].get<double>(),
              12.0 * j["stages"][0]["params_per_gpu"].get<double>() / 4, 1e3);
  EXPECT_NE(run(base).out.find("within its 256.00 GB share of the node's host memory"),
            std::string::npos);
}
