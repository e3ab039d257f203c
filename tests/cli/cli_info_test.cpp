// `--help`, `info`, `topo` and `devices` run as a user would, and bad input to any command: one
// line naming the file and field, non-zero exit.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_run.h"
#include "test_paths.h"

TEST(Cli, HelpListsEverySubcommand) {
  const Result r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"info", "topo", "memory", "a2a", "comm", "affinity"}) {
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
  }
}

TEST(Cli, InfoOnHuggingFaceMixtral) {
  const nlohmann::json j = run_json("info --model models/hf/mixtral-8x7b.config.json --json");
  EXPECT_NEAR(j["total_params"].get<double>() / 1e9, 46.7, 0.05);
  EXPECT_NEAR(j["active_params"].get<double>() / 1e9, 12.9, 0.05);
  const Result text = run("info --model models/hf/mixtral-8x7b.config.json");
  EXPECT_NE(text.out.find("46.70 B"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("12.88 B"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("routing groups"), std::string::npos) << text.out;
  // DeepSeek-V3's group-limited routing (n_group 8, topk_group 4).
  const Result v3 = run("info --model models/hf/deepseek-v3.config.json");
  EXPECT_NE(v3.out.find("routing groups     8 of 32 experts, each token's top-8 from its best 4"),
            std::string::npos)
      << v3.out;
}

TEST(Cli, InfoDescribesADenseModelWithoutExperts) {
  const Result llama = run("info --model models/hf/llama-2-7b.config.json");
  ASSERT_EQ(llama.code, 0) << llama.err;
  EXPECT_EQ(llama.out.rfind("llama-2-7b: 32 dense layers, hidden 4096, FFN 11008\n", 0), 0u)
      << llama.out;
  EXPECT_EQ(llama.out.find("routed experts"), std::string::npos) << llama.out;
}

TEST(Cli, InfoNamesHybridAndSparseAttention) {
  // Qwen3-Next: its Gated DeltaNet layers and Qwen's one shared FFN; DeepSeek-V3.2: the sparse
  // attention's top-k and indexer, with the indexer's share of the FLOPs.
  const Result next = run("info --model models/hf/qwen3-next-80b-a3b.config.json");
  ASSERT_EQ(next.code, 0) << next.err;
  EXPECT_NE(next.out.find("512 routed experts top-10, a shared FFN of 512"), std::string::npos)
      << next.out;
  EXPECT_NE(next.out.find("Gated DeltaNet on 36 of 48 layers: 16 key heads x 128, 32 value heads"),
            std::string::npos)
      << next.out;
  // Kimi Linear: Kimi Delta Attention with its low-rank gates, MLA on the rest.
  const Result kimi = run("info --model models/hf/kimi-linear-48b-a3b.config.json");
  ASSERT_EQ(kimi.code, 0) << kimi.err;
  EXPECT_NE(kimi.out.find("Kimi Delta Attention on 20 of 27 layers: 32 key heads x 128, 32 value "
                          "heads x 128, conv 4, gates of rank 128"),
            std::string::npos)
      << kimi.out;
  const nlohmann::json v32 =
      run_json("info --model models/hf/deepseek-v3.2.config.json --seq-len 131072 --json");
  EXPECT_EQ(v32["sparse_attention_topk"].get<int>(), 2048);
  EXPECT_NEAR(v32["flops_per_token"]["forward_indexer"].get<double>() / 1e9, 65.5, 0.05);
  EXPECT_NEAR(v32["flops_per_token"]["forward_attention"].get<double>() / 1e9, 100.0, 0.05);
}

TEST(Cli, TopoSummarises) {
  const Result r = run("topo --cluster topologies/aptmoe-4x-a800-40gb-c1g2.json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU 0 -> host memory"), std::string::npos);
  EXPECT_NE(r.out.find("A800-PCIe-40GB"), std::string::npos);
  EXPECT_NE(r.out.find(" 108\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not given (the clock never falls)"), std::string::npos) << r.out;
  const nlohmann::json h100 = run_json("topo --cluster topologies/h100-sxm-8.json --json");
  EXPECT_EQ(h100["gpu"]["sms"].get<int>(), 132);
  EXPECT_EQ(h100["gpu"]["power"]["limit_W"].get<double>(), 700);
  EXPECT_EQ(h100["gpu"]["power"]["sustained_rate"].get<double>(), 0.85);
}

TEST(Cli, TopoListsARackScaleNodesRegularPartsOnce) {
  // A GB200 NVL72 rack: 36 superchips, 36 Graces and 72 NICs are three rows, not 144; the
  // GPUs reach host memory over NVLink-C2C.
  const Result r = run("topo --cluster topologies/gb200-nvl72-4x72.json");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* row : {"superchips 0-35    GPUs 2s to 2s+1 -> CPU s", "CPUs 0-35 ",
                          "NICs 0-71          400 Gb/s each, NIC k for GPU k",
                          "GPU 0 -> host memory: 2 hops: nvlink-c2c > nvlink-c2c"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  EXPECT_LT(std::count(r.out.begin(), r.out.end(), '\n'), 40);
  // An eight-GPU node keeps its rows.
  EXPECT_NE(run("topo --cluster topologies/h100-sxm-8.json").out.find("NIC 7 "), std::string::npos);
}

TEST(Cli, BadInputsGiveOneLineAndNonZeroExit) {
  const std::string d = std::string(MOEPLAN_TEST_DATA) + "/";
  expect_one_line_error(run("info --model " + d + "malformed.json"), "malformed JSON at line 4");
  expect_one_line_error(run("info --model " + d + "model-missing-hidden.json"),
                        "/hidden_size: missing required field");
  expect_one_line_error(run("info --model " + d + "hf-unknown-type.json"), "is not supported");
  expect_one_line_error(run("topo --cluster " + d + "cluster-nic-missing-gpu.json"),
                        "/node/nics/1/gpus: GPU 9 does not exist (node has 8)");
  expect_one_line_error(run("memory --model models/mixtral-8x7b.json --cluster "
                            "topologies/h100-sxm-8.json --parallel tp=3"),
                        "--parallel: tp=3: 32 attention heads are not divisible by tp");
  expect_one_line_error(run("memory --model models/mixtral-8x7b.json --cluster "
                            "topologies/h100-sxm-8.json --parallel tp=1,ep=8,dp=1"),
                        "dp=1");
  expect_one_line_error(run("memory --model models/mixtral-8x7b.json --cluster "
                            "topologies/h100-sxm-8.json --parallel tq=2"),
                        "tq: unknown size");
  expect_one_line_error(run("a2a --cluster topologies/h100-sxm-8.json --bytes lots"), "--bytes");
  expect_one_line_error(
      run("affinity --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json --G 2"),
      "outside [1/E, 1]");
  expect_one_line_error(run("memory --model models/mixtral-8x7b.json"), "--cluster is required", 2);
  expect_one_line_error(run("frobnicate"), "", 2);
  // Numeric flags name the flag and the value, not CLI11's range bounds.
  const std::string plan =
      "plan --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json ";
  expect_one_line_error(run(plan + "--global-batch 64 --gpus 0"), "--gpus: must be positive, got 0",
                        2);
  expect_one_line_error(run(plan + "--global-batch 64 --seq-len abc"),
                        "--seq-len: 'abc' is not a number", 2);
  // Every kind of check the subcommands bind through command_line.h: range, zero or more,
  // mutually exclusive flags, and a callback that asks which of two flags was given.
  expect_one_line_error(run(plan + "--global-batch 64 --top 0"),
                        "--top: Value 0 not in range 1 to 100", 2);
  expect_one_line_error(run(plan + "--global-batch 64 --alpha 1.5"), "--alpha: Value 1.5 not in",
                        2);
  // A range holds no nan (CLI11's Range let it through: no comparison with nan fails).
  expect_one_line_error(run(plan + "--global-batch 64 --alpha nan"),
                        "--alpha: 'nan' is not a number", 2);
  expect_one_line_error(run("a2a --cluster topologies/h100-sxm-8.json --bytes 1 "
                            "--chunk-overhead-us -1"),
                        "--chunk-overhead-us: must be zero or more, got -1", 2);
  const std::string anchor =
      "anchor --model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json --plan p.json "
      "--out o.json ";
  expect_one_line_error(run(anchor + "--measured-ms 900 --measured-tflops 400"),
                        "--measured-ms excludes --measured-tflops", 2);
  expect_one_line_error(run(anchor), "--measured-ms: give the measured iteration", 1);
  // A bad flag is the only line, even where the layout would also draw a warning.
  expect_one_line_error(run("memory --model models/mixtral-8x7b.json --cluster "
                            "topologies/h100-sxm-8.json --chunks 0"),
                        "--chunks: '0' is not a positive integer or auto");
  expect_one_line_error(run("a2a --cluster topologies/h100-sxm-8.json --bytes '0 MiB'"),
                        "--bytes: '0 MiB' must be positive");
  // Nothing fixed: the error says what does not divide without an empty list of fixed sizes.
  // (One sequence of one token on 16,384 GPUs: TP, CP and DP must be 1, and pp cannot exceed
  // the 32 layers.)
  const Result none =
      run("plan --model models/mixtral-8x7b.json --cluster topologies/h800-16384.json "
          "--global-batch 1 --seq-len 1");
  expect_one_line_error(none,
                        "no valid layout of 16384 GPUs for Mixtral-8x7B (heads, experts, layers, "
                        "sequence length 1 or global batch 1 do not divide)");
  EXPECT_EQ(none.err.find("fixed sizes"), std::string::npos) << none.err;
  // A fixed size that rules out every layout on its own is named with what it fails.
  expect_one_line_error(run(plan + "--global-batch 64 --seq-len 4096 --parallel tp=8,pp=2"),
                        "no valid layout of 8 GPUs for Mixtral-8x7B with the fixed sizes "
                        "tp=8,pp=2: tp=8 x pp=2 = 16 GPUs does not divide 8");
  // An odd sequence still plans (TP and CP 1), but a fixed CP that cannot split it is named.
  EXPECT_EQ(run(plan + "--global-batch 64 --seq-len 4095 --top 1").code, 0);
  expect_one_line_error(
      run(plan + "--global-batch 64 --seq-len 4095 --parallel tp=1,cp=2,pp=1,ep=8,mbs=1"),
      "cp=2: sequence length 4095 is not divisible by 2 x cp = 4");
  expect_one_line_error(run("memory --model models/mixtral-8x7b.json --cluster "
                            "topologies/h100-sxm-8.json --parallel tp=8,pp=1,ep=8,dp=1 "
                            "--seq-len 4092"),
                        "--parallel: tp=8: the 4092 tokens of a sequence on each CP rank are not "
                        "divisible by tp");
}

TEST(Cli, DevicesListsGpusOrSaysThereAreNone) {
  const Result r = run("devices --json");
  if (r.code == 0) {
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_GE(j["devices"].size(), 1u);
    EXPECT_FALSE(j["driver"].get<std::string>().empty());
  } else {
    // No GPU here (CI): one line, exit 1, never a crash.
    expect_one_line_error(r, "GPU");
  }
}
