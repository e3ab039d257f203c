// `calibrate` (its CPU part runs anywhere) and `execute` (inputs checked anywhere; the run needs a
// GPU) as a user would run them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_run.h"
#include "planner/io/loaders.h"
#include "test_paths.h"

namespace moe {

TEST(Cli, CalibrateCpuWritesACurveFileThatResumes) {
  const std::string out = temp_path("moeplan_calibration.json");
  std::remove(out.c_str());
  const std::string cmd = "calibrate --only cpu --quick --model " + std::string(MOEPLAN_TEST_DATA) +
                          "/model-tiny-moe.json --out " + out;
  const Result r = run(cmd);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("cpu expert"), std::string::npos) << r.out;
  const io::Calibration cal = io::load_calibration(out);
  EXPECT_EQ(cal.curves.count("cpu_expert_ffn"), 1u);
  EXPECT_EQ(cal.provenance["tool"], "moeplan calibrate");
  // The affinity split reads it.
  EXPECT_EQ(run("affinity --model models/aptmoe-moe-s-16.json --cluster "
                "topologies/aptmoe-4x-a800-40gb-c1g4.json --G 0.3 --calibration " +
                out)
                .code,
            0);
  const Result again = run(cmd + " --resume");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("kept from the earlier run"), std::string::npos) << again.out;
  expect_one_line_error(run("calibrate --only cpu,tpu --out " + out), "tpu");
  // The GPU parts need a GPU: without one (CI), one line and exit 1.
  expect_one_line_error(run("calibrate --only gemm --out " + out), "--cluster");
  expect_one_line_error(
      run("calibrate --only gemm --sustain -1 --cluster topologies/h100-1.json --out " + out),
      "--sustain", 2);  // a malformed flag: CLI11's usage exit
  // With the cluster file, a machine without a GPU says so (CI has none; a GPU box measures).
  const Result gpu =
      run("calibrate --only copy --quick --cluster topologies/h100-1.json --out " + out + ".gpu");
  if (gpu.code != 0) {
    EXPECT_NE(gpu.err.find("no GPU"), std::string::npos) << gpu.err;
  }
  std::remove((out + ".gpu").c_str());
  // The collectives: without a GPU one line; several ranks need a file to meet through.
  const Result nccl =
      run("calibrate --only nccl --cluster topologies/h100-sxm-8.json --out " + out + ".gpu");
  if (nccl.code != 0) {
    EXPECT_NE(nccl.err.find("no GPU"), std::string::npos) << nccl.err;
  }
  std::remove((out + ".gpu").c_str());
  expect_one_line_error(
      run("calibrate --only nccl --cluster topologies/h100-sxm-8.json --out " + out,
          "MOEPLAN_RANK=1 MOEPLAN_WORLD_SIZE=2"),
      "--nccl-id-file");
  std::remove(out.c_str());
}

}  // namespace moe

namespace moe {

// execute: input errors are named on any machine; the run itself needs a GPU, and without one
// (CI) it says so in one line and exits 1. With a GPU it prints predicted beside measured.
TEST(Cli, ExecuteChecksItsInputsAndNeedsAGpu) {
  const std::string plan = temp_path("moeplan_execute_plan.json");
  const std::string pair =
      "--model models/mixtral-8x7b.json --cluster topologies/megascale-h800-240.json";
  ASSERT_EQ(
      run("plan " + pair + " --global-batch 256 --seq-len 4096 --gpus 32 --save " + plan).code, 0);
  const std::string cmd = "execute " + pair + " --plan " + plan;
  expect_one_line_error(run(cmd + " --chunks 1,0"), "--chunks");
  expect_one_line_error(run(cmd + " --layer 32"), "no routed experts");
  expect_one_line_error(run(cmd + " --repeats 0"), "--repeats");
  expect_one_line_error(run(cmd + " --skew G=7"), "--skew");
  // --predict-only needs no GPU: the case, and the prediction at each chunk count.
  const std::string predicted = temp_path("moeplan_execute_predicted.json");
  const Result p = run(cmd + " --predict-only --json " + predicted);
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("MemFine eq.2 peak"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("up projection backward"), std::string::npos) << p.out;
  const nlohmann::json pj = nlohmann::json::parse(read_file(predicted));
  ASSERT_EQ(pj["runs"].size(), 4u);
  EXPECT_FALSE(pj["runs"][0].contains("measured_s"));
  // Halving the chunk's rows halves both peaks; more chunks cost time (smaller GEMMs, more
  // launches).
  EXPECT_NEAR(pj["runs"][0]["buffer_peak_bytes"].get<double>() /
                  pj["runs"][1]["buffer_peak_bytes"].get<double>(),
              2.0, 1e-3);
  EXPECT_LT(pj["runs"][0]["predicted_s"].get<double>(), pj["runs"][3]["predicted_s"].get<double>());
  std::remove(predicted.c_str());
  const Result r = run(cmd + " --chunks 1,2 --repeats 2");
  if (r.code != 0) {
    expect_one_line_error(r, "no GPU");
  } else {
    EXPECT_NE(r.out.find("measured peak"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("up projection backward"), std::string::npos) << r.out;
  }
  // APTMoE's split, executed: forward in BF16 only, and a GPU.
  const std::string split =
      "affinity --model models/aptmoe-moe-s-8.json --cluster "
      "topologies/aptmoe-4x-a800-40gb-c1g4.json --G 0.3 --execute";
  expect_one_line_error(run(split), "--dtype bf16");
  expect_one_line_error(run(split + " --dtype bf16 --pass backward"), "forward pass only");
  const Result s = run(split + " --dtype bf16 --repeats 2");
  if (s.code != 0) {
    expect_one_line_error(s, "no GPU");
  } else {
    EXPECT_NE(s.out.find("split speedup"), std::string::npos) << s.out;
  }
  // An offload plan (Mixtral-8x7B does not fit 8 x 80 GB): execute runs its APTMoE split.
  const std::string offload = temp_path("moeplan_execute_offload.json");
  const std::string node = "--model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json";
  ASSERT_EQ(run("plan " + node + " --global-batch 64 --seq-len 4096 --save " + offload).code, 0);
  const Result off = run("execute " + node + " --plan " + offload + " --skew G=0.3 --repeats 1");
  if (off.code != 0) {
    expect_one_line_error(off, "no GPU");
  } else {
    EXPECT_NE(off.out.find("APTMoE offload plan"), std::string::npos) << off.out;
  }
  std::remove(offload.c_str());
  // Launched as several ranks, execute runs MoNTA's strategies for the plan's expert all-to-all:
  // the plan needs expert TP, and the world must be its etp x ep group.
  const std::string monta_plan = temp_path("moeplan_execute_monta.json");
  const std::string monta_pair =
      "--model models/mixtral-8x7b.json --cluster topologies/monta-2x8-a800.json";
  ASSERT_EQ(run("plan " + monta_pair +
                " --parallel tp=8,ep=2,etp=8 --global-batch 16 --seq-len 8192 --save " + monta_plan)
                .code,
            0);
  expect_one_line_error(
      run(cmd + " --nccl-id-file /tmp/id", "MOEPLAN_RANK=0 MOEPLAN_WORLD_SIZE=16"),
      "needs etp > 1");
  expect_one_line_error(
      run("execute " + monta_pair + " --plan " + monta_plan + " --nccl-id-file /tmp/id",
          "MOEPLAN_RANK=0 MOEPLAN_WORLD_SIZE=4"),
      "tp x ep = 8 x 2 = 16");
  std::remove(monta_plan.c_str());
  std::remove(plan.c_str());
  // MoNTA's strategies on NCCL: the launcher's world must be tp x ep ranks, several of them need
  // an id file, and one rank with a GPU runs (tp = ep = 1) or says there is none.
  const std::string a2a =
      "a2a --cluster topologies/monta-2x8-a800.json --bytes '256 MiB' --execute";
  expect_one_line_error(run(a2a + " --tp 8 --ep 2"), "tp x ep = 8 x 2 = 16");
  expect_one_line_error(run(a2a + " --tp 8 --ep 2", "MOEPLAN_RANK=0 MOEPLAN_WORLD_SIZE=16"),
                        "--nccl-id-file");
  const Result one = run(a2a + " --tp 1 --ep 1 --repeats 2");
  if (one.code != 0) {
    expect_one_line_error(one, "no GPU");
  } else {
    EXPECT_NE(one.out.find("fastest measured"), std::string::npos) << one.out;
  }
}

}  // namespace moe

namespace moe {

TEST(Cli, ACalibrationThatDoesNotFitTheClusterIsWarnedAbout) {
  // calibrate/data/h100.json was measured on an H100 (its provenance names the GPU): on an H800
  // cluster plan says so in one line; on an H100 cluster, nothing. h100-sustained.json timed its
  // GEMMs after 2 s back to back (provenance gemm_sustain_s): on the H100 cluster, whose GPUs the
  // planner slows by their power limit, that clock would count twice, and plan says so.
  const std::string plan =
      "plan --model models/mixtral-8x7b.json --global-batch 256 --seq-len 4096 --top 1 "
      "--calibration calibrate/data/";
  const Result other = run(plan + "h100.json --cluster topologies/h800-2048.json --gpus 64");
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_NE(other.err.find("warning: calibrate/data/h100.json was measured on NVIDIA H100 80GB "
                           "HBM3; cluster H800 x2048 has H800-SXM5-80GB GPUs"),
            std::string::npos)
      << other.err;
  EXPECT_EQ(std::count(other.err.begin(), other.err.end(), '\n'), 1) << other.err;
  const Result same = run(plan + "h100.json --cluster topologies/h100-256.json");
  ASSERT_EQ(same.code, 0) << same.err;
  EXPECT_EQ(same.err.find("warning"), std::string::npos) << same.err;
  const Result sustained = run(plan + "h100-sustained.json --cluster topologies/h100-256.json");
  ASSERT_EQ(sustained.code, 0) << sustained.err;
  EXPECT_NE(sustained.err.find("calibrate/data/h100-sustained.json's GEMM curves were timed "
                               "after 2 s back to back"),
            std::string::npos)
      << sustained.err;
  EXPECT_NE(sustained.err.find("counts twice"), std::string::npos);
}

}  // namespace moe
