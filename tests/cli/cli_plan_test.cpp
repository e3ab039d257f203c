// `plan` and `anchor` run as a user would: ranked plans, launch arguments, saved plans, fixed
// switches, the no-fit exit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "cli/cli_run.h"
#include "test_paths.h"

TEST(Cli, PlanPrintsRankedPlansAndLaunchArguments) {
  const Result r =
      run("plan --model models/deepseekmoe-16b.json --cluster topologies/h100-sxm-8.json "
          "--global-batch 64 --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* needle :
       {"Megatron-LM arguments:", "--expert-model-parallel-size", "DeepSpeed config",
        "train_micro_batch_size_per_gpu", "Why #1 beats #2", "Best plan, per iteration",
        "Megatron-LM would log: elapsed time per iteration (ms): ",
        "cut by the time bound before their DP syncs were priced"}) {
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle;
  }
  // Every argument line but the last continues the shell command; the last ends it.
  const size_t first = r.out.find("Megatron-LM arguments:\n");
  const size_t end = r.out.find("\n\nDeepSpeed config");
  ASSERT_LT(first, end);
  const std::string block = r.out.substr(first, end - first);
  EXPECT_NE(block.back(), '\\') << block;
  EXPECT_EQ(std::count(block.begin(), block.end(), '\\') + 1,
            std::count(block.begin(), block.end(), '\n'))
      << block;
}

TEST(Cli, PlanTracesItsExposedDpTimeToItsParts) {
  // ZeRO-3 has no once-per-iteration sync to name: the text says which stage's passes its
  // per-micro-batch gathers and reduce-scatter stretch, and the JSON's parts sum to dp_comm.
  const std::string cmd =
      "plan --model models/gpt-39b.json --cluster topologies/megascale-h800-240.json "
      "--global-batch 240 --parallel tp=8,pp=1,ep=1,dp=30,mbs=8 --attention ulysses --zero 3 "
      "--recompute none";
  const Result r = run(cmd);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("stage 0's passes (which pace the pipeline) stretched by the syncs on "
                       "their links, ZeRO-3's "),
            std::string::npos)
      << r.out;
  const nlohmann::json p = run_json(cmd + " --json")["plans"][0]["predicted"];
  const nlohmann::json& parts = p["dp_sync"]["exposed_s"];
  const double sum = parts["once_per_iteration"].get<double>() +
                     parts["paced_passes"].get<double>() + parts["dp_link"].get<double>() +
                     parts["dp_stream"].get<double>();
  EXPECT_GT(sum, 0);
  EXPECT_NEAR(sum, p["breakdown_s"]["dp_comm"].get<double>(), 1e-12);
  EXPECT_GT(parts["paced_all_gather"].get<double>(), 0);
  EXPECT_EQ(parts["paced_stage"], 0);
}

TEST(Cli, PlanNamesTheStageWhoseDpSyncShows) {
  // Qwen3-Next over ten stages with DP across nodes: stage 0 (the embedding, and no backward
  // pass left below it) is the one whose sync shows, not the slowest stage; the text and the
  // JSON say so.
  const std::string cmd =
      "plan --model models/hf/qwen3-next-80b-a3b.config.json --cluster "
      "topologies/megascale-h800-240.json --global-batch 240 --parallel "
      "tp=1,pp=10,ep=8,etp=1,dp=12,cp=2,vpp=1,mbs=1,pp_first=5,pp_last=3 --zero 1";
  const Result r = run(cmd);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("searched 1 layout ("), std::string::npos) << r.out;  // the one fixed
  EXPECT_NE(r.out.find("DP comm: stage 0's gradient reduce-scatter ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stage 0's parameter all-gather ("), std::string::npos);
  const nlohmann::json j = run_json(cmd + " --json");
  // One layout: its candidates are weighed against each other's best, and the bound says how
  // many of them it cut.
  EXPECT_EQ(j["search"]["layouts"], 1);
  EXPECT_GT(j["search"]["cut_by_time_bound"].get<int64_t>(), 0);
  EXPECT_LT(j["search"]["cut_by_time_bound"].get<int64_t>(),
            j["search"]["evaluated"].get<int64_t>());
  const nlohmann::json& sync = j["plans"][0]["predicted"]["dp_sync"];
  EXPECT_EQ(sync["reduce_scatter"]["stage"], 0);
  EXPECT_EQ(sync["all_gather"]["stage"], 0);
  EXPECT_GT(sync["reduce_scatter"]["seconds"].get<double>(), 0.0);
}

TEST(Cli, PlanSaysWhereThePowerLimitSlowsItsGpus) {
  // Llama 3 8B on one H100 node keeps its GPUs computing nearly all the time: the plan says at
  // what share of full clock, in its note, its layer explanation and its JSON.
  const std::string args =
      "plan --model models/hf/llama-3-8b.config.json --cluster topologies/h100-sxm-8.json "
      "--global-batch 128 --seq-len 8192 --top 1";
  const Result r = run(args + " --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("at 700 W the power limit holds the GPUs at 0.8"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("GEMMs and fused attention at 0.8"), std::string::npos);
  const nlohmann::json j = run_json(args + " --json");
  const double clock = j["plans"][0]["compute_clock"].get<double>();
  EXPECT_GE(clock, 0.85);
  EXPECT_LT(clock, 0.9);
  EXPECT_GT(j["plans"][0]["predicted"]["compute_busy_share"].get<double>(), 0.95);
  // The saved plan carries the clock, and simulate runs it there and says so.
  const std::string saved = temp_path("moeplan_power_plan.json");
  ASSERT_EQ(run(args + " --save " + saved).code, 0);
  const nlohmann::json sim = run_json(
      "simulate --model models/hf/llama-3-8b.config.json --cluster topologies/h100-sxm-8.json "
      "--plan " +
      saved + " --json");
  EXPECT_DOUBLE_EQ(sim["compute_clock"].get<double>(), clock);
  EXPECT_LT(std::abs(sim["relative_difference"].get<double>()), 0.01);
  std::filesystem::remove(saved);
  // Where #1 and #2 keep their GPUs busy for different shares, --explain sets their clocks side
  // by side (Qwen3-30B-A3B on 256 H100: 0.890 against 0.900).
  const Result two =
      run("plan --model models/hf/qwen3-30b-a3b.config.json --cluster topologies/h100-256.json "
          "--global-batch 1024 --seq-len 4096 --explain");
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_NE(two.out.find("compute clock under the power limit 0.8"), std::string::npos) << two.out;
}

TEST(Cli, PlanAndSimulateTakeAPowerCap) {
  // --power-limit caps the H100s below their 700 W: Llama 3 8B keeps them busy, so at 500 W
  // its clock falls further (0.66 busy all the time, power_limit.h). The plan file records the
  // cap; simulate takes it from there unless told another, and refuses a cap the GPU cannot
  // have.
  const std::string pair =
      "--model models/hf/llama-3-8b.config.json --cluster topologies/h100-sxm-8.json";
  const std::string args = "plan " + pair + " --global-batch 128 --seq-len 8192 --top 1";
  const nlohmann::json rated = run_json(args + " --json")["plans"][0];
  const std::string saved = temp_path("moeplan_capped_plan.json");
  ASSERT_EQ(run(args + " --power-limit 500 --save " + saved).code, 0);
  const nlohmann::json capped = nlohmann::json::parse(read_file(saved));
  EXPECT_EQ(capped["power_limit_W"].get<double>(), 500);
  EXPECT_EQ(rated["power_limit_W"].get<double>(), 700);
  const double clock = capped["compute_clock"].get<double>();
  EXPECT_LT(clock, 0.75);
  EXPECT_GT(capped["predicted"]["iteration_s"].get<double>(),
            rated["predicted"]["iteration_s"].get<double>() * 1.1);
  // Both hold their boards at the limit; the capped one does more work a joule.
  EXPECT_EQ(capped["predicted"]["gpu_power_W"].get<double>(), 500);
  EXPECT_EQ(rated["predicted"]["gpu_power_W"].get<double>(), 700);
  EXPECT_GT(capped["predicted"]["tokens_per_joule"].get<double>(),
            rated["predicted"]["tokens_per_joule"].get<double>());
  const std::string simulate = "simulate " + pair + " --plan " + saved + " --json";
  EXPECT_DOUBLE_EQ(run_json(simulate)["compute_clock"].get<double>(), clock);
  EXPECT_GT(run_json(simulate + " --power-limit 700")["compute_clock"].get<double>(), 0.8);
  expect_one_line_error(run(args + " --power-limit 100"),
                        "--power-limit: 100 W is not above the GPU's idle 165 W");
  expect_one_line_error(
      run("plan --model models/aptmoe-moe-s-8.json --cluster "
          "topologies/aptmoe-4x-a800-40gb-c1g2.json --global-batch 8 --power-limit 300"),
      "has no power entry (node.gpu.power) to cap");
  std::filesystem::remove(saved);
}

TEST(Cli, PlanWeighsPowerCapsUnderTheEnergyObjective) {
  // --objective energy ranks by joules a token on the boards and picks each plan's power cap;
  // --max-slowdown keeps it within a share of the fastest plan's time. The plan says how to set
  // the cap, tabulates the trade, and simulate runs the saved plan under its cap.
  const std::string pair =
      "--model models/hf/llama-3-8b.config.json --cluster topologies/h100-sxm-8.json";
  const std::string args = "plan " + pair + " --global-batch 128 --seq-len 8192 --top 2";
  const nlohmann::json fastest = run_json(args + " --json")["plans"][0];
  const std::string saved = temp_path("moeplan_energy_plan.json");
  const nlohmann::json frugal =
      run_json(args + " --objective energy --max-slowdown 10 --json --save " + saved);
  ASSERT_EQ(frugal["objective"], "energy");
  const nlohmann::json& best = frugal["plans"][0];
  const double cap = best["switches"]["power_cap_W"].get<double>();
  EXPECT_GT(cap, 350);
  EXPECT_LT(cap, 700);
  EXPECT_EQ(best["power_limit_W"].get<double>(), cap);
  EXPECT_EQ(best["nvidia_smi"].get<std::string>(), fmt::format("nvidia-smi -pl {:.0f}", cap));
  const double budget = frugal["time_budget_s"].get<double>();
  EXPECT_NEAR(budget, 1.1 * fastest["predicted"]["iteration_s"].get<double>(), 1e-9);
  EXPECT_LE(best["predicted"]["iteration_s"].get<double>(), budget);
  EXPECT_GT(best["predicted"]["tokens_per_joule"].get<double>(),
            fastest["predicted"]["tokens_per_joule"].get<double>() * 1.03);
  const nlohmann::json& by_cap = frugal["energy_by_cap"];
  ASSERT_EQ(by_cap.size(), 11u);
  EXPECT_EQ(by_cap[0]["power_limit_W"].get<double>(), 700);
  EXPECT_EQ(by_cap[10]["power_limit_W"].get<double>(), 350);
  // The saved plan simulates under its cap.
  const nlohmann::json sim = run_json("simulate " + pair + " --plan " + saved + " --json");
  EXPECT_DOUBLE_EQ(sim["compute_clock"].get<double>(), best["compute_clock"].get<double>());
  // It draws the cap, by the planner and by the simulated busy shares alike.
  EXPECT_DOUBLE_EQ(sim["energy"]["predicted_gpu_power_W"].get<double>(), cap);
  EXPECT_NEAR(sim["energy"]["simulated_gpu_power_W"].get<double>(), cap, 0.01 * cap);
  EXPECT_NEAR(sim["energy"]["simulated_tokens_per_joule"].get<double>(),
              best["predicted"]["tokens_per_joule"].get<double>(),
              0.02 * best["predicted"]["tokens_per_joule"].get<double>());
  const Result text = run(args + " --objective energy --max-slowdown 10");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find(fmt::format("  nvidia-smi -pl {:.0f}\n", cap)), std::string::npos);
  EXPECT_NE(text.out.find("The best layout's joules against its boards' power cap"),
            std::string::npos);
  EXPECT_NE(text.out.find(fmt::format("* {:.0f} W", cap)), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("time budget:"), std::string::npos);
  // --verify ranks the shortlist by the simulator's joules a token.
  const nlohmann::json verified = run_json(args + " --objective energy --verify 2 --json");
  ASSERT_EQ(verified["plans"].size(), 2u);
  const double first = verified["plans"][0]["simulated"]["tokens_per_joule"].get<double>();
  const double second = verified["plans"][1]["simulated"]["tokens_per_joule"].get<double>();
  EXPECT_GT(first, 0);
  EXPECT_GE(first, second);
  // --explain weighs fixed sizes against the search's by joules under this objective.
  const Result fixed = run(args + " --objective energy --parallel tp=1 --explain");
  ASSERT_EQ(fixed.code, 0) << fixed.err;
  EXPECT_NE(fixed.out.find("tokens per joule: the search's plan draws"), std::string::npos)
      << fixed.out;
  // Without a power entry there are no joules to count; a budget needs the energy objective.
  expect_one_line_error(
      run("plan --model models/aptmoe-moe-s-8.json --cluster "
          "topologies/aptmoe-4x-a800-40gb-c1g2.json --global-batch 8 --objective energy"),
      "--objective: energy needs the GPUs' power entry");
  expect_one_line_error(run(args + " --max-slowdown 10"),
                        "--max-slowdown: bounds the energy objective's time");
  std::filesystem::remove(saved);
}

TEST(Cli, PlanSpendsAPowerBudgetOnTheFastestClusterSize) {
  // 100 kW for Llama 3 70B's boards on 256 H100: 128 GPUs at their 700 W draw 89.6 kW, 256 must
  // be capped at 390 W each and still train faster. The plan names the size, its cap and what
  // each size would do; simulate runs it under the cap.
  const std::string pair =
      "--model models/hf/llama-3-70b.config.json --cluster topologies/h100-256.json";
  const std::string args = "plan " + pair + " --global-batch 512 --seq-len 8192 --top 2";
  const std::string saved = temp_path("moeplan_budget_plan.json");
  const nlohmann::json j = run_json(args + " --power-budget-kW 100 --json --save " + saved);
  ASSERT_EQ(j["power_budget"]["kW"].get<double>(), 100);
  const nlohmann::json& sizes = j["power_budget"]["sizes"];
  ASSERT_EQ(sizes.size(), 6u);  // 8, 16, ..., 256
  std::map<int64_t, nlohmann::json> by_gpus;
  for (const nlohmann::json& size : sizes) by_gpus[size["gpus"].get<int64_t>()] = size;
  EXPECT_EQ(by_gpus[128]["power_cap_W"].get<double>(), 0);
  EXPECT_EQ(by_gpus[256]["power_cap_W"].get<double>(), 390);
  EXPECT_TRUE(by_gpus[8].contains("why"));
  EXPECT_LE(by_gpus[256]["gpu_power_W"].get<double>(), 100e3);
  EXPECT_GT(by_gpus[256]["tokens_per_s"].get<double>(),
            1.2 * by_gpus[128]["tokens_per_s"].get<double>());
  const nlohmann::json& best = j["plans"][0];
  EXPECT_EQ(best["gpus"].get<int64_t>(), 256);
  EXPECT_EQ(best["switches"]["power_cap_W"].get<double>(), 390);
  EXPECT_EQ(best["nvidia_smi"].get<std::string>(), "nvidia-smi -pl 390");
  EXPECT_LE(best["predicted"]["gpu_power_W"].get<double>() * 256, 100e3);
  const nlohmann::json sim = run_json("simulate " + pair + " --plan " + saved + " --json");
  EXPECT_DOUBLE_EQ(sim["compute_clock"].get<double>(), best["compute_clock"].get<double>());
  const Result text = run(args + " --power-budget-kW 100");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("Under 100 kW for the GPU boards"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  nvidia-smi -pl 390\n"), std::string::npos);
  expect_one_line_error(run(args + " --power-budget-kW 1"), "no cluster size runs within 1.0 kW");
  expect_one_line_error(run(args + " --power-budget-kW 100 --power-limit 500"),
                        "--power-budget-kW: caps each board at its share of the budget");
  expect_one_line_error(run(args + " --power-budget-kW 100 --objective energy"),
                        "--power-budget-kW: ranks cluster sizes by throughput");
  std::filesystem::remove(saved);
}

TEST(Cli, PlanFallsBackToOffloadWhenNothingFitsInGpuMemory) {
  // MoE-S-64 (APTMoE Table I) on four A800-40GB: with Megatron's FP32 gradients its weights
  // and gradients alone exceed the GPUs, so Megatron's optimizer offload cannot help, but its
  // weights and Adam states fit the node's host memory: the planner answers with APTMoE offload
  // plans rather than failing.
  const std::string s64 =
      "plan --model models/aptmoe-moe-s-64.json --cluster "
      "topologies/aptmoe-4x-a800-40gb-c1g2.json --gpus 4 --global-batch 128 --seq-len 32";
  const Result r = run(s64 + " --grad-reduce fp32");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("No layout fits in GPU memory. APTMoE offload plans"), std::string::npos);
  EXPECT_NE(r.out.find("offload_param"), std::string::npos);
  EXPECT_NE(r.out.find("PCIe loading (exposed)"), std::string::npos);
  // Megatron-LM cannot run an offload plan, so there is no log line to predict.
  EXPECT_EQ(r.out.find("Megatron-LM would log"), std::string::npos);
  EXPECT_EQ(r.out.find("With the optimizer's states on the CPU instead"), std::string::npos);
  // BF16 gradients (--grad-reduce-in-bf16 makes Megatron's gradient buffer BF16) leave 4 bytes a
  // parameter on the GPU, 34.6 GB of the 40: Megatron's optimizer offload fits then.
  const nlohmann::json bf16 = run_json(s64 + " --grad-reduce bf16 --json");
  EXPECT_DOUBLE_EQ(bf16["plans"][0]["switches"]["optimizer_offload"].get<double>(), 1.0);
  EXPECT_TRUE(bf16["plans"][0]["switches"]["dp_bf16_compression"].get<bool>());
  // Mixtral-8x7B on 8 x H100 fits both ways: Megatron's optimizer offload is the faster (6.9 s
  // an iteration against APTMoE's 8.2 s), so it leads and APTMoE's best gets a line.
  const Result mixtral =
      run("plan --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json "
          "--global-batch 64 --json");
  ASSERT_EQ(mixtral.code, 0) << mixtral.err;
  const nlohmann::json j = nlohmann::json::parse(mixtral.out);
  EXPECT_DOUBLE_EQ(j["plans"][0]["switches"]["optimizer_offload"].get<double>(), 1.0);
  ASSERT_TRUE(j["aptmoe_alternative"].is_object());
  EXPECT_LT(j["plans"][0]["predicted"]["iteration_s"].get<double>(),
            j["aptmoe_alternative"]["predicted"]["iteration_s"].get<double>());
  EXPECT_TRUE(j["megatron_alternative"].is_null());
  // MoE-S-16 on the four A800s fits both ways too with FP32 gradients, but there APTMoE is the
  // faster: it leads, and Megatron's way gets the line. (With BF16 gradients it fits the GPUs.)
  const std::string s16 =
      "plan --model models/aptmoe-moe-s-16.json --cluster "
      "topologies/aptmoe-4x-a800-40gb-c1g2.json --gpus 4 --global-batch 128 --seq-len 1024 "
      "--grad-reduce fp32";
  const nlohmann::json k = run_json(s16 + " --json");
  EXPECT_TRUE(k["aptmoe_alternative"].is_null());
  ASSERT_TRUE(k["megatron_alternative"].is_object());
  EXPECT_GT(k["megatron_alternative"]["predicted"]["iteration_s"].get<double>(),
            k["plans"][0]["predicted"]["iteration_s"].get<double>());
  EXPECT_NE(
      run(s16).out.find("With the optimizer's states on the CPU instead (Megatron's "
                        "--optimizer-cpu-offload, --optimizer-offload 1) it runs more slowly"),
      std::string::npos);
}

TEST(Cli, PlanOffloadsTheOptimizerWhenADenseModelFitsNoOtherWay) {
  // Llama 3 70B's weights, gradients and Adam states (18 bytes a parameter) exceed one 8 x 80 GB
  // node, and a dense model has no APTMoE plan: Megatron's optimizer CPU offload (all of the
  // states, in the node's 2 TB of host memory) makes it fit, and the arguments run it.
  const Result r =
      run("plan --model models/hf/llama-3-70b.config.json --cluster topologies/h100-sxm-8.json "
          "--global-batch 64 --seq-len 4096 --top 1");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* needle :
       {"These plans keep the optimizer states in host memory", "opt-offload=1",
        "--optimizer-cpu-offload", "--optimizer-offload-fraction 1", "optimizer step"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;
  // Llama 3.1 405B's weights and gradients alone exceed the eight GPUs: the no-fit line says
  // how many 80 GB GPUs its 16 bytes a parameter fill with BF16 gradients, the leanest the
  // search tries (405.85 B x 16 / 80 GB: 82), and with the optimizer's 12 in host memory (21);
  // with FP32 gradients fixed, 18 bytes (92 and 31).
  const std::string llama =
      "plan --model models/hf/llama-3.1-405b.config.json --cluster "
      "topologies/h100-sxm-8.json --global-batch 64 --seq-len 4096";
  expect_one_line_error(run(llama),
                        "(16 bytes a parameter) fill 82 such GPUs sharded over all of them (21 "
                        "with the optimizer's states in host memory)",
                        3);
  expect_one_line_error(run(llama + " --grad-reduce fp32"),
                        "(18 bytes a parameter) fill 92 such GPUs sharded over all of them (31 "
                        "with the optimizer's states in host memory)",
                        3);
}

TEST(Cli, PlanSavesAFileThatReadsBack) {
  const std::string path = temp_path("moeplan_cli_plan.json");
  const nlohmann::json printed = run_json(
      "plan --model models/deepseekmoe-16b.json --cluster topologies/h100-sxm-8.json "
      "--global-batch 64 "
      "--parallel tp=1,ep=8 --save " +
      path + " --json");
  ASSERT_GE(printed["plans"].size(), 1u);
  for (const auto& p : printed["plans"]) {
    EXPECT_EQ(p["parallel"]["tp"].get<int>(), 1);
    EXPECT_EQ(p["parallel"]["ep"].get<int>(), 8);
  }
  const auto saved = nlohmann::json::parse(read_file(path));
  EXPECT_EQ(saved["format"], "moeplan-plan/1");
  EXPECT_EQ(saved["parallel"], printed["plans"][0]["parallel"]);
  EXPECT_TRUE(saved["megatron_args"].is_array());
  // Megatron-LM's log line for the plan: its FLOP count (no router, causal attention) is ours
  // within 0.5 %, so TFLOP/s/GPU reads as MFU x the H100's 989.5 TFLOP/s.
  const auto& predicted = saved["predicted"];
  EXPECT_DOUBLE_EQ(predicted["megatron_log"]["elapsed_time_per_iteration_ms"].get<double>(),
                   predicted["iteration_s"].get<double>() * 1e3);
  EXPECT_NEAR(predicted["megatron_log"]["throughput_per_gpu_tflops"].get<double>() /
                  (predicted["mfu"].get<double>() * 989.5),
              1.0, 0.005);
  // simulate prints the same line for its simulated iteration.
  const nlohmann::json simulated = run_json(
      "simulate --model models/deepseekmoe-16b.json --cluster "
      "topologies/h100-sxm-8.json --json --plan " +
      path);
  EXPECT_NEAR(simulated["megatron_log"]["throughput_per_gpu_tflops"].get<double>() /
                  (simulated["mfu"].get<double>() * 989.5),
              1.0, 0.005);
  std::remove(path.c_str());
}

TEST(Cli, AnchorFitsTheModelToAMeasuredIteration) {
  // A user's run measured at 1.5x the prediction: anchor writes a calibration under which the
  // same plan predicts the measurement, and every command reads it.
  const std::string plan = temp_path("moeplan_anchor_plan.json");
  const std::string cal = temp_path("moeplan_anchor_cal.json");
  const std::string pair =
      "--model models/deepseekmoe-16b.json --cluster topologies/h100-sxm-8.json";
  ASSERT_EQ(
      run("plan " + pair + " --global-batch 64 --parallel tp=1,ep=8,mbs=2 --save " + plan).code, 0);
  const double predicted =
      nlohmann::json::parse(read_file(plan))["predicted"]["iteration_s"].get<double>();
  const double measured_ms = predicted * 1.5e3;
  const nlohmann::json fit = run_json("anchor " + pair + " --plan " + plan + " --json --out " +
                                      cal + fmt::format(" --measured-ms {}", measured_ms));
  EXPECT_LT(fit["scale"].get<double>(), 0.7);
  // Slower curves keep the compute stream busier: the H100s' power limit slows them too.
  EXPECT_LT(fit["compute_clock"].get<double>(), 1.0);
  EXPECT_GT(fit["compute_clock"].get<double>(), 0.8);
  EXPECT_NEAR(fit["predicted_after_s"].get<double>() * 1e3 / measured_ms, 1.0, 1e-3);
  const auto written = nlohmann::json::parse(read_file(cal));
  EXPECT_EQ(written["provenance"]["tool"], "moeplan anchor");
  const Result again = run("plan " + pair + " --global-batch 64 --parallel " +
                           "tp=1,ep=8,mbs=2,pp=1,cp=1,vpp=1,etp=1 --json --calibration " + cal);
  ASSERT_EQ(again.code, 0) << again.err;
  const auto best = nlohmann::json::parse(again.out)["plans"][0];
  EXPECT_NEAR(best["predicted"]["iteration_s"].get<double>() * 1e3 / measured_ms, 1.0, 0.01);
  // The same run given as the TFLOP/s/GPU Megatron-LM logged for it: the same fit.
  const double tflops = nlohmann::json::parse(read_file(
                            plan))["predicted"]["megatron_log"]["throughput_per_gpu_tflops"]
                            .get<double>() /
                        1.5;
  const Result by_tflops = run("anchor " + pair + " --plan " + plan + " --json --out " + cal +
                               fmt::format(" --measured-tflops {}", tflops));
  ASSERT_EQ(by_tflops.code, 0) << by_tflops.err;
  EXPECT_NEAR(nlohmann::json::parse(by_tflops.out)["scale"].get<double>(),
              fit["scale"].get<double>(), 1e-3);
  expect_one_line_error(run("anchor " + pair + " --plan " + plan + " --out " + cal),
                        "--measured-ms");
  // Bad input: an unknown scope, a measurement out of reach, a missing plan.
  expect_one_line_error(run("anchor " + pair + " --plan " + plan +
                            " --measured-ms 100 --scope x "
                            "--out " +
                            cal),
                        "--scope");
  expect_one_line_error(
      run("anchor " + pair + " --plan " + plan + " --measured-ms 0.001 --out " + cal),
      "out of reach");
  expect_one_line_error(
      run("anchor " + pair + " --plan /nonexistent.json --measured-ms 100 --out " + cal),
      "/nonexistent.json");
  expect_one_line_error(run("anchor --model models/deepseekmoe-16b.json --cluster "
                            "topologies/h100-1.json --plan " +
                            plan + " --measured-ms 100 --out " + cal),
                        "the plan needs 8 GPUs");
  std::remove(plan.c_str());
  std::remove(cal.c_str());
}

TEST(Cli, PlanVerifiesItsShortlistInTheSimulator) {
  // DeepSeekMoE-16B on 240 H800: the planner's top eight are within 4 % of each other, its
  // first two on one stage, the rest over five. --verify simulates the shortlist and puts the
  // simulator's fastest (the planner's #2, 192.9 ms against #1's 193.0; before the DP syncs met
  // the passes' layers in order, its #3, 187.8 against 189.6) first, and saves it. (It was
  // Mixtral-8x7B, whose #6 the simulator put 2.0 % ahead of #1 until the planner priced the
  // loss over the vocabulary, and before that Phi-3.5-MoE, 2.8 % until the planner priced
  // --tp-comm-overlap's GEMM pieces; before that MemFine Model II on the A800 cluster, whose
  // ZeRO-2 plans the planner ranked first at 30.7 s against 26.1 s simulated for its #3, until
  // it learnt that ZeRO-2's reduce-scatters share the backward's NICs.) Priced as MegaScale's
  // system (reproduce's paper_era_efficiencies), from a calibration file: no host time and
  // attention at a constant half of peak.
  const std::string path = temp_path("moeplan_cli_verified.json");
  const std::string cal = temp_path("moeplan_cli_no_host.json");
  std::ofstream(cal) << R"({"format": "moeplan-calibration/1", "constants": {
    "attention_core": 0.5, "host_attention_us": 0, "host_router_us": 0, "host_dense_ffn_us": 0,
    "host_experts_alltoall_us": 0, "host_experts_flex_us": 0, "host_experts_allgather_us": 0}})";
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster "
      "topologies/megascale-h800-240.json --global-batch 240 --top 8 --calibration " +
      cal;
  const auto plain = nlohmann::json::parse(run(base + " --json").out);
  const nlohmann::json j = run_json(base + " --verify 8 --json --save " + path);
  ASSERT_EQ(j["verified"].get<int>(), 8);
  ASSERT_EQ(j["plans"].size(), 8u);
  double previous = 0;
  for (const auto& p : j["plans"]) {
    const double t = p["simulated"]["iteration_s"].get<double>();
    EXPECT_GE(t, previous);
    previous = t;
    // Every verified plan is one of the planner's eight, at the rank it reports.
    const int was = p["simulated"]["planner_rank"].get<int>();
    EXPECT_EQ(plain["plans"][static_cast<size_t>(was - 1)]["parallel"], p["parallel"]);
  }
  EXPECT_NE(j["plans"][0]["simulated"]["planner_rank"].get<int>(), 1);
  for (const auto& p : j["plans"]) {
    if (p["simulated"]["planner_rank"].get<int>() == 1) {
      EXPECT_LT(j["plans"][0]["simulated"]["iteration_s"].get<double>(),
                p["simulated"]["iteration_s"].get<double>());
    }
  }
  EXPECT_EQ(nlohmann::json::parse(read_file(path))["parallel"], j["plans"][0]["parallel"]);
  std::remove(path.c_str());
  const Result text = run(base + " --verify 8");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("sim vs plan"), std::string::npos);
  const std::string fastest = "its fastest is the planner's #" +
                              std::to_string(j["plans"][0]["simulated"]["planner_rank"].get<int>());
  EXPECT_NE(text.out.find(fastest), std::string::npos) << text.out;
  // Of the first three alone the simulator's fastest is the fastest of them in the run of
  // eight; of the first alone it agrees.
  int of_three = 0;
  double best_of_three = 1e300;
  for (const auto& p : j["plans"]) {
    const int was = p["simulated"]["planner_rank"].get<int>();
    const double t = p["simulated"]["iteration_s"].get<double>();
    if (was <= 3 && t < best_of_three) {
      best_of_three = t;
      of_three = was;
    }
  }
  ASSERT_GT(of_three, 1);  // the simulator reorders the first three too
  EXPECT_NE(run(base + " --verify 3")
                .out.find("its fastest is the planner's #" + std::to_string(of_three)),
            std::string::npos);
  EXPECT_NE(run(base + " --verify 1").out.find("the simulator agrees on the best"),
            std::string::npos);
  expect_one_line_error(run(base + " --verify 0"), "--verify", 2);
  std::remove(cal.c_str());
}

TEST(Cli, PlanKeepsTheFixedAttentionAndOverlap) {
  // MegaScale Fig. 13's TP+TP baseline: attention as TP and no overlap, as the user fixed them.
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster topologies/h100-sxm-8.json "
      "--global-batch 32 --parallel tp=8,etp=8,ep=1 --top 10 --json";
  for (auto [flags, attention, overlap] :
       {std::tuple{" --attention tp --overlap off", "tp", false},
        std::tuple{" --attention ulysses --overlap on", "ulysses", true}}) {
    const Result r = run(base + flags);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto plans = nlohmann::json::parse(r.out)["plans"];
    ASSERT_GE(plans.size(), 1u);
    for (const auto& p : plans) {
      EXPECT_EQ(p["switches"]["attention"], attention) << flags;
      EXPECT_EQ(p["switches"]["overlap"], overlap) << flags;
    }
  }
  expect_one_line_error(run(base + " --attention sp"), "--attention: 'sp' is not one of");
  expect_one_line_error(run(base + " --overlap maybe"), "--overlap: 'maybe' is not one of");
}

TEST(Cli, PlanKeepsTheFixedDispatcher) {
  // A user's Megatron run names its --moe-token-dispatcher-type: the planner evaluates that one,
  // and its arguments say it; left open, the search keeps the faster. Expert TP across EP takes
  // all-to-all only, so fixing all-gather there is a one-line error.
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster topologies/h100-sxm-8.json "
      "--global-batch 64 --parallel tp=1,ep=8,pp=1";
  auto best_time = [&](const std::string& flags) {
    const Result r = run(base + " --json" + flags);
    EXPECT_EQ(r.code, 0) << r.err;
    const nlohmann::json doc = nlohmann::json::parse(r.out);
    EXPECT_GE(doc["plans"].size(), 1u);
    for (const auto& p : doc["plans"]) {
      if (!flags.empty()) {
        EXPECT_EQ(p["switches"]["dispatcher"], flags.substr(14)) << flags;
      }
    }
    return doc["plans"][0]["predicted"]["iteration_s"].get<double>();
  };
  const double alltoall = best_time(" --dispatcher alltoall");
  const double allgather = best_time(" --dispatcher allgather");
  EXPECT_NE(alltoall, allgather);
  EXPECT_DOUBLE_EQ(best_time(""), std::min(alltoall, allgather));
  for (const std::string d : {"alltoall", "allgather"}) {
    EXPECT_NE(run(base + " --dispatcher " + d).out.find("--moe-token-dispatcher-type " + d),
              std::string::npos);
  }
  expect_one_line_error(
      run(base + " --dispatcher flexible"),
      "--dispatcher: 'flexible' is not one of alltoall, allgather, deepep, search");
  expect_one_line_error(
      run("plan --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json "
          "--global-batch 64 --parallel tp=2,ep=4,etp=2 --dispatcher allgather"),
      "--dispatcher: allgather is priced with etp = 1 or ep = 1");
}

TEST(Cli, PlanSaysWhatOverlappedDispatchTakesFromTheCompute) {
  // EP overlap runs DeepEP's kernels beside the compute on 20 of an H100's 132 SMs: the plan
  // file gives that slowed compute as part of the exposed EP time, and the text says so.
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster topologies/h100-256.json --gpus 32 "
      "--global-batch 256 --parallel tp=1,pp=1,ep=16,mbs=4 --dispatcher deepep --top 1";
  auto predicted = [&](const char* overlap) {
    return run_json(base + " --json --overlap " + overlap)["plans"][0]["predicted"];
  };
  const nlohmann::json on = predicted("on"), off = predicted("off");
  const double held = on["ep_comm_held_sms_s"].get<double>();
  EXPECT_GT(held, 0.0);
  EXPECT_LT(held, on["breakdown_s"]["ep_comm"].get<double>());
  EXPECT_EQ(off["ep_comm_held_sms_s"].get<double>(), 0.0);
  EXPECT_NE(run(base + " --overlap on").out.find("whose kernels hold 20 of the GPU's 132 SMs"),
            std::string::npos);
}

TEST(Cli, PlanPricesDeepEpByDestination) {
  // --dispatcher deepep (Megatron-Core's flex dispatcher on DeepEP) sends a token once per node
  // it has experts on, not once per expert: across nodes the exposed EP time falls, the plan
  // file and the arguments say flex with the DeepEP backend, and the search leaves it out
  // unless asked (it needs its own library). DeepSeek-V3's group-limited routing goes into the
  // arguments as Megatron names it.
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster topologies/h100-256.json --gpus 16 "
      "--global-batch 64 --parallel tp=1,ep=16,pp=1,cp=1,mbs=2 --overlap off --json";
  auto ep_time = [&](const std::string& flags) {
    const Result r = run(base + flags);
    EXPECT_EQ(r.code, 0) << r.err;
    const nlohmann::json plan = nlohmann::json::parse(r.out)["plans"][0];
    return std::pair{plan["switches"]["dispatcher"].get<std::string>(),
                     plan["predicted"]["breakdown_s"]["ep_comm"].get<double>()};
  };
  const auto [searched, searched_ep] = ep_time("");
  const auto [deepep, deepep_ep] = ep_time(" --dispatcher deepep");
  const auto [alltoall, alltoall_ep] = ep_time(" --dispatcher alltoall");
  EXPECT_NE(searched, "deepep");
  EXPECT_EQ(deepep, "deepep");
  // 64 experts, top-6 over 2 nodes: 0.83 other nodes a token against 6 x 8/16 = 3 copies.
  EXPECT_LT(deepep_ep, 0.5 * alltoall_ep);
  // --explain says what DeepEP would save where the search's plan sends EP across nodes.
  const std::string text = base.substr(0, base.size() - std::string(" --json").size());
  EXPECT_NE(run(text + " --explain").out.find("With DeepEP (--dispatcher deepep"),
            std::string::npos);
  EXPECT_EQ(run(text + " --explain --dispatcher deepep").out.find("With DeepEP"),
            std::string::npos);
  const Result args = run(
      "plan --model models/deepseek-v3.json --cluster topologies/h800-2048.json --global-batch "
      "15360 --seq-len 4096 --parallel tp=8,pp=16,ep=16,mbs=1,pp_first=2,pp_last=3 --dispatcher "
      "deepep --top 1");
  ASSERT_EQ(args.code, 0) << args.err;
  for (const char* flag :
       {"--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep",
        "--moe-router-num-groups 8", "--moe-router-group-topk 4"})
    EXPECT_NE(args.out.find(flag), std::string::npos) << flag;
  expect_one_line_error(
      run("plan --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json "
          "--global-batch 64 --parallel tp=2,ep=4,etp=2 --dispatcher deepep"),
      "--dispatcher: deepep is priced with etp = 1; --parallel fixes ep = 4, etp = 2");
  // --megatron-only plans what the arguments run: MegaScale-MoE's mechanisms are refused.
  const std::string mixtral =
      "plan --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json "
      "--global-batch 64 --megatron-only";
  const Result megatron = run(mixtral);
  ASSERT_EQ(megatron.code, 0) << megatron.err;
  EXPECT_EQ(megatron.out.find("Megatron-LM gap"), std::string::npos) << megatron.out;
  expect_one_line_error(run(mixtral + " --recompute sar"),
                        "--recompute: sar (MegaScale-MoE's rematerialization) has no Megatron-LM");
  expect_one_line_error(run(mixtral + " --intra-overlap search"),
                        "--intra-overlap: MegaScale-MoE's intra-operator overlap has no");
}

TEST(Cli, PlanTakesMegatronRecomputeModules) {
  // --recompute-modules names what selective recompute replays, as Megatron does: the plan, its
  // file and its arguments carry it, simulate reads it back and agrees, and a module the model
  // cannot have (or one eq. 2 does not hold) is a one-line error.
  const std::string path = temp_path("moeplan_recompute_modules.json");
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster topologies/h100-256.json --gpus 16 "
      "--global-batch 64 --parallel tp=1,ep=16,pp=1,cp=1,mbs=2 --overlap off";
  const Result r = run(base + " --recompute-modules moe layernorm --save " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("--recompute-modules layernorm moe"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recompute=selective(layernorm,moe)"), std::string::npos) << r.out;
  std::ifstream in(path);
  const nlohmann::json saved = nlohmann::json::parse(in);
  EXPECT_EQ(saved["switches"]["recompute_modules"], nlohmann::json({"layernorm", "moe"}));
  const nlohmann::json sim = run_json(
      "simulate --model models/deepseekmoe-16b.json --cluster topologies/h100-256.json --json "
      "--plan " +
      path);
  // Planner and simulator agree within 5 % (2.9 %: the DP sync shares the NICs with the
  // replayed all-to-all).
  EXPECT_LT(std::abs(sim["relative_difference"].get<double>()), 0.05);
  // The default is what selective meant before: moe_act layernorm.
  EXPECT_NE(run(base + " --recompute selective").out.find("--recompute-modules moe_act layernorm"),
            std::string::npos);
  expect_one_line_error(run(base + " --recompute-modules shared_experts"),
                        "--recompute-modules: shared_experts is not modelled");
  expect_one_line_error(run(base + " --recompute-modules moe attn"),
                        "--recompute-modules: 'attn' is not one of core_attn, moe_act");
  expect_one_line_error(run(base + " --recompute full --recompute-modules moe"),
                        "--recompute-modules: names what selective recompute replays");
  expect_one_line_error(
      run("plan --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json "
          "--global-batch 64 --recompute-modules mlp"),
      "--recompute-modules: mlp matches no layer of Mixtral-8x7B");
  expect_one_line_error(
      run("plan --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json "
          "--global-batch 64 --recompute-modules mla_up_proj"),
      "mla_up_proj matches no layer");
  // A plan file naming a module we do not know says where.
  nlohmann::json bad = saved;
  bad["switches"]["recompute_modules"] = {"moe", "experts"};
  {
    std::ofstream out(path);
    out << bad.dump();
  }
  expect_one_line_error(
      run("simulate --model models/deepseekmoe-16b.json --cluster topologies/h100-256.json "
          "--plan " +
          path),
      "/switches/recompute_modules: 'experts' is not one of");
  std::remove(path.c_str());
}

TEST(Cli, PlanPutsTheOptimizerOnTheCpuWhereAsked) {
  // Mixtral-8x7B fits 8 x 80 GB as Megatron runs it only with its optimizer on the CPU
  // (--optimizer-offload 1): the plan says so in its switches and arguments, its optimizer step
  // is the CPU's, and simulate agrees.
  const std::string path = temp_path("moeplan_optimizer_offload.json");
  const std::string base =
      "plan --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json "
      "--global-batch 64 --parallel tp=1,pp=1,ep=8,mbs=1 --recompute full --megatron-only";
  const Result r = run(base + " --optimizer-offload 1 --save " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("opt-offload=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--optimizer-cpu-offload"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--optimizer-offload-fraction 1"), std::string::npos) << r.out;
  const nlohmann::json sim = run_json(
      "simulate --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json --json "
      "--plan " +
      path);
  EXPECT_LT(std::abs(sim["relative_difference"].get<double>()), 0.05);
  expect_one_line_error(run(base + " --optimizer-offload 0"),
                        "--optimizer-offload: 0 is not a share in (0, 1]");
  expect_one_line_error(run(base + " --optimizer-offload 1.5"),
                        "--optimizer-offload: 1.5 is not a share in (0, 1]");
}

TEST(Cli, PlanOffloadsTheActivationsOfTheModulesNamed) {
  // --offload-modules is Megatron's fine-grained activation offloading: the plan, its file and
  // its arguments carry it, the breakdown shows the copies that did not hide, simulate reads it
  // back and agrees, and what Megatron would refuse is a one-line error.
  const std::string path = temp_path("moeplan_offload_modules.json");
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster topologies/h100-256.json --gpus 16 "
      "--global-batch 64 --parallel tp=1,ep=16,pp=1,cp=1,mbs=2 --overlap off";
  const Result r = run(base + " --offload-modules expert_fc1 moe_act --save " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("--fine-grained-activation-offloading"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--offload-modules expert_fc1 moe_act"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("act-offload=expert_fc1,moe_act"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("activation offload (exposed)"), std::string::npos) << r.out;
  std::ifstream in(path);
  const nlohmann::json saved = nlohmann::json::parse(in);
  EXPECT_EQ(saved["switches"]["offload_modules"], nlohmann::json({"expert_fc1", "moe_act"}));
  const nlohmann::json sim = run_json(
      "simulate --model models/deepseekmoe-16b.json --cluster topologies/h100-256.json --json "
      "--plan " +
      path);
  EXPECT_LT(std::abs(sim["relative_difference"].get<double>()), 0.05);
  expect_one_line_error(run(base + " --offload-modules expert_fc2"),
                        "--offload-modules: 'expert_fc2' is not one of attn_norm");
  expect_one_line_error(run(base + " --recompute full --offload-modules moe_act"),
                        "--offload-modules: Megatron offloads activations under recompute none");
  expect_one_line_error(
      run("plan --model models/hf/llama-2-7b.config.json --cluster topologies/h100-sxm-8.json "
          "--global-batch 64 --offload-modules expert_fc1"),
      "--offload-modules: expert_fc1 and moe_act match no layer");
}

TEST(Cli, PlanForAMegatronWithoutFusedPermutation) {
  // --permute-fusion off: every plan is costed unfused and its arguments drop the flag.
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster topologies/h100-sxm-8.json "
      "--global-batch 64 --parallel tp=1,ep=8,pp=1";
  const Result fused = run(base);
  const Result unfused = run(base + " --permute-fusion off --json");
  ASSERT_EQ(fused.code, 0) << fused.err;
  ASSERT_EQ(unfused.code, 0) << unfused.err;
  EXPECT_NE(fused.out.find("--moe-permute-fusion"), std::string::npos);
  EXPECT_EQ(unfused.out.find("--moe-permute-fusion"), std::string::npos);
  const auto plans = nlohmann::json::parse(unfused.out)["plans"];
  ASSERT_GE(plans.size(), 1u);
  for (const auto& p : plans) EXPECT_EQ(p["switches"]["permute_fusion"], false);
  expect_one_line_error(run(base + " --permute-fusion search"),
                        "--permute-fusion: 'search' is not one of");
}

TEST(Cli, PlanForADenseModelSaysNothingOfExperts) {
  // Llama-2-7B: no received-token limit or MACT column, no MoE recompute module in the
  // arguments (the default pair keeps layernorm alone), no EP size beside the DeepSpeed config.
  const Result r =
      run("plan --model models/hf/llama-2-7b.config.json --cluster topologies/h100-sxm-8.json "
          "--global-batch 256 --recompute selective --top 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Memory per GPU by stage (headroom "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--recompute-modules layernorm \\\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DeepSpeed config:\n"), std::string::npos) << r.out;
  for (const char* absent : {"s''", "MACT", "moe_act", "ep_size", "--num-experts"})
    EXPECT_EQ(r.out.find(absent), std::string::npos) << absent << "\n" << r.out;
}

TEST(Cli, PlanPricesTheLossKernelItPrints) {
  // Llama 3 8B at 8K tokens over two stages of one H100 node: the last stage runs the loss over
  // 128,256 logits a token. Transformer Engine's kernel (the default, which NVIDIA's recipes
  // run) keeps the BF16 logits; Megatron's native one keeps the FP32 softmax too and passes
  // over them more often: slower, and 4 bytes a logit more on the last stage. The arguments,
  // the plan file and simulate agree on which ran.
  const std::string dir = temp_path("moeplan_loss_kernel");
  std::filesystem::create_directories(dir);
  const std::string pair =
      " --model models/hf/llama-3-8b.config.json --cluster topologies/h100-sxm-8.json";
  const std::string base = "plan" + pair +
                           " --global-batch 64 --seq-len 8192 --parallel "
                           "tp=1,pp=2,cp=1,mbs=1,pp_first=16,pp_last=16 "
                           "--top 1 --json";
  const nlohmann::json te = run_json(base + " --save " + dir + "/te.json")["plans"][0];
  const nlohmann::json native =
      run_json(base + " --cross-entropy native --save " + dir + "/native.json")["plans"][0];
  EXPECT_EQ(te["switches"]["cross_entropy"], "te");
  EXPECT_EQ(native["switches"]["cross_entropy"], "native");
  auto has = [](const nlohmann::json& plan, const std::string& arg) {
    for (const auto& a : plan["megatron_args"])
      if (a.get<std::string>() == arg) return true;
    return false;
  };
  EXPECT_TRUE(has(te, "--cross-entropy-loss-fusion"));
  EXPECT_TRUE(has(te, "--cross-entropy-fusion-impl te"));
  EXPECT_TRUE(has(native, "--cross-entropy-fusion-impl native"));
  EXPECT_GT(native["predicted"]["iteration_s"].get<double>(),
            te["predicted"]["iteration_s"].get<double>());
  const double logits = 8192.0 * 128256.0;
  auto stage_activation = [](const nlohmann::json& plan, size_t stage) {
    return plan["predicted"]["stages"][stage]["activation_bytes"].get<double>();
  };
  EXPECT_NEAR(stage_activation(native, 1) - stage_activation(te, 1), 4.0 * logits, 1e3);
  EXPECT_EQ(stage_activation(native, 0), stage_activation(te, 0));
  // The simulator runs the loss the plan file names: its last stage peaks higher under native.
  auto simulated_peak = [&](const std::string& plan) {
    const nlohmann::json r =
        run_json("simulate" + pair + " --plan " + dir + "/" + plan + " --json");
    return r["stages"][1]["peak_bytes"].get<double>();
  };
  EXPECT_NEAR(simulated_peak("native.json") - simulated_peak("te.json"), 4.0 * logits,
              0.01 * logits);
  expect_one_line_error(run(base + " --cross-entropy fused"),
                        "--cross-entropy: 'fused' is not one of te, native");
  // moeplan memory counts the same logits on the layout's last stage.
  const std::string memory = "memory" + pair +
                             " --parallel tp=1,pp=2,cp=1,mbs=1,dp=4,pp_first=16,pp_last=16 "
                             "--seq-len 8192 --cross-entropy ";
  for (const auto& [kernel, plan] : {std::pair{"te", te}, {"native", native}}) {
    const nlohmann::json mem = run_json(memory + kernel + " --json");
    EXPECT_NEAR(mem["stages"][1]["activation_bytes"].get<double>(), stage_activation(plan, 1), 1e3)
        << kernel;
  }
  EXPECT_NE(run(memory + "te --explain").out.find("the last stage's loss keeps"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Cli, PlanForMegatronsUnfusedAttention) {
  // --attention-kernel unfused: the plan, its file and its arguments say so, it costs more,
  // and a kernel with another name is a one-line error from the flag and from the plan file.
  const std::string dir = temp_path("moeplan_unfused_attention");
  std::filesystem::create_directories(dir);
  const std::string base =
      "plan --model models/gpt-1.7b.json --cluster topologies/selene-a100-3072.json --gpus 32 "
      "--global-batch 512 --seq-len 2048 --parallel tp=1,pp=1 --recompute full";
  const Result fused = run(base + " --json");
  const Result unfused = run(base + " --attention-kernel unfused --json --save " + dir + "/u.json");
  ASSERT_EQ(fused.code, 0) << fused.err;
  ASSERT_EQ(unfused.code, 0) << unfused.err;
  const auto f = nlohmann::json::parse(fused.out)["plans"][0];
  const auto u = nlohmann::json::parse(unfused.out)["plans"][0];
  EXPECT_EQ(u["switches"]["attention_kernel"], "unfused");
  EXPECT_GT(u["predicted"]["iteration_s"].get<double>(),
            f["predicted"]["iteration_s"].get<double>());
  EXPECT_NE(unfused.out.find("--attention-backend unfused"), std::string::npos);
  EXPECT_EQ(fused.out.find("--attention-backend"), std::string::npos);
  expect_one_line_error(run(base + " --attention-kernel flash"),
                        "--attention-kernel: 'flash' is not one of fused, unfused");
  std::string text = read_file(dir + "/u.json");
  text.replace(text.find("\"unfused\""), 9, "\"flash\"");
  { std::ofstream(dir + "/bad.json") << text; }
  expect_one_line_error(run("simulate --model models/gpt-1.7b.json --cluster "
                            "topologies/selene-a100-3072.json --plan " +
                            dir + "/bad.json"),
                        "/switches/attention_kernel: 'flash' is not one of fused, unfused");
  std::filesystem::remove_all(dir);
}

TEST(Cli, PlanEvaluatesPlainDdpAsZeroStageZero) {
  // A user's DDP layout: optimizer states replicated (more memory than ZeRO-1), no distributed
  // optimizer in the launch arguments, DeepSpeed stage 0.
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster topologies/megascale-h800-240.json "
      "--gpus 16 --global-batch 64 --parallel tp=1,pp=2,ep=8,etp=1,dp=8,mbs=1 --recompute full "
      "--attention tp --overlap on --json --top 1";
  const Result zero = run(base + " --zero 0");
  const Result one = run(base + " --zero 1");
  ASSERT_EQ(zero.code, 0) << zero.err;
  ASSERT_EQ(one.code, 0) << one.err;
  const auto z = nlohmann::json::parse(zero.out)["plans"][0];
  const auto o = nlohmann::json::parse(one.out)["plans"][0];
  EXPECT_EQ(z["switches"]["zero_stage"], 0);
  EXPECT_EQ(z["deepspeed"]["config"]["zero_optimization"]["stage"], 0);
  EXPECT_GT(z["predicted"]["peak_bytes"].get<double>(), o["predicted"]["peak_bytes"].get<double>());
  const std::string args = z["megatron_args"].dump();
  EXPECT_EQ(args.find("--use-distributed-optimizer"), std::string::npos) << args;
  EXPECT_NE(o["megatron_args"].dump().find("--use-distributed-optimizer"), std::string::npos);
  expect_one_line_error(run(base + " --zero 4"), "--zero", 2);  // a usage error
}

TEST(Cli, PlanAndSimulateFp8Training) {
  // FP8 on H800: faster than BF16, Transformer Engine's flags, a plan file the simulator reads;
  // an A100 has no FP8 peak, which is a one-line error.
  const std::string dir = temp_path("moeplan_fp8");
  std::filesystem::create_directories(dir);
  const std::string base =
      "plan --model models/mixtral-8x7b.json --cluster topologies/megascale-h800-240.json "
      "--gpus 32 --global-batch 128 --seq-len 8192 --parallel tp=8,ep=1,etp=8,dp=4 --top 1 --json";
  const Result bf16 = run(base);
  const Result fp8 = run(base + " --precision fp8 --save " + dir + "/plan.json");
  ASSERT_EQ(bf16.code, 0) << bf16.err;
  ASSERT_EQ(fp8.code, 0) << fp8.err;
  const auto b = nlohmann::json::parse(bf16.out)["plans"][0];
  const auto f = nlohmann::json::parse(fp8.out)["plans"][0];
  EXPECT_EQ(f["switches"]["precision"], "fp8");
  EXPECT_LT(f["predicted"]["iteration_s"].get<double>(),
            0.9 * b["predicted"]["iteration_s"].get<double>());
  const std::string args = f["megatron_args"].dump();
  EXPECT_NE(args.find("--fp8-format hybrid"), std::string::npos) << args;
  EXPECT_NE(args.find("--fp8-recipe delayed"), std::string::npos) << args;
  EXPECT_NE(args.find("--fp8-param-gather"), std::string::npos) << args;
  EXPECT_EQ(f["switches"]["fp8_recipe"], "delayed");
  // DeepSeek-V3's 128-blocks: E4M3 both ways, and slower GEMMs than one scale per tensor.
  const Result block = run(base + " --precision fp8 --fp8-recipe blockwise");
  ASSERT_EQ(block.code, 0) << block.err;
  const auto k = nlohmann::json::parse(block.out)["plans"][0];
  EXPECT_EQ(k["switches"]["fp8_recipe"], "blockwise");
  const std::string block_args = k["megatron_args"].dump();
  EXPECT_NE(block_args.find("--fp8-format e4m3"), std::string::npos) << block_args;
  EXPECT_NE(block_args.find("--fp8-recipe blockwise"), std::string::npos) << block_args;
  EXPECT_GT(k["predicted"]["iteration_s"].get<double>(),
            f["predicted"]["iteration_s"].get<double>());
  EXPECT_LT(k["predicted"]["iteration_s"].get<double>(),
            b["predicted"]["iteration_s"].get<double>());
  expect_one_line_error(run(base + " --fp8-recipe blockwise"), "add --precision fp8");
  expect_one_line_error(run(base + " --precision fp8 --fp8-recipe nvfp4"), "--fp8-recipe");
  const Result sim =
      run("simulate --model models/mixtral-8x7b.json --cluster topologies/megascale-h800-240.json "
          "--plan " +
          dir + "/plan.json --json");
  ASSERT_EQ(sim.code, 0) << sim.err;
  expect_one_line_error(
      run("plan --model models/mixtral-8x7b.json --cluster "
          "topologies/megascale-a100-4x8.json --global-batch 128 --precision fp8"),
      "has no fp8 peak");
  // MXFP8 runs on Blackwell only (the cluster file's compute_capability): refused on H800.
  expect_one_line_error(run(base + " --precision fp8 --fp8-recipe mxfp8"), "needs Blackwell");
  std::filesystem::remove_all(dir);
}

TEST(Cli, PlanNoFitExitsThreeWithTheClosestCandidate) {
  // DeepSeek-V3 needs ~12 TB of weights and optimizer state: neither 8 x 80 GB of HBM nor the
  // node's 2 TB of host memory (APTMoE offload) hold it.
  const Result r =
      run("plan --model models/deepseek-v3.json --cluster topologies/h100-sxm-8.json "
          "--global-batch 64");
  expect_one_line_error(r, "nothing fits: needs", 3);
  EXPECT_NE(r.err.find("GPU has 80.0 GB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no APTMoE offload plan fits"), std::string::npos) << r.err;
  // The model zoo's GB200 MXFP8 run at VPP 6 fits only as it ran, offloading activations: the
  // planner offloads them where nothing fits as it is, and says so.
  const std::string gb200 =
      "plan --model models/hf/qwen3-235b-a22b.config.json --cluster "
      "topologies/gb200-nvl72-4x64.json --global-batch 3072 --megatron-only --precision fp8 "
      "--fp8-recipe mxfp8 --recompute-modules moe_act layernorm --dispatcher deepep --parallel "
      "tp=1,pp=4,ep=64,cp=1,vpp=6,mbs=";
  const Result offloaded = run(gb200 + "3");
  ASSERT_EQ(offloaded.code, 0) << offloaded.err;
  EXPECT_NE(offloaded.out.find("These plans offload activations"), std::string::npos);
  EXPECT_NE(offloaded.out.find("--offload-modules"), std::string::npos);
  // Twice the micro-batch fits even so: the need named is with activations offloaded.
  const Result fixed = run(gb200 + "6");
  expect_one_line_error(fixed, "nothing fits: needs", 3);
  EXPECT_NE(fixed.err.find("vpp=6,mbs=6"), std::string::npos) << fixed.err;
  EXPECT_NE(fixed.err.find("(binding: activations, activations offloaded where Megatron can); "
                           "GPU has 186.0 GB"),
            std::string::npos)
      << fixed.err;
  expect_one_line_error(run("plan --model models/mixtral-8x7b.json --cluster "
                            "topologies/h100-sxm-8.json --global-batch 64 --gpus 9"),
                        "--gpus: 9 GPUs asked");
  expect_one_line_error(run("plan --model models/mixtral-8x7b.json --cluster "
                            "topologies/h100-sxm-8.json --global-batch 64 --skew G=7"),
                        "--skew");
}

namespace moe {

TEST(Cli, PlanSaysHowCpAndEpGroupsArePlaced) {
  // MoNTA Sec. 5: cp 2 < ep 8 on a radix-64 switch places CP and EP groups orthogonally.
  const std::string args =
      "plan --model models/mixtral-8x7b.json --cluster topologies/megascale-h800-240.json "
      "--gpus 64 --global-batch 64 --seq-len 32768 --parallel tp=4,cp=2,ep=8,etp=1";
  const Result text = run(args);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("horizontal expansion, network scale 16"), std::string::npos) << text.out;
  const Result json = run(args + " --json");
  ASSERT_EQ(json.code, 0) << json.err;
  const auto e = nlohmann::json::parse(json.out)["plans"][0]["cp_expansion"];
  EXPECT_EQ(e["layout"], "horizontal");
  EXPECT_EQ(e["network_scale"], 16);
}

}  // namespace moe

TEST(Cli, PlanSaysWhichGroupsStraddleA72GpuRack) {
  // EP 32 over four GB200 NVL72 racks of 72: ranks 64-95 sit 8 and 24 on two racks. On racks of
  // 64 (as NVIDIA's runs use them) the same layout keeps every group whole and runs 3.7x faster
  // with the whole iteration in CUDA graphs (1.6x issued op by op: the host then sets the pace
  // of the unstraddled run).
  const std::string base =
      "plan --model models/hf/qwen3-30b-a3b.config.json --global-batch 1024 --gpus 256 "
      "--parallel tp=1,pp=4,ep=32,cp=1,mbs=1,vpp=1 --megatron-only --cuda-graph full --top 1 "
      "--cluster ";
  auto iteration = [](const Result& r) {
    return nlohmann::json::parse(r.out)["plans"][0]["predicted"]["iteration_s"].get<double>();
  };
  const Result straddled = run(base + "topologies/gb200-nvl72-4x72.json");
  ASSERT_EQ(straddled.code, 0) << straddled.err;
  EXPECT_NE(straddled.out.find("note: EP groups span 32 ranks, which do not tile the 72-GPU "
                               "NVLink domain: one straddles two with 8 of its 32 ranks"),
            std::string::npos)
      << straddled.out;
  const Result whole = run(base + "topologies/gb200-nvl72-4x64.json");
  EXPECT_EQ(whole.out.find("straddles"), std::string::npos);
  // DeepEP's kernels forward inside 8-GPU nodes; on a 64-GPU NVLink domain Megatron's flex
  // dispatcher runs HybridEP.
  const Result flex = run(base + "topologies/gb200-nvl72-4x64.json --dispatcher deepep");
  EXPECT_NE(flex.out.find("--moe-flex-dispatcher-backend hybridep"), std::string::npos);
  EXPECT_EQ(flex.out.find("--moe-flex-dispatcher-backend deepep"), std::string::npos);
  const double slow = iteration(run(base + "topologies/gb200-nvl72-4x72.json --json"));
  const double fast = iteration(run(base + "topologies/gb200-nvl72-4x64.json --json"));
  EXPECT_GT(slow, 3.0 * fast) << slow << " " << fast;
}

namespace moe {

TEST(Cli, PlanShowsTheHostAndTheCudaGraphsThatRemoveIt) {
  // Qwen3-235B-A22B on 256 H800 at micro-batch 1, PP 32: the breakdown has a host row, the JSON
  // its seconds; --cuda-graph full prices it away and names Megatron's flags.
  const std::string base =
      "plan --model models/hf/qwen3-235b-a22b.config.json --cluster topologies/h800-2048.json "
      "--gpus 256 --global-batch 2048 --parallel tp=2,pp=32,ep=8,cp=1,vpp=1,mbs=1 "
      "--dispatcher alltoall --overlap off --top 1";
  const Result text = run(base);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("host launch-bound"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("note: the GPUs wait"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("--cuda-graph attn or full"), std::string::npos) << text.out;
  const nlohmann::json eager = run_json(base + " --json");
  const double host = eager["plans"][0]["predicted"]["breakdown_s"]["host"].get<double>();
  EXPECT_GT(host, 5.0);
  const nlohmann::json graphed = run_json(base + " --cuda-graph full --json");
  EXPECT_EQ(graphed["plans"][0]["predicted"]["breakdown_s"]["host"].get<double>(), 0.0);
  EXPECT_EQ(graphed["plans"][0]["switches"]["cuda_graph"], "full");
  const Result flags = run(base + " --cuda-graph full");
  EXPECT_NE(flags.out.find("--cuda-graph-scope full_iteration"), std::string::npos);
  EXPECT_EQ(flags.out.find("host launch-bound"), std::string::npos);
  EXPECT_EQ(flags.out.find("note: the GPUs wait"), std::string::npos);
  expect_one_line_error(run(base + " --cuda-graph some"), "--cuda-graph");
}

}  // namespace moe

namespace moe {

TEST(Cli, PlanKeepsTheGradientPrecisionTheUserFixes) {
  // Qwen3-235B-A22B on 256 H100 with DP across nodes: --grad-reduce fp32 (Megatron's default)
  // prices FP32 gradient bytes and prints no --grad-reduce-in-bf16; bf16 prints it. At
  // micro-batch 2 (at 1 the layers wait for the host, which hides either's syncs; the simulator:
  // 20.00 s against 19.64).
  const std::string base =
      "plan --model models/hf/qwen3-235b-a22b.config.json --cluster topologies/h100-256.json "
      "--global-batch 2048 --parallel tp=2,pp=8,ep=16,cp=1,vpp=1,mbs=2 --recompute full --zero 1 "
      "--top 1";
  const nlohmann::json fp32 = run_json(base + " --grad-reduce fp32 --json");
  const nlohmann::json bf16 = run_json(base + " --grad-reduce bf16 --json");
  EXPECT_EQ(fp32["plans"][0]["switches"]["dp_bf16_compression"], false);
  EXPECT_EQ(bf16["plans"][0]["switches"]["dp_bf16_compression"], true);
  EXPECT_GT(fp32["plans"][0]["predicted"]["iteration_s"].get<double>(),
            bf16["plans"][0]["predicted"]["iteration_s"].get<double>());
  const Result text = run(base + " --grad-reduce fp32");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_EQ(text.out.find("--grad-reduce-in-bf16"), std::string::npos);
  EXPECT_NE(run(base + " --grad-reduce bf16").out.find("--grad-reduce-in-bf16"), std::string::npos);
  expect_one_line_error(run(base + " --grad-reduce fp16"), "--grad-reduce");
}

}  // namespace moe

TEST(Cli, PlanExplainsTheBestPlansLayersOperatorByOperator) {
  // A fully fixed layout has no runner-up to compare with, but --explain still traces its time:
  // each layer kind's operators with the work they price, and the same in the JSON, where the
  // forward operators' compute, tripled for forward and backward, is the breakdown's compute.
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster topologies/h100-sxm-8.json "
      "--global-batch 64 --parallel tp=1,pp=1,ep=8,cp=1,mbs=2,vpp=1 --recompute none "
      "--overlap off --zero 1 --grad-reduce bf16 --attention tp --dispatcher alltoall --explain";
  const Result r = run(base);
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* needle :
       {"The best plan's layers, operator by operator", "Layer 0 (dense FFN, softmax attention)",
        "Layer 1 (MoE, softmax attention)", "routed experts", "TFLOP/s", "MB HBM", "algbw"}) {
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;
  }
  const nlohmann::json plan = run_json(base + " --json")["plans"][0];
  ASSERT_TRUE(plan.contains("explain"));
  const nlohmann::json& layers = plan["explain"]["layers"];
  ASSERT_EQ(layers.size(), 2u);
  double forward_compute = plan["explain"]["output_head"]["time_s"].get<double>();
  const int64_t dense = 1, moe = 27;  // DeepSeekMoE-16B: its first layer dense, 27 MoE
  for (const nlohmann::json& layer : layers) {
    double compute = 0;
    for (const nlohmann::json& op : layer["forward_ops"])
      if (op["kind"] == "compute") compute += op["time_s"].get<double>();
    forward_compute += compute * static_cast<double>(layer["moe"].get<bool>() ? moe : dense);
  }
  // The loss: its forward among the ops, its backward beside them.
  const double loss_forward = plan["explain"]["loss"]["time_s"].get<double>();
  const double loss_backward = plan["explain"]["loss_backward_s"].get<double>();
  EXPECT_GT(loss_forward, 0.0);
  EXPECT_GT(plan["explain"]["loss_held_GB"].get<double>(), 0.0);
  const double gbs = 64, mbs = 2, dp = 8;  // micro-batches a GPU runs: gbs / (mbs dp)
  // And the embedding's dense gradient, once a backward.
  const double embedding = plan["explain"]["embedding_gradient"]["time_s"].get<double>();
  EXPECT_GT(embedding, 0.0);
  EXPECT_NEAR((3.0 * forward_compute + loss_forward + loss_backward + embedding) * gbs /
                  (mbs * dp) / plan["predicted"]["breakdown_s"]["compute"].get<double>(),
              1.0, 1e-6);
}

TEST(Cli, PlanComparesFixedSizesWithTheSearchsBest) {
  // A user's own sizes, fixed by --parallel: --explain sets them beside the best the search finds
  // with them free and every switch as given. DeepSeekMoE-16B at 32K tokens with TP and CP held
  // at 1 fits only with activations and optimizer states in host memory; freed, the search keeps
  // it on the GPUs, and the plan says so even without --explain.
  const std::string base =
      "plan --model models/deepseekmoe-16b.json --cluster topologies/h100-sxm-8.json "
      "--global-batch 64 --seq-len 32768 --recompute none --megatron-only --top 1 --parallel ";
  const Result offloaded = run(base + "tp=1,cp=1,pp=1");
  ASSERT_EQ(offloaded.code, 0) << offloaded.err;
  EXPECT_NE(offloaded.out.find("optimizer-offload-fraction 1"), std::string::npos);
  EXPECT_NE(offloaded.out.find("note: with --parallel's sizes free and the same switches"),
            std::string::npos)
      << offloaded.out;
  const nlohmann::json j = run_json(base + "tp=1,cp=1,pp=1 --json");
  ASSERT_TRUE(j["free_layout_best"].is_object());
  EXPECT_LT(j["free_layout_best"]["predicted"]["iteration_s"].get<double>(),
            j["plans"][0]["predicted"]["iteration_s"].get<double>());
  EXPECT_FALSE(j["free_layout_best"]["switches"].contains("optimizer_offload"));
  EXPECT_TRUE(j["plans"][0]["switches"].contains("optimizer_offload"));
  // A layout that fits as it is: the comparison only with --explain, in the terms that differ.
  const std::string fits = base + "tp=1,cp=8,pp=1,ep=8";
  EXPECT_TRUE(run_json(fits + " --json")["free_layout_best"].is_null());
  const Result explained = run(fits + " --explain");
  ASSERT_EQ(explained.code, 0) << explained.err;
  for (const char* needle : {"Your sizes (tp=1,pp=1,ep=8,cp=8) against the search's best",
                             "  yours   tp=1,pp=1,ep=8", "term ", "yours", "search"})
    EXPECT_NE(explained.out.find(needle), std::string::npos) << needle << "\n" << explained.out;
  // Without --parallel there is nothing to compare.
  EXPECT_TRUE(run_json("plan --model models/deepseekmoe-16b.json --cluster "
                       "topologies/h100-sxm-8.json --global-batch 64 --top 1 --explain --json")
                  ["free_layout_best"]
                      .is_null());
  // Sizes that fit nowhere: the one-line error names a layout that does.
  const Result none =
      run("plan --model models/mixtral-8x7b.json --cluster topologies/h100-256.json --gpus 16 "
          "--global-batch 64 --parallel tp=1,pp=1,ep=1,cp=1 --zero 1");
  expect_one_line_error(none, "nothing fits: needs", 3);
  EXPECT_NE(none.err.find("with --parallel's sizes free and the same switches, tp="),
            std::string::npos)
      << none.err;
}

TEST(Cli, PlanEvaluatesTheMegatronLaunchItIsGiven) {
  // A user's Megatron-LM launch, read back by --megatron-args: the plan's own printed arguments,
  // in a torchrun script with the flags a real one carries beside them, evaluate to the same plan
  // (sizes, switches, iteration) without --global-batch, --seq-len or --gpus, which the script
  // gives.
  const std::string model = "--model models/mixtral-8x7b.json --cluster topologies/h100-256.json ";
  const nlohmann::json searched =
      run_json("plan " + model + "--gpus 32 --global-batch 256 --megatron-only --top 1 --json");
  const nlohmann::json& best = searched["plans"][0];
  std::string script =
      "#!/bin/bash\n# Mixtral on 4 nodes\nDISTRIBUTED_ARGS=(--nproc_per_node 8 --nnodes 4 "
      "--master_addr $MASTER_ADDR)\ntorchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \\\n"
      "    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --lr 1e-4 \\\n";
  for (const auto& a : best["megatron_args"]) script += "    " + a.get<std::string>() + " \\\n";
  script += "    --data-path $DATA --no-position-embedding\n";
  const std::string file = temp_path("train_mixtral.sh");
  std::ofstream(file) << script;
  const nlohmann::json read = run_json("plan " + model + "--megatron-args " + file + " --json");
  const nlohmann::json& plan = read["plans"][0];
  EXPECT_EQ(read["search"]["layouts"], 1);
  EXPECT_EQ(read["gpus"], 32);
  EXPECT_EQ(read["global_batch"], 256);
  EXPECT_EQ(plan["parallel"], best["parallel"]);
  EXPECT_EQ(plan["switches"], best["switches"]);
  EXPECT_DOUBLE_EQ(plan["predicted"]["iteration_s"].get<double>(),
                   best["predicted"]["iteration_s"].get<double>());
  EXPECT_EQ(read["megatron_args"]["not_priced"],
            nlohmann::json::array({"--no-position-embedding"}));
  // The same launch piped in on standard input.
  const nlohmann::json piped = run_json("plan " + model + "--megatron-args - --json < " + file);
  EXPECT_EQ(piped["plans"][0]["parallel"], best["parallel"]);
  EXPECT_EQ(piped["megatron_args"]["source"], "standard input");
  // As text: what the launch fixed, and with --explain the search's best beside it.
  const Result text = run("plan " + model + "--megatron-args " + file + " --explain");
  ASSERT_EQ(text.code, 0) << text.err;
  for (const char* needle :
       {"Megatron-LM launch read from ", "not priced: --no-position-embedding",
        "  yours   tp=", "One change at a time to this run", "--recompute-granularity full"})
    EXPECT_NE(text.out.find(needle), std::string::npos) << needle << "\n" << text.out;
  // Each single change, as JSON too: the fitting ones first, by time.
  const nlohmann::json changes =
      run_json("plan " + model + "--megatron-args " + file + " --explain --json")["one_change"];
  ASSERT_GE(changes.size(), 8u);
  EXPECT_LE(changes[0]["iteration_s"].get<double>(), changes[1]["iteration_s"].get<double>());
  EXPECT_TRUE(run_json("plan " + model + "--megatron-args " + file + " --json")["one_change"]
                  .empty());  // only with --explain
  // A training log: its arguments block, and its measured iteration beside the prediction.
  const nlohmann::json logged = run_json(
      "plan " + model + "--megatron-args tests/data/megatron-mixtral-arguments.log --json");
  EXPECT_EQ(logged["gpus"], 64);
  EXPECT_EQ(logged["plans"][0]["parallel"]["vpp"], 4);
  EXPECT_DOUBLE_EQ(logged["megatron_args"]["measured_iteration_s"].get<double>(), 4.105);
  EXPECT_EQ(logged["megatron_args"]["logged_iterations"], 10);
  EXPECT_DOUBLE_EQ(
      logged["megatron_args"]["measured_memory"][1]["max_allocated_bytes"].get<double>(),
      27104.2 * 1024 * 1024);
  EXPECT_EQ(logged["megatron_args"]["measured_memory"][1]["rank"], 56);
  const Result logged_text =
      run("plan " + model + "--megatron-args tests/data/megatron-mixtral-arguments.log");
  for (const char* needle :
       {"the log measured 4105.0 ms an iteration (the median of 9 logged past the first); #1 "
        "below predicts ",
        "the log's busiest rank peaked at 28.42 GB allocated (31.89 GB reserved); #1 below "
        "predicts ",
        "stage  predicted  the log's max allocated  error"})
    EXPECT_NE(logged_text.out.find(needle), std::string::npos) << needle << "\n" << logged_text.out;
  // The command line overrides the launch: a micro-batch by --parallel, the recompute by its
  // option.
  const nlohmann::json changed = run_json("plan " + model + "--megatron-args " + file +
                                          " --parallel mbs=1 --recompute full --json");
  EXPECT_EQ(changed["plans"][0]["parallel"]["mbs"], 1);
  EXPECT_EQ(changed["plans"][0]["switches"]["recompute"], "full");
  // The log's measurement, fitted by anchor from the log itself (--measured-log).
  const std::string saved = temp_path("logged_run.json"), cal = temp_path("logged_cal.json");
  ASSERT_EQ(run("plan " + model +
                "--megatron-args tests/data/megatron-mixtral-arguments.log --save " + saved)
                .code,
            0);
  const nlohmann::json fit =
      run_json("anchor " + model + "--plan " + saved +
               " --measured-log tests/data/megatron-mixtral-arguments.log --json --out " + cal);
  EXPECT_DOUBLE_EQ(fit["measured_s"].get<double>(), 4.105);
  EXPECT_NEAR(fit["predicted_after_s"].get<double>(), 4.105, 0.005);
  expect_one_line_error(
      run("anchor " + model + "--plan " + saved + " --measured-log " + file + " --out " + cal),
      "fewer than two 'elapsed time per iteration (ms)' lines");
  // And simulate sets the log's measurement beside the planner's and its own.
  const nlohmann::json simulated =
      run_json("simulate " + model + "--plan " + saved +
               " --measured-log tests/data/megatron-mixtral-arguments.log --json");
  EXPECT_DOUBLE_EQ(simulated["measured"]["iteration_s"].get<double>(), 4.105);
  EXPECT_NEAR(simulated["measured"]["simulated_relative_difference"].get<double>(),
              simulated["simulated_iteration_s"].get<double>() / 4.105 - 1, 1e-9);
  const Result simulated_text = run("simulate " + model + "--plan " + saved +
                                    " --measured-log tests/data/megatron-mixtral-arguments.log");
  EXPECT_NE(simulated_text.out.find("measured (the log's median of 9)  4105.000 ms"),
            std::string::npos)
      << simulated_text.out;
  EXPECT_NE(simulated_text.out.find("against the measurement: planner "), std::string::npos);
  std::remove(saved.c_str());
  std::remove(cal.c_str());
  // A launch for another model, and no batch anywhere, are one-line errors.
  std::ofstream(file) << "--num-layers 40 --tensor-model-parallel-size 2\n";
  expect_one_line_error(run("plan " + model + "--megatron-args " + file + " --global-batch 64"),
                        "--num-layers: says 40, model Mixtral-8x7B has 32 layers");
  std::ofstream(file) << "--tensor-model-parallel-size 2\n";
  expect_one_line_error(run("plan " + model + "--megatron-args " + file),
                        "--global-batch: required");
  // Sizes that cannot run here say they came from the launch.
  std::ofstream(file) << "--tensor-model-parallel-size 16 --global-batch-size 64\n";
  expect_one_line_error(
      run("plan " + model + "--megatron-args " + file),
      "8 KV heads are not divisible by tp (the Megatron-LM launch in " + file + ")");
  // A launch that fits nowhere: exit 3, its one line naming the launch too.
  std::ofstream(file) << "--global-batch-size 64 --bf16 --use-distributed-optimizer "
                         "--nproc-per-node 8\n";
  const Result no_fit = run("plan " + model + "--megatron-args " + file);
  expect_one_line_error(no_fit, "nothing fits: needs", 3);
  EXPECT_NE(no_fit.err.find("(the Megatron-LM launch in " + file + ")"), std::string::npos)
      << no_fit.err;
  expect_one_line_error(run("plan " + model + "--megatron-args /no/such/file --global-batch 8"),
                        "/no/such/file: cannot open file");
  expect_one_line_error(run("plan " + model + "--megatron-args tests --global-batch 8"),
                        "tests: is a directory, not a file");
  std::remove(file.c_str());
}

namespace moe {

TEST(Cli, PlanKeepsTheAdamStatesInTheTypeItIsGiven) {
  // Mixtral-8x7B over EP 8 on one 8 x H100 node (the experts' states unsharded): BF16 Adam
  // moments (--adam-moments bf16, Megatron's precision-aware optimizer) take 6 bytes a parameter
  // off its GPUs. The plan file, the arguments, simulate and --explain's one-change table agree.
  const std::string dir = temp_path("moeplan_adam_states");
  std::filesystem::create_directories(dir);
  const std::string pair = " --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json";
  const std::string base = "plan" + pair +
                           " --global-batch 64 --parallel tp=1,pp=1,ep=8,cp=1,mbs=1 "
                           "--recompute full --grad-reduce bf16 --top 1";
  const nlohmann::json bf16 =
      run_json(base + " --adam-moments bf16 --json --save " + dir + "/p.json")["plans"][0];
  EXPECT_EQ(bf16["switches"]["adam_states"]["exp_avg"], "bf16");
  EXPECT_EQ(bf16["switches"]["adam_states"]["exp_avg_sq"], "bf16");
  EXPECT_EQ(bf16["switches"]["adam_states"]["main_params"], "fp32");
  auto has = [](const nlohmann::json& plan, const std::string& arg) {
    for (const auto& a : plan["megatron_args"])
      if (a.get<std::string>() == arg) return true;
    return false;
  };
  EXPECT_TRUE(has(bf16, "--use-precision-aware-optimizer"));
  EXPECT_TRUE(has(bf16, "--exp-avg-dtype bf16"));
  EXPECT_TRUE(has(bf16, "--exp-avg-sq-dtype bf16"));
  // Megatron's Adam as the default: every state FP32, and the plan does not fit 80 GB then.
  const Result fp32 = run(base + " --json");
  EXPECT_EQ(fp32.code, 0) << fp32.err;
  const nlohmann::json j = nlohmann::json::parse(fp32.out);
  EXPECT_FALSE(j["plans"][0]["switches"].contains("adam_states"));
  EXPECT_GT(j["plans"][0]["switches"].value("optimizer_offload", 0.0), 0.0);
  // simulate reads the types back from the plan file and peaks where the planner does.
  const nlohmann::json sim = run_json("simulate" + pair + " --plan " + dir + "/p.json --json");
  EXPECT_NEAR(sim["stages"][0]["peak_bytes"].get<double>(),
              bf16["predicted"]["peak_bytes"].get<double>(),
              0.02 * bf16["predicted"]["peak_bytes"].get<double>());
  const Result explained = run(base + " --adam-moments bf16 --explain");
  EXPECT_NE(explained.out.find("FP32 Adam states (no --use-precision-aware-optimizer)"),
            std::string::npos)
      << explained.out;
  expect_one_line_error(run(base + " --adam-moments int4"),
                        "--adam-moments: 'int4' is not one of fp32, bf16, fp16, fp8");
  expect_one_line_error(run(base + " --adam-moments bf16 --zero 0"),
                        "--zero: the precision-aware optimizer needs the distributed optimizer");
  expect_one_line_error(run(base + " --adam-moments bf16 --precision fp32"),
                        "--adam-moments: FP32 training keeps its Adam states in FP32");
  std::filesystem::remove_all(dir);
}

}  // namespace moe

namespace moe {

TEST(Cli, PlanReadsMegatronCoresDeepSeekV3Gb200Launch) {
  // The launch of Megatron-LM's DeepSeek-V3 GB200 guide (tests/data; 970 TFLOP/s a GPU on 256
  // GB200): it trains no MTP module, so against the Hugging Face config, which has one, the
  // layout is refused naming the launch; against the config without it, it plans as it ran, with
  // its BF16 Adam moments beside FP8 weights (8 bytes a parameter for master and moments).
  const std::string launch = "tests/data/megatron-deepseek-v3-gb200-launch.sh";
  const std::string cluster =
      " --cluster topologies/gb200-nvl72-4x64.json --megatron-args " + launch;
  expect_one_line_error(run("plan --model models/hf/deepseek-v3.config.json" + cluster),
                        "0 MTP modules (m), but the model trains 1 (--mtp-num-layers) (the "
                        "Megatron-LM launch in " +
                            launch + ")");
  const std::string dir = temp_path("moeplan_v3_gb200");
  std::filesystem::create_directories(dir);
  nlohmann::json config;
  std::ifstream(std::string(MOEPLAN_SOURCE_DIR) + "/models/hf/deepseek-v3.config.json") >> config;
  config["num_nextn_predict_layers"] = 0;
  std::ofstream(dir + "/deepseek-v3-no-mtp.config.json") << config.dump();
  const nlohmann::json j =
      run_json("plan --model " + dir + "/deepseek-v3-no-mtp.config.json" + cluster + " --json");
  const nlohmann::json& plan = j["plans"][0];
  EXPECT_EQ(plan["parallel"]["pp"], 8);
  EXPECT_EQ(plan["parallel"]["ep"], 32);
  EXPECT_EQ(plan["parallel"]["vpp"], 4);
  EXPECT_EQ(plan["switches"]["fp8_recipe"], "mxfp8");
  EXPECT_EQ(plan["switches"]["adam_states"]["exp_avg"], "bf16");
  EXPECT_EQ(plan["switches"]["dispatcher"], "deepep");
  EXPECT_EQ(plan["switches"]["cuda_graph"], "attn");
  EXPECT_TRUE(plan["predicted"]["peak_bytes"].get<double>() < 186e9);
  std::filesystem::remove_all(dir);
}

}  // namespace moe
