// APTMoE's experiments through the offload planner and simulator: Fig. 11, 13, 14, Sec. III-B,
// IV-D3.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "planner/aptmoe.h"
#include "planner/io/loaders.h"
#include "planner/offload.h"
#include "planner/search.h"
#include "simulator/offload_sim.h"
#include "tools/moeplan/reproduce_rows.h"

namespace moe::cli {

std::vector<Row> aptmoe_end_to_end(const std::string& root) {
  // Sec. IV: FP32, batch 128 with as many micro-batches as GPUs; stages as the planner's best
  // offload plan. The paper does not state its sequence length, but Table I's memory column
  // does: each model's FP32 figure is 16 bytes per parameter plus every expert's FFN activation
  // (h wide, FP32) for about 4,096 tokens, so batch 128 holds 32-token sequences (the row
  // below). 512 tokens would put 550 GB of such activations on MoE-S-8 alone, against its 111.
  constexpr int64_t kSeqLen = 32;
  std::vector<Row> rows;
  {
    // Table I: (memory - 16 P) / (4 bytes x E h L), the tokens each model's column implies.
    struct Entry {
      const char* file;
      double paper_gb;
    };
    double sum = 0;
    int n = 0;
    for (const Entry& e : {Entry{"aptmoe-moe-s-8.json", 111}, Entry{"aptmoe-moe-s-16.json", 213},
                           Entry{"aptmoe-moe-s-64.json", 821}, Entry{"aptmoe-moe-m-8.json", 366},
                           Entry{"aptmoe-moe-m-16.json", 707}}) {
      const ModelSpec m = io::load_model(root + "/models/" + e.file);
      const double per_token = 4.0 * static_cast<double>(m.num_routed_experts) *
                               static_cast<double>(m.expert_ffn_size) *
                               static_cast<double>(m.num_layers);
      sum += (e.paper_gb * 1e9 - 16.0 * count_params(m).total()) / per_token;
      ++n;
    }
    rows.push_back({"Table I", "tokens per batch its FP32 memory column implies (MoE-S/M)", NAN,
                    sum / n, "tokens",
                    "mean of five models; batch 128 x 32 tokens = 4,096, so the runs below use "
                    "32-token sequences (the paper states none)"});
  }
  // One case: files read, the offload plan searched once, then each system simulated on it.
  // `own_uplink` rewires the node so that every GPU has a PCIe switch, and an x16 uplink, of its
  // own under the same socket.
  auto run = [&](const char* model_file, const char* topology, int64_t gpus, double g,
                 std::vector<OffloadSystem> systems, bool own_uplink = false) {
    const ModelSpec m = io::load_model(root + "/models/" + model_file);
    ClusterSpec c = io::load_cluster(root + "/topologies/" + topology);
    if (own_uplink) {
      std::vector<PcieSwitch> one_each;
      for (const PcieSwitch& s : c.node.pcie_switches)
        for (int gpu : s.gpus) one_each.push_back({s.cpu, {gpu}});
      c.node.pcie_switches = one_each;
    }
    RoutingSkew skew;
    skew.kind = RoutingSkew::Kind::kPopularity;
    skew.proportions = {aptmoe::proportions_for_g(m.num_routed_experts, g)};
    const TimeContext ctx = make_time_context(m, c, paper_era_efficiencies(), skew, kSeqLen);
    SearchRequest req;
    req.num_gpus = gpus;
    req.global_batch = 128;
    req.precision = Precision::kFp32;
    req.fixed = parse_parallel(fmt::format("mbs={}", 128 / gpus));
    const std::vector<Plan> plans = offload_plans(ctx, c, req);
    std::vector<double> tokens_per_second;
    for (OffloadSystem system : systems) {
      tokens_per_second.push_back(
          plans.empty()
              ? std::nan("")
              : sim::simulate_offload(ctx, c, sim::offload_run(plans.front().choice, system))
                    .tokens_per_second);
    }
    return tokens_per_second;
  };
  auto gain = [&](const char* model, const char* topology, int64_t gpus, double g,
                  bool own_uplink = false) {
    const std::vector<double> t =
        run(model, topology, gpus, g, {OffloadSystem::kAptMoe, OffloadSystem::kMobius}, own_uplink);
    return t[0] / t[1];
  };
  auto aptmoe = [&](const char* model, const char* topology, int64_t gpus, double g) {
    return run(model, topology, gpus, g, {OffloadSystem::kAptMoe})[0];
  };
  const std::string regime =
      "32-token sequences: loading binds the forward pass, backward (twice the compute) hides "
      "it, and the CPU optimizer step (0.87 s of Mobius' 2.35 s) is common to both";
  rows.push_back({"Fig. 11", "APTMoE over Mobius, MoE-S-16, C1+G2, G = 0.4", 1.33,
                  gain("aptmoe-moe-s-16.json", "aptmoe-4x-a800-40gb-c1g2.json", 4, 0.4), "x",
                  regime});
  rows.push_back({"Fig. 11", "APTMoE over Mobius, MoE-S-16, C1+G2, G = 0.2", NAN,
                  gain("aptmoe-moe-s-16.json", "aptmoe-4x-a800-40gb-c1g2.json", 4, 0.2), "x",
                  "the paper: the gain grows with G"});
  // Fig. 11 (a), (b), (d), (e): the largest speedup over Mobius across G = 0.2 ... 0.5 per model,
  // and the Mixtral-like MoE-L-8 at G = 0.2 against Mobius and GPipeOffload (Sec. IV-D3).
  struct Sweep {
    const char* file;
    const char* name;
    double paper;
  };
  for (const Sweep& w : {Sweep{"aptmoe-moe-s-8.json", "MoE-S-8", 1.323},
                         Sweep{"aptmoe-moe-m-8.json", "MoE-M-8", 1.171},
                         Sweep{"aptmoe-moe-s-16.json", "MoE-S-16", 1.33},
                         Sweep{"aptmoe-moe-m-16.json", "MoE-M-16", 1.153}}) {
    double best = 0;
    for (double g : {0.2, 0.3, 0.4, 0.5})
      best = std::max(best, gain(w.file, "aptmoe-4x-a800-40gb-c1g2.json", 4, g));
    rows.push_back({"Fig. 11",
                    fmt::format("largest APTMoE speedup over Mobius, {}, G = 0.2-0.5", w.name),
                    w.paper, best, "x", ""});
  }
  {
    const std::vector<double> l8 =
        run("aptmoe-moe-l-8.json", "aptmoe-4x-a800-40gb-c1g2.json", 4, 0.2,
            {OffloadSystem::kAptMoe, OffloadSystem::kMobius, OffloadSystem::kGPipeOffload});
    rows.push_back({"Sec. IV-D3", "APTMoE over Mobius, MoE-L-8 (Mixtral-like), G = 0.2", 1.04,
                    l8[0] / l8[1], "x",
                    std::isnan(l8[0]) ? "no offload plan fits: its dimensions give 64.4 B "
                                        "parameters, 1.29 TB in FP32 with Adam, above the node's "
                                        "1,024 GB (the paper's own 1,126 GB is above it too)"
                                      : ""});
    rows.push_back(
        {"Sec. IV-D3", "APTMoE over GPipeOffload, MoE-L-8, G = 0.2", 1.20, l8[0] / l8[2], "x", ""});
  }
  // Sec. III-B: the popularity predictor's accuracy (0.85 one layer ahead with 8 experts, 0.64
  // four ahead with 128): MoE-S-16 on C1+G2 at batch 128, against an oracle. The paper reports
  // accuracies, not their cost.
  {
    const ModelSpec m = io::load_model(root + "/models/aptmoe-moe-s-16.json");
    const ClusterSpec c = io::load_cluster(root + "/topologies/aptmoe-4x-a800-40gb-c1g2.json");
    RoutingSkew skew;
    skew.kind = RoutingSkew::Kind::kPopularity;
    skew.proportions = {aptmoe::proportions_for_g(m.num_routed_experts, 0.3)};
    const TimeContext ctx = make_time_context(m, c, paper_era_efficiencies(), skew, kSeqLen);
    auto throughput = [&](double accuracy, double historical) {
      sim::OffloadRun r;
      r.gpus = 4;
      r.stages = 16;
      r.microbatch_size = 32;
      r.global_batch = 128;
      r.predictor_accuracy = accuracy;
      r.historical_accuracy = historical;
      return sim::simulate_offload(ctx, c, r).tokens_per_second;
    };
    const double oracle = throughput(1.0, 1.0);
    for (double accuracy : {0.85, 0.64}) {
      rows.push_back({"Sec. III-B",
                      fmt::format("APTMoE throughput at predictor accuracy {} over an oracle, "
                                  "MoE-S-16, C1+G2",
                                  accuracy),
                      NAN, throughput(accuracy, 1.0) / oracle, "x", ""});
    }
    // Historical popularity steering the inter-stage phase: 73.3 % of picks right (NLLB-MoE).
    rows.push_back({"Sec. III-B",
                    "APTMoE throughput with historical popularity 73.3 % right and predictor "
                    "0.85, over an oracle, MoE-S-16, C1+G2",
                    NAN, throughput(0.85, 0.733) / oracle, "x", ""});
  }
  // Fig. 13: our topology files share one x16 uplink among a socket's GPUs, so C1+G4 loads at a
  // quarter of C1+G1's rate per GPU and Mobius suffers most there; the paper instead finds
  // APTMoE 2 % behind, its 7 cores per process "insufficient". Our affinity (eq. 1) prices the
  // CPU exactly as the simulator runs it, so it does not lose to Mobius here.
  // MoE-M-8 (G = 0.6; paper -9 %, +15.9 %, +25.8 %) goes the same way: its larger experts
  // take the CPU longer, so eq. (1) leaves it fewer, and the shared uplink decides the order.
  struct Fig13 {
    const char* file;
    const char* name;
    double g;
    double paper[3];  // C1+G4, C1+G2, C1+G1
  };
  const char* kBindings[3] = {"c1g4", "c1g2", "c1g1"};
  for (const Fig13& f : {Fig13{"aptmoe-moe-s-16.json", "MoE-S-16", 0.3, {0.98, 1.283, 1.31}},
                         Fig13{"aptmoe-moe-m-8.json", "MoE-M-8", 0.6, {0.91, 1.159, 1.258}}}) {
    // Then the same with an x16 uplink per GPU (the paper does not say how its switches are
    // wired): loading no longer depends on the binding, only the cores per process do.
    for (bool own_uplink : {false, true}) {
      for (int b = 0; b < 3; ++b) {
        const std::string topology = kBindings[b];
        rows.push_back({"Fig. 13",
                        fmt::format("APTMoE over Mobius, {}, G = {}, {}{}", f.name, f.g, topology,
                                    own_uplink ? ", an x16 uplink per GPU" : ""),
                        f.paper[b],
                        gain(f.file, fmt::format("aptmoe-4x-a800-40gb-{}.json", topology).c_str(),
                             4, f.g, own_uplink),
                        "x",
                        !own_uplink && topology == "c1g4"
                            ? "4 GPUs share the socket's x16 uplink here, so Mobius loads slowest; "
                              "the paper's loss needs CPU contention its profiler missed"
                            : ""});
      }
    }
  }
  struct Scaling {
    const char* file;
    const char* name;
    double x8, x16;
  };
  for (const Scaling& s : {Scaling{"aptmoe-moe-s-64.json", "MoE-S-64", 1.65, 3.08},
                           Scaling{"aptmoe-moe-m-16.json", "MoE-M-16", 1.76, 3.36}}) {
    const char* topo = "aptmoe-4x-a800-40gb-c1g2.json";
    const double four = aptmoe(s.file, topo, 4, 0.3);
    rows.push_back({"Fig. 14", fmt::format("{} APTMoE throughput, 8 vs 4 GPUs", s.name), s.x8,
                    aptmoe(s.file, topo, 8, 0.3) / four, "x", ""});
    rows.push_back({"Fig. 14", fmt::format("{} APTMoE throughput, 16 vs 4 GPUs", s.name), s.x16,
                    aptmoe(s.file, topo, 16, 0.3) / four, "x", ""});
  }
  return rows;
}

}  // namespace moe::cli
