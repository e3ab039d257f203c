// `a2a`, `comm` and `affinity --json` run as a user would: MoNTA's Table 8; calibration curves
// change the answers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_run.h"
#include "test_paths.h"

TEST(Cli, MontaTable8Acceptance) {
  const nlohmann::json j = run_json(
      "a2a --cluster topologies/monta-2x8-a800.json --bytes '256 MiB' --tp 8 --ep 2 "
      "--curves calibrate/data/monta-table8-curves.json --json");
  EXPECT_NEAR(j["baseline_s"].get<double>() * 1e3, 6.909, 0.001);
  EXPECT_NEAR(j["o1_s"].get<double>() * 1e3, 2.455, 0.002);
  EXPECT_EQ(j["o2"]["chunks"].get<int>(), 4);
  EXPECT_NEAR(j["o2"]["time_s"].get<double>() * 1e3, 2.117, 0.001);
  EXPECT_EQ(j["o3"]["chunks"].get<int>(), 4);
  EXPECT_NEAR(j["o3"]["time_s"].get<double>() * 1e3, 1.967, 0.001);
  EXPECT_NEAR(j["o2"]["per_chunk"]["alltoall_s"].get<double>() * 1e3, 0.3747, 0.0001);
  EXPECT_EQ(j["choice"].get<std::string>(), "O3");
  // A curves file's pipeline_chunk_overhead_us applies unless --chunk-overhead-us says otherwise:
  // 4 chunks at 100 us each add at least 0.3 ms to O2 (the first chunk's may hide).
  nlohmann::json with = nlohmann::json::parse(
      read_file(std::string(MOEPLAN_SOURCE_DIR) + "/calibrate/data/monta-table8-curves.json"));
  with["constants"] = {{"pipeline_chunk_overhead_us", 100}};
  const std::string cal = temp_path("moeplan_a2a_constants.json");
  std::ofstream(cal) << with.dump();
  auto o2_ms = [&](const std::string& extra) {
    const Result a =
        run("a2a --cluster topologies/monta-2x8-a800.json --bytes '256 MiB' --tp 8 "
            "--ep 2 --chunks 4 --json --curves " +
            cal + extra);
    EXPECT_EQ(a.code, 0) << a.err;
    return nlohmann::json::parse(a.out)["at_chunks"]["o2"]["time_s"].get<double>() * 1e3;
  };
  EXPECT_GT(o2_ms(""), 2.117 + 0.3);
  EXPECT_NEAR(o2_ms(" --chunk-overhead-us 0"), 2.117, 0.001);
  const Result explained = run(
      "a2a --cluster topologies/monta-2x8-a800.json --bytes '256 MiB' --explain --curves " + cal);
  EXPECT_NE(explained.out.find("pays 100 us (the --curves file's pipeline_chunk_overhead_us)"),
            std::string::npos)
      << explained.out;
  std::filesystem::remove(cal);
}

TEST(Cli, CommAndAffinityProduceJson) {
  const nlohmann::json c = run_json(
      "comm --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json --parallel "
      "tp=8,ep=8,dp=1 --json");
  EXPECT_DOUBLE_EQ(c["sp_over_tp_attention"].get<double>(), 0.3125);
  EXPECT_DOUBLE_EQ(c["ep_over_tp_ffn"].get<double>(), 0.25);
  EXPECT_EQ(c["dispatcher"].get<std::string>(), "alltoall");
  EXPECT_DOUBLE_EQ(c["sar_activation"]["units_full"].get<double>(), 54.25);
  EXPECT_DOUBLE_EQ(c["sar_activation"]["units_remat"].get<double>(), 18.5);

  const nlohmann::json a = run_json(
      "affinity --model models/aptmoe-moe-s-8.json --cluster "
      "topologies/aptmoe-4x-a800-40gb-c1g4.json --G 0.5 --json");
  EXPECT_NEAR(a["G"].get<double>(), 0.5, 1e-6);
  EXPECT_EQ(a["experts"].size(), 8u);
  EXPECT_LE(a["final_r"].get<double>(), 1.0 + 1e-12);
}

TEST(Cli, CalibrationCurvesChangeTheAnswers) {
  const std::string profile = std::string(MOEPLAN_TEST_DATA) + "/curves-expert-profile.json";
  // MegaScale's dispatcher from measured efficiencies: 0.64 at Mixtral's volumes instead of 0.75.
  const nlohmann::json c = run_json(
      "comm --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json --parallel "
      "tp=8,ep=8,dp=1 --json "
      "--curves " +
      profile);
  EXPECT_NEAR(c["alltoall_over_allgather_efficiency"].get<double>(), 0.64, 0.02);
  // APTMoE with a CPU profile that is slow on small experts loads at least as many experts.
  const std::string base =
      "affinity --model models/aptmoe-moe-s-8.json --cluster "
      "topologies/aptmoe-4x-a800-40gb-c1g4.json --G 0.3 "
      "--tokens 2048 --json";
  const Result plain = run(base);
  const Result profiled = run(base + " --calibration " + profile);
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(profiled.code, 0) << profiled.err;
  auto gpu_count = [](const std::string& out) {
    int n = 0;
    const nlohmann::json j = nlohmann::json::parse(out);  // the loop must not outlive it
    for (const auto& e : j["experts"]) n += e["device"] == "gpu";
    return n;
  };
  EXPECT_GT(nlohmann::json::parse(profiled.out)["r_trace"][0].get<double>(),
            nlohmann::json::parse(plain.out)["r_trace"][0].get<double>());
  EXPECT_GE(gpu_count(profiled.out), gpu_count(plain.out));
}
