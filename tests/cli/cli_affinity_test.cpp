// `affinity` run as a user would: APTMoE's lookup table and the rates a calibration measured.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_run.h"

namespace moe {

TEST(Cli, AffinityTablePrintsTheProfilersLookupTable) {
  // APTMoE Sec. III-A: per token count, one expert's CPU and GPU time; CPU time grows with the
  // tokens, so past a break-even the GPU (with the expert's load) wins. Below a dozen tokens
  // the CPU streams the expert's 33.5 MB of FP32 weights from its memory (102 GB/s a process,
  // two GPUs a socket) for longer than it computes: the time holds at that floor.
  const nlohmann::json j = run_json(
      "affinity --model models/aptmoe-moe-s-16.json --cluster "
      "topologies/aptmoe-4x-a800-40gb-c1g2.json --tokens 64 --table --json");
  const auto& rows = j["expert_time"];
  ASSERT_EQ(rows.size(), 8u);  // 1, 2, ..., 64, then 128 = tokens x top-2
  EXPECT_EQ(rows.back()["tokens"], 128.0);
  const double floor = 2.0 * 1024 * 4096 * 4 / (205e9 / 2);
  EXPECT_NEAR(rows.front()["cpu_s"].get<double>(), floor, floor * 1e-9);
  for (size_t i = 1; i < rows.size(); ++i) {
    const double t = rows[i]["cpu_s"].get<double>(), before = rows[i - 1]["cpu_s"].get<double>();
    if (rows[i]["tokens"].get<double>() <= 8)
      EXPECT_DOUBLE_EQ(t, floor);
    else
      EXPECT_GT(t, before);
  }
  EXPECT_GT(j["load_s"]["expert"].get<double>(), 0.0);
  EXPECT_GT(j["load_s"]["mha"].get<double>(), j["load_s"]["gate"].get<double>());
  const Result text =
      run("affinity --model models/aptmoe-moe-s-16.json --cluster "
          "topologies/aptmoe-4x-a800-40gb-c1g2.json --tokens 4096 --dtype fp32 --table");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("GPU (with its load)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  CPU\n"), std::string::npos) << text.out;  // few tokens: CPU
}

TEST(Cli, AffinityTakesTheSkewAsPlanDoes) {
  // --skew G=x is --G x; balanced is G = 1/E; the skews without each expert's share say so.
  const std::string base =
      "affinity --model models/aptmoe-moe-s-16.json --cluster "
      "topologies/aptmoe-4x-a800-40gb-c1g2.json --tokens 512 --json ";
  const nlohmann::json g = run_json(base + "--G 0.3");
  EXPECT_EQ(run_json(base + "--skew G=0.3"), g);
  EXPECT_NEAR(run_json(base + "--skew balanced")["G"].get<double>(), 1.0 / 16, 1e-9);
  expect_one_line_error(run(base + "--skew worst"),
                        "--skew: 'worst': affinity needs each expert's share");
  expect_one_line_error(run(base + "--skew G=0.3 --G 0.3"), "give --skew or --G");
  expect_one_line_error(run(base + "--skew G=2"), "--skew: G = 2 is outside");
}

TEST(Cli, AffinityReadsTheGemmCurveCalibrateWrites) {
  // `calibrate` writes BF16 GEMMs as "gemm" and FP16 as "gemm_fp16"; a GPU at half efficiency
  // takes twice as long per expert in the matching dtype only.
  const std::string cal = temp_path("moeplan_affinity_gemm.json");
  std::ofstream(cal) << R"({"format": "moeplan-calibration/1", "curves": {
      "gemm": {"points": [{"size_flops": 1, "efficiency": 0.5}]},
      "gemm_fp16": {"points": [{"size_flops": 1, "efficiency": 0.25}]}}})";
  const std::string base =
      "affinity --model models/aptmoe-moe-s-16.json --cluster "
      "topologies/aptmoe-4x-a800-40gb-c1g2.json --tokens 64 --table --json";
  auto gpu_s = [&](const std::string& args) {
    const Result r = run(base + args);
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out)["expert_time"].back()["gpu_s"].get<double>();
  };
  for (const char* dtype : {"bf16", "fp16"}) {
    const std::string d = std::string(" --dtype ") + dtype;
    const double ratio = gpu_s(d + " --calibration " + cal) / gpu_s(d);
    EXPECT_NEAR(ratio, std::string(dtype) == "bf16" ? 2.0 : 4.0, 1e-9) << dtype;
  }
  EXPECT_DOUBLE_EQ(gpu_s(" --dtype fp32 --calibration " + cal), gpu_s(" --dtype fp32"));
  std::remove(cal.c_str());
}

TEST(Cli, AffinityTakesTheCpuRateTheCalibrationMeasured) {
  // The CPU curve is relative to the best rate `calibrate` measured (reference_GFLOPS): that
  // rate, shared by the node's GPUs, replaces the cluster file's achievable figure.
  const std::string cal = temp_path("moeplan_affinity_cpu.json");
  const std::string base =
      "affinity --model models/aptmoe-moe-s-16.json --cluster "
      "topologies/aptmoe-4x-a800-40gb-c1g2.json --tokens 64 --G 0.3";
  auto cpu_s = [&](const char* reference) {
    std::ofstream(cal) << R"({"format": "moeplan-calibration/1", "curves": {"cpu_expert_ffn": {)"
                       << reference << R"("points": [{"size_flops": 1, "efficiency": 1}]}}})";
    const Result r = run(base + " --table --json --calibration " + cal);
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out)["expert_time"].back()["cpu_s"].get<double>();
  };
  const double at_100 = cpu_s(R"("reference_GFLOPS": 100, )");
  EXPECT_NEAR(cpu_s(R"("reference_GFLOPS": 200, )") / at_100, 0.5, 1e-12);
  // Without a recorded rate the cluster file's figure stays (4 GPUs share a node's CPUs here).
  const double file_rate = cpu_s("");
  EXPECT_GT(std::abs(file_rate / at_100 - 1), 0.01);
  std::ofstream(cal) << R"({"format": "moeplan-calibration/1", "curves": {"cpu_expert_ffn": {
      "reference_GFLOPS": 100, "points": [{"size_flops": 1, "efficiency": 1}]}}})";
  const Result text = run(base + " --calibration " + cal);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("calibrated 100 GFLOP/s over 4 GPU(s)"), std::string::npos) << text.out;
  expect_one_line_error(run(base + " --calibration " + cal + ".missing"), ".missing");
  std::ofstream(cal) << R"({"format": "moeplan-calibration/1", "curves": {"cpu_expert_ffn": {
      "reference_GFLOPS": -3, "points": [{"size_flops": 1, "efficiency": 1}]}}})";
  expect_one_line_error(run(base + " --calibration " + cal), "reference_GFLOPS");
  std::remove(cal.c_str());
}

}  // namespace moe
