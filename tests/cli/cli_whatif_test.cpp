// `whatif` run as a user would: sweeps over hardware and plan fields, written as CSV and HTML,
// resumed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/cli_run.h"
#include "planner/io/loaders.h"
#include "planner/model_stats.h"
#include "test_paths.h"

namespace moe {

TEST(Cli, WhatifSweepsWritesCsvAndHtmlAndResumes) {
  const std::string dir = temp_path("moeplan_whatif");
  std::filesystem::remove_all(dir);
  const std::string pair =
      "--model models/deepseekmoe-16b.json --cluster topologies/h100-sxm-8.json";
  const std::string sweep = " --search --global-batch 64 --sweep skew=balanced,G=0.3 --out " + dir;
  const Result first = run("whatif " + pair + sweep + " --sweep seq-len=2048,4096");
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.out.find("4 point(s) computed, 0 kept"), std::string::npos) << first.out;
  const std::string csv = read_file(dir + "/points.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);  // header + 4 points
  EXPECT_NE(csv.find("seq-len=4096;skew=G=0.3"), std::string::npos) << csv;
  const std::string html = read_file(dir + "/report.html");
  size_t charts = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1))
    ++charts;
  // tokens/s, MFU, iteration, exposed communication, peak memory and (the H100s giving their
  // power) tokens per joule against each of the two axes; the stacked breakdown.
  EXPECT_EQ(charts, 13u);
  EXPECT_NE(html.find("Tokens per joule (GPU boards) vs seq-len"), std::string::npos);
  EXPECT_NE(html.find("<h2>Against skew</h2>"), std::string::npos);
  EXPECT_NE(html.find("MFU vs seq-len"), std::string::npos);
  EXPECT_NE(html.find("MFU vs skew"), std::string::npos);
  EXPECT_NE(html.find(">G=0.3</text>"), std::string::npos);  // a categorical axis's tick
  EXPECT_NE(html.find("GPU memory"), std::string::npos);
  EXPECT_NE(html.find("Iteration time breakdown"), std::string::npos);
  EXPECT_NE(html.find("<rect"), std::string::npos);
  // Every point's split: compute, exposed communication, bubble and host wait add up to at most
  // the iteration, and compute is most of it.
  EXPECT_NE(csv.find("peak_memory_GB,compute_s,exposed_comm_s,bubble_s,host_s,gpu_power_W,"
                     "tokens_per_joule,plan"),
            std::string::npos);
  for (const auto& f : csv_rows(csv)) {
    ASSERT_GE(f.size(), 12u) << f[0];
    // point, skew, seq-len, status, iteration, tokens, mfu, peak, compute, comm, bubble, host
    const double iteration = std::stod(f[4]), compute = std::stod(f[8]), comm = std::stod(f[9]),
                 bubble = std::stod(f[10]), host = std::stod(f[11]);
    EXPECT_GE(host, 0.0) << f[0];
    EXPECT_LE(compute + comm + bubble + host, iteration * (1 + 1e-9)) << f[0];
    EXPECT_GT(compute, 0.5 * iteration) << f[0];
  }
  EXPECT_EQ(html.find("<script"), std::string::npos);  // no script, no network
  // A wider sweep keeps the four finished points.
  const Result again = run("whatif " + pair + sweep + " --sweep seq-len=2048,4096,8192 --resume");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("2 point(s) computed, 4 kept"), std::string::npos) << again.out;

  expect_one_line_error(run("whatif " + pair + sweep + " --sweep color=red"), "color");
  expect_one_line_error(run("whatif " + pair + " --out " + dir + " --sweep seq-len=1"), "--search");
  // A sweep in which no point runs is an error (exit 1, one line naming the first point's
  // reason), its files still written.
  const Result none =
      run("whatif " + pair + " --search --global-batch 64 --sweep tp=3,5 --out " + dir + "_none");
  expect_one_line_error(none, "no point of the sweep ran; tp=3:");
  EXPECT_NE(read_file(dir + "_none/points.csv").find("tp=5"), std::string::npos);
  // A point without numbers shows dashes and its reason, not nan.
  EXPECT_EQ(none.out.find("nan"), std::string::npos) << none.out;
  EXPECT_NE(none.out.find(" -  "), std::string::npos) << none.out;
  EXPECT_EQ(read_file(dir + "_none/report.html").find("nan"), std::string::npos);
  // A dense model has no experts to sweep: refused before any point runs.
  expect_one_line_error(run("whatif --model models/llama-2-7b.json --cluster "
                            "topologies/h100-sxm-8.json --search --global-batch 64 --out " +
                            dir + "_dense --sweep experts=2,8"),
                        "--sweep: experts: Llama-2-7B is dense");
  EXPECT_FALSE(std::filesystem::exists(dir + "_dense/points.csv"));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir + "_none");
}

}  // namespace moe

namespace moe {

TEST(Cli, WhatifSweepsHardwareAndPlanFields) {
  const std::string dir = temp_path("moeplan_whatif_axes");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string pair =
      "--model models/deepseekmoe-16b.json --cluster topologies/megascale-h800-240.json";
  const std::string plan = dir + "/plan.json";
  ASSERT_EQ(
      run("plan " + pair + " --gpus 16 --global-batch 64 --parallel tp=1,ep=16 --save " + plan)
          .code,
      0);
  // A one-axis sweep of a saved plan into dir/NAME: the run, and the tokens/s of each point
  // that ran, by its axis value (points.csv: point, value, status, iteration_s, tokens/s, ...).
  auto sweep_tokens = [&](const std::string& plan_file, const std::string& sweep,
                          const std::string& name) {
    const Result run_result = run("whatif " + pair + " --plan " + plan_file + " --sweep " + sweep +
                                  " --out " + dir + "/" + name);
    std::map<std::string, double> tokens;
    for (const auto& f : csv_rows(read_file(dir + "/" + name + "/points.csv"))) {
      EXPECT_GE(f.size(), 6u) << f[0];
      if (f.size() >= 6 && f[2] == "ok") tokens[f[1]] = std::stod(f[4]);
    }
    return std::pair{run_result, tokens};
  };
  // A fixed plan on other GPUs and NICs: the EP all-to-all crosses nodes, so a slower NIC
  // slows it; an A100 is slower than an H800.
  const Result r = run("whatif " + pair + " --plan " + plan +
                       " --sweep gpu=H800,A100 --sweep nic-Gbps=50,400 --out " + dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, double> tokens, comm;
  for (const auto& f : csv_rows(read_file(dir + "/points.csv"))) {
    // point, gpu, nic-Gbps, status, iteration_s, tokens_per_s, mfu, peak, compute_s, comm_s
    ASSERT_GE(f.size(), 10u) << f[0];
    EXPECT_EQ(f[3], "ok") << f[0];
    tokens[f[1] + "/" + f[2]] = std::stod(f[5]);
    comm[f[1] + "/" + f[2]] = std::stod(f[9]);
  }
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_LT(tokens["H800/50"], tokens["H800/400"]);
  EXPECT_GT(comm["H800/50"], comm["H800/400"]);  // the slower NIC shows as exposed comm
  EXPECT_LT(tokens["A100/400"], tokens["H800/400"]);
  // Plan fields fix the search: every point's best plan has the swept tp.
  const Result t =
      run("whatif " + pair + " --search --global-batch 64 --sweep gpus=16 --sweep tp=1,2 --out " +
          dir + "/tp");
  ASSERT_EQ(t.code, 0) << t.err;
  const std::string tp_csv = read_file(dir + "/tp/points.csv");
  EXPECT_NE(tp_csv.find("\"tp=1,"), std::string::npos) << tp_csv;
  EXPECT_NE(tp_csv.find("\"tp=2,"), std::string::npos) << tp_csv;
  // Switches are plan fields too: FP8 beats BF16 on the fixed plan; a search told to use
  // MegaScale's intra-operator overlap returns plans that do.
  const auto [prec, by_precision] = sweep_tokens(plan, "precision=bf16,fp8", "prec");
  ASSERT_EQ(prec.code, 0) << prec.err;
  ASSERT_EQ(by_precision.size(), 2u);
  EXPECT_GT(by_precision.at("fp8"), by_precision.at("bf16"));
  // The recipe implies FP8: per-block scales between BF16 and one scale per tensor.
  const auto [recipe, by_recipe] = sweep_tokens(plan, "fp8-recipe=delayed,blockwise", "recipe");
  ASSERT_EQ(recipe.code, 0) << recipe.err;
  ASSERT_EQ(by_recipe.size(), 2u);
  EXPECT_LT(by_recipe.at("blockwise"), by_recipe.at("delayed"));
  EXPECT_GT(by_recipe.at("blockwise"), by_precision.at("bf16"));
  expect_one_line_error(
      run("whatif " + pair + " --plan " + plan +
          " --sweep precision=bf16 --sweep fp8-recipe=blockwise --out " + dir + "/bad"),
      "this point's precision is bf16");
  const Result intra = run("whatif " + pair +
                           " --search --global-batch 64 --sweep gpus=16 --sweep intra-overlap=on "
                           "--out " +
                           dir + "/intra");
  ASSERT_EQ(intra.code, 0) << intra.err;
  EXPECT_NE(read_file(dir + "/intra/points.csv").find("intra-overlap"), std::string::npos);
  // The dispatcher too: EP = 16 over two nodes, as all-to-all and as MegaScale's all-gather.
  const Result disp = run("whatif " + pair + " --plan " + plan +
                          " --sweep dispatcher=alltoall,allgather --out " + dir + "/disp");
  ASSERT_EQ(disp.code, 0) << disp.err;
  std::map<std::string, std::string> plan_of;
  for (const auto& f : csv_rows(read_file(dir + "/disp/points.csv"))) {
    ASSERT_GE(f.size(), 4u) << f[0];
    EXPECT_EQ(f[2], "ok") << f[0];
    plan_of[f[1]] = f.back();
  }
  EXPECT_NE(plan_of["allgather"].find("dispatch=allgather"), std::string::npos);
  EXPECT_EQ(plan_of["alltoall"].find("dispatch=allgather"), std::string::npos);
  // CUDA graphs: the whole iteration captured leaves nothing for the host to issue, so a plan
  // at micro-batch 1 (host-bound) runs faster.
  const std::string small = dir + "/plan_mbs1.json";
  ASSERT_EQ(run("plan " + pair + " --gpus 16 --global-batch 64 --parallel tp=1,ep=16,cp=1,mbs=1 " +
                "--save " + small)
                .code,
            0);
  const auto [graphs, by_graphs] = sweep_tokens(small, "cuda-graph=none,full", "graphs");
  ASSERT_EQ(graphs.code, 0) << graphs.err;
  ASSERT_EQ(by_graphs.size(), 2u);
  EXPECT_GT(by_graphs.at("full"), by_graphs.at("none"));
  // Megatron's recompute modules, joined by '+': replaying the MoE block costs time and saves
  // memory against the element-wise pair.
  const Result mods =
      run("whatif " + pair + " --plan " + plan +
          " --sweep recompute-modules=moe_act+layernorm,moe --out " + dir + "/mods");
  ASSERT_EQ(mods.code, 0) << mods.err;
  std::map<std::string, std::pair<double, double>> time_and_peak;
  for (const auto& f : csv_rows(read_file(dir + "/mods/points.csv"))) {
    ASSERT_GE(f.size(), 7u) << f[0];
    EXPECT_EQ(f[2], "ok") << f[0];
    time_and_peak[f[1]] = {std::stod(f[3]), std::stod(f[6])};
  }
  EXPECT_GT(time_and_peak["moe"].first, time_and_peak["moe_act+layernorm"].first);
  EXPECT_LT(time_and_peak["moe"].second, time_and_peak["moe_act+layernorm"].second);
  // Megatron's activation offloading, the same way: the routed tokens' rows go to the host, so
  // the peak falls; under full recompute the point says why it cannot run.
  const Result off = run("whatif " + pair + " --plan " + plan +
                         " --sweep recompute-modules=moe_act+layernorm"
                         " --sweep offload-modules=none,expert_fc1+moe_act --out " +
                         dir + "/offload");
  ASSERT_EQ(off.code, 0) << off.err;
  std::map<std::string, double> peak_of;
  for (const auto& f : csv_rows(read_file(dir + "/offload/points.csv"))) {
    ASSERT_GE(f.size(), 8u) << f[0];
    EXPECT_EQ(f[3], "ok") << f[0];
    peak_of[f[2]] = std::stod(f[7]);
  }
  ASSERT_EQ(peak_of.size(), 2u);
  EXPECT_LT(peak_of["expert_fc1+moe_act"], peak_of["none"]);
  const Result refused =
      run("whatif " + pair + " --plan " + plan +
          " --sweep recompute=full --sweep offload-modules=moe_act --out " + dir + "/offload_full");
  EXPECT_NE(read_file(dir + "/offload_full/points.csv").find("Megatron offloads activations"),
            std::string::npos)
      << refused.err;
  // Kernels too: Megatron's unfused attention and permutation each cost the fixed plan time
  // (the plan recomputes, so the unfused scores of one layer fit). A kernel with no such name
  // is a failed point that says so.
  const std::string full = dir + "/full.json";
  ASSERT_EQ(run("plan " + pair + " --gpus 16 --global-batch 64 --parallel tp=1,ep=16 " +
                "--recompute full --save " + full)
                .code,
            0);
  // So do FP32 gradients (DP 16 across two nodes: the reduce-scatter moves twice the bytes),
  // and Megatron's native loss kernel (more passes over the logits than Transformer Engine's).
  for (const char* axis : {"attention-kernel=fused,unfused", "permute-fusion=on,off",
                           "grad-reduce=bf16,fp32", "cross-entropy=te,native"}) {
    const std::string out = dir + "/" + std::string(axis).substr(0, 6);
    const Result k =
        run("whatif " + pair + " --plan " + full + " --sweep " + axis + " --out " + out);
    ASSERT_EQ(k.code, 0) << k.err;
    std::vector<double> tokens_per_s;
    for (const auto& f : csv_rows(read_file(out + "/points.csv"))) {
      ASSERT_GE(f.size(), 5u) << f[0];
      EXPECT_EQ(f[2], "ok") << f[0];
      tokens_per_s.push_back(std::stod(f[4]));
    }
    ASSERT_EQ(tokens_per_s.size(), 2u) << axis;
    EXPECT_GT(tokens_per_s[0], tokens_per_s[1]) << axis;  // fused / on first
  }
  // A point that cannot run says why in its row; a sweep of nothing else is an error too.
  expect_one_line_error(run("whatif " + pair + " --plan " + full +
                            " --sweep attention-kernel=flash --out " + dir + "/flash"),
                        "'flash' is not one of fused, unfused");
  EXPECT_NE(read_file(dir + "/flash/points.csv").find("'flash' is not one of fused, unfused"),
            std::string::npos);
  // A GPU name two cluster files share is a failed point naming both; chunks need a plan.
  const Result a =
      run("whatif " + pair + " --plan " + plan + " --sweep gpu=A800,H100 --out " + dir);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.out.find("'A800' is ambiguous"), std::string::npos) << a.out;
  expect_one_line_error(
      run("whatif " + pair + " --search --global-batch 64 --sweep chunks=2 --out " + dir),
      "chunks needs --plan");
  // --calibration reaches every point: a costlier FCDA round slows 8 chunks, not 1.
  auto by_chunks = [&](const std::string& extra, const std::string& out) {
    const Result w =
        run("whatif " + pair + " --plan " + plan + " --sweep chunks=1,8 --out " + out + extra);
    EXPECT_EQ(w.code, 0) << w.err;
    std::map<std::string, double> seconds;
    for (const auto& f : csv_rows(read_file(out + "/points.csv"))) {
      if (f.size() >= 4) seconds[f[1]] = std::stod(f[3]);  // point, chunks, status, iteration_s
    }
    return seconds;
  };
  const auto plain = by_chunks("", dir + "/plain");
  const auto fitted =
      by_chunks(" --calibration calibrate/data/memfine-fcda-round.json", dir + "/fitted");
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(fitted.size(), 2u);
  EXPECT_DOUBLE_EQ(fitted.at("1"), plain.at("1"));
  EXPECT_GT(fitted.at("8"), plain.at("8") * 1.01);
  expect_one_line_error(
      run("whatif " + pair + " --plan " + plan +
          " --sweep chunks=1 --calibration tests/data/curves-bad-unit.json --out " + dir),
      "curves-bad-unit.json");
  std::filesystem::remove_all(dir);
}

TEST(Cli, WhatifKeepsAPlansLayoutUnlessThePointMovesThePipeline) {
  // A saved plan at a Megatron layout (pp 4 x vpp 3): a micro-batch sweep keeps it; a vpp sweep
  // splits the layers anew, and says so where they do not split.
  const std::string dir = temp_path("moeplan_whatif_layout");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string pair =
      "--model models/hf/glm-4.5.config.json --cluster topologies/h100-1024.json";
  const Result plan = run("plan " + pair +
                          " --gpus 256 --global-batch 256 --seq-len 4096 --top 1 --parallel "
                          "\"tp=4,pp=4,ep=8,etp=1,cp=1,mbs=1,layout=Et*2|(t*10|)*9,m|L\" --save " +
                          dir + "/plan.json");
  ASSERT_EQ(plan.code, 0) << plan.err;
  const Result mbs =
      run("whatif " + pair + " --plan " + dir + "/plan.json --sweep mbs=1,2 --out " + dir + "/mbs");
  ASSERT_EQ(mbs.code, 0) << mbs.err;
  const std::string kept = read_file(dir + "/mbs/points.csv");
  EXPECT_EQ(std::count(kept.begin(), kept.end(), '\n'), 3) << kept;
  size_t layouts = 0;
  for (size_t at = kept.find("layout=Et*2|(t*10|)*9m|L"); at != std::string::npos;
       at = kept.find("layout=Et*2|(t*10|)*9m|L", at + 1))
    ++layouts;
  EXPECT_EQ(layouts, 2u) << kept;
  const Result vpp =
      run("whatif " + pair + " --plan " + dir + "/plan.json --sweep vpp=1,2 --out " + dir + "/vpp");
  ASSERT_EQ(vpp.code, 0) << vpp.err;
  const std::string moved = read_file(dir + "/vpp/points.csv");
  EXPECT_EQ(moved.find("layout="), std::string::npos) << moved;
  EXPECT_NE(moved.find("vpp=1,1,ok"), std::string::npos) << moved;
  EXPECT_NE(moved.find("92 layers do not split evenly over 8 chunks"), std::string::npos) << moved;
  std::filesystem::remove_all(dir);
}

TEST(Cli, WhatifRunsAnOffloadPlanInTheOffloadSimulator) {
  // APTMoE's MoE-S-16 on four A800-40GB: the plan is an APTMoE offload plan (64 stages), and its
  // points run as `simulate` runs it (once aborted the sweep: the GPU-resident simulator
  // refused it).
  const std::string dir = temp_path("moeplan_whatif_offload");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string pair =
      "--model models/aptmoe-moe-s-16.json --cluster topologies/aptmoe-4x-a800-40gb-c1g2.json";
  const Result plan = run("plan " + pair + " --gpus 4 --global-batch 128 --seq-len 1024 --top 1 " +
                          "--grad-reduce fp32 --save " + dir + "/p.json");
  ASSERT_EQ(plan.code, 0) << plan.err;
  ASSERT_NE(plan.out.find("offload (APTMoE): 64 stages"), std::string::npos) << plan.out;
  const Result swept = run("whatif " + pair + " --plan " + dir +
                           "/p.json --sweep pp=4,16,64,128 --out " + dir + "/pp");
  ASSERT_EQ(swept.code, 0) << swept.err;
  std::map<std::string, std::vector<std::string>> rows;
  for (const auto& f : csv_rows(read_file(dir + "/pp/points.csv"))) rows[f[0]] = f;
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows["pp=4"][2], "ok");
  EXPECT_EQ(rows["pp=16"][2], "ok");
  // Fewer, larger stages hold more weights and prefetch less of the next: slower, more memory.
  EXPECT_GT(std::stod(rows["pp=4"][3]), std::stod(rows["pp=16"][3]));
  EXPECT_GT(std::stod(rows["pp=4"][6]), std::stod(rows["pp=16"][6]));
  EXPECT_NE(rows["pp=128"][2].find("4 to 64 stages"), std::string::npos) << rows["pp=128"][2];
  // The simulated iteration is the one `simulate` prints for the plan.
  const Result sim = run("simulate " + pair + " --plan " + dir + "/p.json --json");
  ASSERT_EQ(sim.code, 0) << sim.err;
  const auto at = sim.out.find("\"simulated_iteration_s\":");
  ASSERT_NE(at, std::string::npos) << sim.out;
  EXPECT_NEAR(std::stod(sim.out.substr(at + 24)), std::stod(rows["pp=64"][3]), 1e-9);
  expect_one_line_error(
      run("whatif " + pair + " --plan " + dir + "/p.json --sweep tp=2 --out " + dir + "/tp"),
      "tp: applies to GPU-resident plans; this is an APTMoE offload plan");
  std::filesystem::remove_all(dir);
}

TEST(Cli, WhatifSweepsThePowerLimit) {
  // Llama 3 8B on one H100 node keeps its GPUs computing nearly all the time: a lower power cap
  // slows it (the clock falls from a lower busy share), and a cap above what the busy board draws
  // at full clock (893 W) leaves it at full clock. A GPU without a power entry has none to cap.
  const std::string dir = temp_path("moeplan_whatif_power");
  std::filesystem::remove_all(dir);
  const std::string model = " --model models/hf/llama-3-8b.config.json --seq-len 8192";
  const Result r = run("whatif" + model +
                       " --cluster topologies/h100-sxm-8.json --search --global-batch 128 "
                       "--sweep power-limit-W=500,700,900 --out " +
                       dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, double> tokens, watts, per_joule;
  for (const auto& f : csv_rows(read_file(dir + "/points.csv"))) {
    // point, power-limit-W, status, iteration_s, tokens_per_s, ..., gpu_power_W,
    // tokens_per_joule, plan
    ASSERT_GE(f.size(), 14u) << f[0];
    EXPECT_EQ(f[2], "ok") << f[0];
    tokens[f[1]] = std::stod(f[4]);
    watts[f[1]] = std::stod(f[11]);
    per_joule[f[1]] = std::stod(f[12]);
  }
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_LT(tokens["500"], tokens["700"]);
  EXPECT_LT(tokens["700"] * 1.1, tokens["900"]);
  // The capped boards draw their cap, and train more tokens a joule the lower it is; uncapped
  // (900 W) a board busy nearly all the time draws nearly its full 893 W.
  EXPECT_DOUBLE_EQ(watts["500"], 500);
  EXPECT_DOUBLE_EQ(watts["700"], 700);
  EXPECT_GT(watts["900"], 850);
  EXPECT_GT(per_joule["500"], per_joule["700"]);
  EXPECT_GT(per_joule["700"], per_joule["900"]);
  EXPECT_NE(read_file(dir + "/report.html").find("Tokens per joule"), std::string::npos);
  expect_one_line_error(run("whatif" + model +
                            " --cluster topologies/aptmoe-4x-a800-40gb-c1g4.json --search "
                            "--global-batch 128 --sweep power-limit-W=300 --out " +
                            dir + "/none"),
                        "has no power entry (node.gpu.power) to cap");
}

TEST(Cli, WhatifSweepsTheOptimizersCpuShare) {
  // Mixtral-8x7B on 8 H100 as Megatron runs it: half the optimizer states on the CPU does not
  // fit (the simulated point runs out of memory), all of them does, at a longer step.
  const std::string dir = temp_path("moeplan_whatif_optimizer");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string pair = "--model models/mixtral-8x7b.json --cluster topologies/h100-sxm-8.json";
  const std::string plan = dir + "/plan.json";
  ASSERT_EQ(run("plan " + pair +
                " --global-batch 64 --parallel tp=1,pp=1,ep=8,mbs=1 --recompute full "
                "--megatron-only --optimizer-offload 1 --grad-reduce fp32 --save " +
                plan)
                .code,
            0);
  const Result r = run("whatif " + pair + " --plan " + plan +
                       " --sweep optimizer-offload=0.5,1 --out " + dir + "/out");
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, std::vector<std::string>> by_share;
  for (const auto& f : csv_rows(read_file(dir + "/out/points.csv"))) by_share[f[1]] = f;
  ASSERT_EQ(by_share.size(), 2u);
  EXPECT_EQ(by_share["1"][2], "ok");
  EXPECT_NE(by_share["0.5"][2].find("OOM"), std::string::npos) << by_share["0.5"][2];
  EXPECT_LT(std::stod(by_share["1"][6]), std::stod(by_share["0.5"][6]));
  expect_one_line_error(run("whatif " + pair + " --plan " + plan +
                            " --sweep optimizer-offload=2 --out " + dir + "/bad"),
                        "'2' is not a share between 0 and 1");
}

}  // namespace moe

namespace moe {

TEST(Cli, WhatifSweepsTheAdamMoments) {
  // A fixed DeepSeekMoE-16B plan over TP 8 on one H100 node (DP 1: every state unsharded): BF16
  // moments on Megatron's precision-aware optimizer keep 6 bytes a parameter fewer, and plain
  // DDP refuses them as Megatron does.
  const std::string dir = temp_path("moeplan_whatif_adam");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string pair =
      "--model models/deepseekmoe-16b.json --cluster topologies/h100-sxm-8.json";
  const std::string plan = dir + "/plan.json";
  ASSERT_EQ(run("plan " + pair +
                " --global-batch 8 --parallel tp=8,pp=1,ep=1,etp=8,mbs=1 --recompute full "
                "--megatron-only --save " +
                plan)
                .code,
            0);
  const Result r = run("whatif " + pair + " --plan " + plan +
                       " --sweep adam-moments=fp32,bf16 --sweep zero=0,1 --out " + dir + "/out");
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, std::vector<std::string>> by_point;
  for (const auto& f : csv_rows(read_file(dir + "/out/points.csv")))
    by_point[f[1] + "," + f[2]] = f;
  ASSERT_EQ(by_point.size(), 4u);
  EXPECT_EQ(by_point["fp32,1"][3], "ok");
  EXPECT_EQ(by_point["bf16,1"][3], "ok");
  EXPECT_EQ(by_point["fp32,0"][3], "ok");
  EXPECT_NE(by_point["bf16,0"][3].find("needs the distributed optimizer"), std::string::npos)
      << by_point["bf16,0"][3];
  const double fp32_peak = std::stod(by_point["fp32,1"][7]);
  const double bf16_peak = std::stod(by_point["bf16,1"][7]);
  const ModelSpec m =
      io::load_model(std::string(MOEPLAN_SOURCE_DIR) + "/models/deepseekmoe-16b.json");
  EXPECT_NEAR(fp32_peak - bf16_peak, 6.0 * count_params(m).total() / 8 / 1e9, 0.5);
  std::filesystem::remove_all(dir);
}

}  // namespace moe
