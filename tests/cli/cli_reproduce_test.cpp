// `reproduce` run as a user would: the papers' numbers beside ours.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli_run.h"

namespace moe {

TEST(Cli, ReproduceWritesThePapersNumbersBesideOurs) {
  const std::string dir = temp_path("moeplan_reproduce");
  std::filesystem::remove_all(dir);
  const Result r = run("reproduce all --out " + dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("do not follow from its Table 8"), std::string::npos) << r.out;
  // Each paper's rows by quantity: (paper, ours).
  std::map<std::string, std::map<std::string, std::pair<double, double>>> rows;
  for (const char* paper : {"monta", "memfine", "megascale", "aptmoe"}) {
    std::istringstream csv(read_file(dir + "/" + paper + ".csv"));
    std::string line;
    std::getline(csv, line);
    while (std::getline(csv, line)) {
      std::vector<std::string> f;  // RFC 4180: quoted fields, "" inside them
      bool quoted = false;
      f.emplace_back();
      for (size_t i = 0; i < line.size(); ++i) {
        const char ch = line[i];
        if (ch == '"' && quoted && i + 1 < line.size() && line[i + 1] == '"')
          f.back() += line[++i];
        else if (ch == '"')
          quoted = !quoted;
        else if (ch == ',' && !quoted)
          f.emplace_back();
        else
          f.back() += ch;
      }
      ASSERT_GE(f.size(), 6u) << line;
      rows[paper][f[0] + " " + f[1]] = {std::stod(f[2]), std::stod(f[3])};
    }
    EXPECT_NE(read_file(dir + "/" + paper + ".html").find("<table>"), std::string::npos);
  }
  auto ours = [&](const std::string& paper, const std::string& key) {
    EXPECT_TRUE(rows[paper].count(key)) << paper << ": " << key;
    return rows[paper][key].second;
  };
  auto within = [&](const std::string& paper, const std::string& key, double tolerance) {
    const auto [expected, got] = rows[paper][key];
    EXPECT_TRUE(rows[paper].count(key)) << paper << ": " << key;
    EXPECT_LT(std::abs(got / expected - 1.0), tolerance) << paper << ": " << key << " " << got;
  };
  // Cost-model rows match to the papers' printed digits (MegaScale's R to 0.01, APTMoE's sizes
  // to 0.1 B), except where the paper contradicts itself (MoNTA eq. 14-16, APTMoE's MoE-L-8)
  // or rounds (MemFine's 3.7 GB).
  const std::map<std::string, double> closed_form = {
      {"Table 8", 1e-3},   {"eq. (1)-", 3e-3}, {"eq. (13)", 1e-3}, {"eq. (2)", 1e-3},
      {"eq. (3", 3e-3},    {"eq. (8)", 3e-3},  {"eq. (9)", 3e-3},  {"App. A.2", 1e-3},
      {"Table I", 1.5e-2}, {"Sec. 5", 1e-12},  {"Sec. 7", 1e-12},  {"Fig. 12 expansion", 1e-12}};
  int checked = 0;
  for (const auto& [paper, by_key] : rows) {
    for (const auto& [key, values] : by_key) {
      if (key.find("MoE-L-8") != std::string::npos || std::isnan(values.first)) continue;
      for (const auto& [source, tolerance] : closed_form) {
        if (key.rfind(source, 0) != 0) continue;
        within(paper, key, tolerance);
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 34);
  within("memfine", "Table 4 Model I activation, method 3 (c = 2)", 1e-3);
  // Table 4's MACT rows (11.9 GB, two chunks, on both models) bound alpha to [0.858, 0.975):
  // at the 0.9 we take, eq. (8)-(9) give c = 2 on both (at alpha = 1, Model II keeps one).
  within("memfine", "Table 4 Model II activation, method 3 (MACT)", 1e-3);
  within("memfine", "Table 4 Model I MACT chunk count", 1e-12);
  EXPECT_NEAR(ours("memfine", "eq. (3) largest alpha at which MACT chunks Model II (c = 2)"), 0.975,
              1e-3);
  EXPECT_NEAR(ours("memfine", "eq. (3) smallest alpha at which Model I fits at c = 2"), 0.858,
              1e-3);
  // Eq. (8) on Table 4's A100 and H20: R scales with bandwidth over peak (x1.5 x 989/312 and
  // x2.25 x 989/148 of H800's 9.94).
  EXPECT_NEAR(ours("megascale", "eq. (8) R, Mixtral h_ffn, A100, NVLink 600 GB/s"), 47.26, 0.01);
  EXPECT_NEAR(ours("megascale", "eq. (8) R, Mixtral h_ffn, H20, NVLink 900 GB/s"), 149.45, 0.01);
  // MegaScale-MoE Sec. 5: FP8 halves the TP reduce-scatter's bytes (no paper figure).
  EXPECT_DOUBLE_EQ(ours("megascale", "Sec. 5 TP reduce-scatter bytes, FP8 all-to-all over BF16"),
                   0.5);
  // MegaScale-MoE Fig. 14: SP attention's parameter sync costs a few % over TP's (paper
  // 0.3-3.1 %); ours adds the in-node steps the paper pipelines, 1.1-4.9 %.
  EXPECT_GT(ours("megascale", "Fig. 14 smallest parameter sync time, SP over TP attention"), 0.0);
  EXPECT_LT(ours("megascale", "Fig. 14 largest parameter sync time, SP over TP attention"), 0.05);
  // MoNTA Fig. 12: horizontal for cp < ep when cp x ep fits the switch, else vertical.
  EXPECT_EQ(ours("monta", "Fig. 12 expansion at cp = 4, ep = 16, switch radix 64"), 1.0);
  EXPECT_EQ(ours("monta", "Fig. 12 expansion at cp = 8, ep = 16, switch radix 64"), 2.0);
  // MoNTA Fig. 14: O1 at 8K, a pipelined strategy (O2 or O3) at 64K and 256K.
  EXPECT_EQ(ours("monta", "Fig. 14 strategy chosen at 8K tokens"), 1.0);
  EXPECT_GE(ours("monta", "Fig. 14 strategy chosen at 64K tokens"), 2.0);
  EXPECT_GE(ours("monta", "Fig. 14 strategy chosen at 256K tokens"), 2.0);
  // MoNTA Fig. 11: priorities cut the EP all-to-all's wait behind ZeRO-3 traffic (to 5 %).
  EXPECT_LT(
      ours("monta", "Fig. 11 EP all-to-all wait with priorities over fair sharing (ZeRO-3 DP)"),
      0.5);
  // APTMoE Sec. III-B: a predictor that misses costs throughput, more the more it misses.
  const double p85 = ours("aptmoe",
                          "Sec. III-B APTMoE throughput at predictor accuracy 0.85 over an oracle, "
                          "MoE-S-16, C1+G2");
  const double p64 = ours("aptmoe",
                          "Sec. III-B APTMoE throughput at predictor accuracy 0.64 over an oracle, "
                          "MoE-S-16, C1+G2");
  EXPECT_LT(p85, 1.0);
  EXPECT_LT(p64, p85);
  // MemFine Table 4 and Fig. 4 (directions): method 1 runs out of memory on Model I, MACT fits
  // and beats c = 8; on Model II c = 8 loses to no chunks and MACT does not.
  EXPECT_EQ(ours("memfine", "Table 4 Model I method 1 (no chunks) runs out of memory"), 1.0);
  EXPECT_EQ(ours("memfine", "Table 4 Model I method 3 (MACT) fits"), 1.0);
  EXPECT_GT(ours("memfine", "Fig. 4 Model I TGS, method 3 (MACT) over method 2 (c = 8)"), 1.0);
  // Fig. 5: MACT picks c = 2 at the skewed start (Table 4) and fewer chunks once routing settles.
  EXPECT_EQ(ours("memfine", "Fig. 5 Model I largest MACT chunk count, first iteration"), 2.0);
  EXPECT_LT(ours("memfine", "Fig. 5 Model I largest MACT chunk count, last simulated iteration"),
            2.0);
  // Model II's two figures set the FCDA round overhead and the stall of an allocation past
  // alpha (calibrate/data/memfine-fcda-round.json): within 0.5 % of the paper's -5.40 % and
  // +4.42 % when the file is applied. Method 1 runs past the budget on the skewed layers, MACT
  // and c = 8 stay inside. Model I's MACT over c = 8 is then a prediction: 1.128 against the
  // paper's 1.1826, the gain at least 10 %.
  within("memfine", "Fig. 4 Model II TGS, method 2 over method 1", 0.005);
  within("memfine", "Fig. 4 Model II TGS, method 3 over method 1", 0.005);
  EXPECT_GT(ours("memfine", "Fig. 4 Model I TGS, method 3 (MACT) over method 2 (c = 8)"), 1.10);
  // Fig. 4 over iterations: every method speeds up as routing settles, and c = 8 stays behind
  // MACT at the end of the run.
  for (const char* model : {"Model I", "Model II"}) {
    for (const char* method : {"method 1 (no chunks)", "method 2 (c = 8)", "method 3 (MACT)"}) {
      const std::string name = fmt::format("Fig. 4 {} TGS, {}", model, method);
      EXPECT_GT(ours("memfine", name + ", iteration 20"),
                1.5 * ours("memfine", name + ", first iteration"))
          << name;
    }
    EXPECT_LT(ours("memfine", fmt::format("Fig. 4 {} TGS, method 2 (c = 8), iteration 20", model)),
              ours("memfine", fmt::format("Fig. 4 {} TGS, method 3 (MACT), iteration 20", model)));
  }
  // MegaScale-MoE Table 3: the speedup within 15 % at every scale (the tolerance; -12 %
  // at 240 GPUs, where the H800s' power limit slows MegaScale-MoE's busier GPUs most, -8 % at
  // 1,440, within 4 % elsewhere, with Megatron-LM's gradients reduced in FP32); Fig. 11:
  // Megatron-LM within 3 points of its -2.74 % per GPU, MegaScale-MoE near linear, the speedups
  // within 8 % (-3.4 %, -5.7 %); Fig. 13: SP+EP ahead for every model.
  for (int gpus : {240, 480, 720, 960, 1440})
    within("megascale", fmt::format("Table 3 speedup over Megatron-LM on {} H800", gpus), 0.15);
  // Table 3 anchored on Megatron-LM's measured 39.04 s at 240 GPUs (720 x 8,192 tokens at
  // 151.1k tokens/s): the anchor itself within 0.1 %, all ten points within the 20 %
  // (the other nine are predictions).
  within("megascale", "Table 3 anchored: Megatron-LM tokens/s on 240 H800", 0.001);
  for (int gpus : {240, 480, 720, 960, 1440}) {
    for (const char* system : {"Megatron-LM", "MegaScale-MoE"}) {
      within("megascale", fmt::format("Table 3 anchored: {} tokens/s on {} H800", system, gpus),
             0.20);
    }
  }
  // The same ten simulated (issue 4: tokens/s within 20 %, the speedup within 15 %).
  for (int gpus : {240, 480, 720, 960, 1440}) {
    for (const char* system : {"Megatron-LM", "MegaScale-MoE"}) {
      within("megascale",
             fmt::format("Table 3 simulated, anchored: {} tokens/s on {} H800", system, gpus),
             0.20);
    }
    within("megascale",
           fmt::format("Table 3 simulated, anchored: speedup over Megatron-LM on {} H800", gpus),
           0.15);
  }
  // Sec. 6.1: the paper's MFU counts Megatron-LM's FLOPs with the gated MLP at four matrices
  // (282 GFLOP per token for the 352B model, from both of its MFU figures); ours 219.
  within("megascale", "Sec. 6.1 GFLOP per token behind the paper's MFU, 240 H800", 0.002);
  within("megascale", "Sec. 6.1 GFLOP per token behind the paper's MFU, 1,440 H800", 0.002);
  EXPECT_NEAR(ours("megascale", "Sec. 6.1 GFLOP per token moeplan's MFU counts"), 219.1, 0.5);
  within("megascale", "Fig. 11 Megatron-LM tokens/s per GPU, 1,440 vs 480 GPUs", 0.03);
  within("megascale", "Fig. 11 MegaScale-MoE tokens/s per GPU, 1,440 vs 480 GPUs", 0.03);
  within("megascale", "Fig. 11 smallest speedup over Megatron-LM (480-1,440 GPUs)", 0.08);
  within("megascale", "Fig. 11 largest speedup over Megatron-LM (480-1,440 GPUs)", 0.08);
  EXPECT_GT(ours("megascale", "Fig. 13 smallest MFU gain of SP+EP over TP+TP"), 0.0);
  // The reading we do not take (README, paper decisions): as MFU points the gains are inside the
  // issue's 10-35 % band (14.3-20.7 points), at our MFU level.
  EXPECT_GE(ours("megascale", "Fig. 13 smallest MFU gain of SP+EP over TP+TP, read as MFU points"),
            0.10);
  EXPECT_LE(ours("megascale", "Fig. 13 largest MFU gain of SP+EP over TP+TP, read as MFU points"),
            0.35);
  EXPECT_EQ(
      ours("megascale", "Fig. 13 SP+EP has the highest MFU of the four strategies for all six"),
      1.0);
  EXPECT_GT(ours("megascale", "Fig. 13 Mixtral-8x7B: SP+EP MFU over TP+TP"), 0.0);
  // Fig. 15 / Sec. 6.2: intra-operator overlap cuts a fused pair by at least the paper's 1.2x
  // (within 10 %; our largest, 1.59x, is below its 4.7x: a fused pair cannot beat the slower of
  // its two sides) and the iteration by 13.0-30.0 % (paper 7.1-12.9 %). Our decision (README,
  // paper decisions): a fused pair's backward computes twice and communicates once, as an
  // unfused pair's does, so where the all-to-alls outlast the projections (DeepSeekMoE-16B's
  // SP all-to-all 0.12 ms beside 0.03 ms of projections) fusion hides the compute in both
  // passes; priced as twice the whole fused forward (the all-to-alls twice in backward), the
  // cuts were 7.8-15.8 %. Ours must start inside the paper's range and stay under 35 %.
  within("megascale", "Fig. 15 smallest cut of a fused pair's communication + computation", 0.10);
  EXPECT_GT(ours("megascale", "Fig. 15 largest cut of a fused pair's communication + computation"),
            1.2);
  const double smallest_cut =
      ours("megascale", "Sec. 6.2 smallest iteration-time cut from intra-operator overlap");
  EXPECT_GE(smallest_cut, 0.071);
  EXPECT_LE(smallest_cut, 0.129 * 1.05);
  EXPECT_LT(ours("megascale", "Sec. 6.2 largest iteration-time cut from intra-operator overlap"),
            0.35);
  // Fig. 12: MFU falls as compute rises (memory-bound routing, scatter and gather); the
  // speedup over Megatron-LM within 15 % of the paper's 1.58x (ours 1.74x; 1.95x at full clock,
  // before the H800's power limit slowed MegaScale-MoE's busier GPUs more than Megatron-LM's).
  EXPECT_EQ(
      ours("megascale", "Fig. 12 MegaScale-MoE MFU falls as compute rises (H800 < A100 < H20)"),
      1.0);
  within("megascale", "Fig. 12 largest MFU speedup over Megatron-LM (H800, A100, H20)", 0.15);
  // APTMoE Fig. 14: strong scaling within 20 %.
  for (const char* model : {"MoE-S-64", "MoE-M-16"}) {
    for (int gpus : {8, 16}) {
      within("aptmoe", fmt::format("Fig. 14 {} APTMoE throughput, {} vs 4 GPUs", model, gpus),
             0.20);
    }
  }
  // Table I's memory column implies 4,096 tokens per batch of 128 (within 5 %): 32-token
  // sequences, where loading binds.
  EXPECT_NEAR(ours("aptmoe", "Table I tokens per batch its FP32 memory column implies (MoE-S/M)"),
              4096, 0.05 * 4096);
  // Fig. 11: a real gain over Mobius for every model (ours 9-30 %, the paper's 15-33 %), never
  // above the paper's largest, and growing with G.
  for (const char* model : {"MoE-S-8", "MoE-M-8", "MoE-S-16", "MoE-M-16"}) {
    const double best =
        ours("aptmoe",
             fmt::format("Fig. 11 largest APTMoE speedup over Mobius, {}, G = 0.2-0.5", model));
    EXPECT_GT(best, 1.05) << model;
    EXPECT_LT(best, 1.33) << model;
  }
  EXPECT_GT(ours("aptmoe", "Fig. 11 APTMoE over Mobius, MoE-S-16, C1+G2, G = 0.4"),
            ours("aptmoe", "Fig. 11 APTMoE over Mobius, MoE-S-16, C1+G2, G = 0.2") + 0.01);
  // Fig. 13: gains with 14 and 28 cores per process (paper 28.3 and 31 %). C1+G4 (paper -2 %)
  // is not behind Mobius here: our affinity prices the CPU as the simulator runs it.
  for (const char* topology : {"c1g2", "c1g1"}) {
    EXPECT_GT(
        ours("aptmoe", fmt::format("Fig. 13 APTMoE over Mobius, MoE-S-16, G = 0.3, {}", topology)),
        1.05)
        << topology;
  }
  EXPECT_GE(ours("aptmoe", "Fig. 13 APTMoE over Mobius, MoE-S-16, G = 0.3, c1g4"), 1.0);
  // With an x16 uplink per GPU only the cores per process differ, and the gain grows with them
  // as the paper's does (ours 1.029 < 1.069 < 1.114).
  auto own_uplink = [&](const char* topology) {
    return ours(
        "aptmoe",
        fmt::format("Fig. 13 APTMoE over Mobius, MoE-S-16, G = 0.3, {}, an x16 uplink per GPU",
                    topology));
  };
  EXPECT_LT(own_uplink("c1g4") + 0.01, own_uplink("c1g2"));
  EXPECT_LT(own_uplink("c1g2") + 0.01, own_uplink("c1g1"));
  // MoE-M-8 (paper -9 %, +15.9 %, +25.8 %): the same order with an uplink per GPU, smaller
  // still (ours 1.005 < 1.012 < 1.023): its experts are four times MoE-S's, so eq. (1) leaves
  // the CPU fewer of them.
  auto m8 = [&](const char* topology, const char* wiring) {
    return ours("aptmoe", fmt::format("Fig. 13 APTMoE over Mobius, MoE-M-8, G = 0.6, {}{}",
                                      topology, wiring));
  };
  EXPECT_LT(m8("c1g4", ", an x16 uplink per GPU"), m8("c1g2", ", an x16 uplink per GPU"));
  EXPECT_LT(m8("c1g2", ", an x16 uplink per GPU"), m8("c1g1", ", an x16 uplink per GPU"));
  EXPECT_GE(m8("c1g4", ""), 1.0);
  expect_one_line_error(run("reproduce nature --out " + dir), "nature");
  std::filesystem::remove_all(dir);
}

}  // namespace moe

namespace moe {

TEST(Cli, ReproduceChecksItsInputsAndOutputFirst) {
  // Run outside the tree, reproduce named a calibration file it could not open; now the root.
  const std::string dir = temp_path("moeplan_reproduce_checks");
  std::filesystem::create_directories(dir);
  expect_one_line_error(run("reproduce monta --out " + dir + " --root " + dir),
                        "--root: '" + dir + "' has no models/");
  expect_one_line_error(run("reproduce monta --out /proc/moeplan-nope"),
                        "--out: cannot create directory '/proc/moeplan-nope'");
  expect_one_line_error(run("reproduce everything --out " + dir),
                        "PAPER: 'everything' is not one of monta");
  std::filesystem::remove_all(dir);
}

}  // namespace moe
