// moeplan affinity: APTMoE's GPU/CPU split of one MoE layer's experts, eq. (1) with R = 1.
#include <fmt/format.h>

#include <algorithm>

#include "calibrate/affinity_run.h"
#include "calibrate/gpu_bench.h"
#include "planner/aptmoe.h"
#include "planner/cluster_graph.h"
#include "planner/default_efficiency.h"
#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/model_stats.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct AffinityOptions {
  std::string model, cluster, popularity, calibration, pass = "forward", dtype = "fp32", skew;
  std::optional<double> g;
  int64_t layer = 0;
  double tokens = 65536;
  int gpu = 0;
  bool json = false, table = false;
  // --execute: run the split on this machine's GPU and CPU beside loading every expert.
  bool execute = false;
  int repeats = 5, device = 0, threads = 0;
};

// The allocation run for real: forward, BF16 on the GPU.
nlohmann::json execute_split(const AffinityOptions& o, const ModelSpec& m,
                             const aptmoe::Allocation& a) {
  if (o.pass != "forward") throw InputError("--pass", "", "--execute runs the forward pass only");
  if (o.dtype != "bf16")
    throw InputError("--dtype", "", "--execute runs the GPU experts in BF16: give --dtype bf16");
  return execute_affinity(calibrate::affinity_case(m, a), o.device, o.threads, o.repeats);
}

// APTMoE's static profiler (Sec. III-A): one expert's CPU and GPU time for every token count it
// can receive (1 to tokens x top-k, in doubling steps here), beside the load times of an MHA
// block, a gate and an expert; the lookup table its runtime allocates from.
void print_profile_table(const ModelSpec& m, const LayerParams& lp, double bytes,
                         const aptmoe::Rates& rates, aptmoe::Pass pass, double max_tokens,
                         const aptmoe::Fixed& fixed, bool json) {
  std::vector<aptmoe::ExpertCost> rows;
  for (double n = 1;; n = std::min(2 * n, max_tokens)) {
    rows.push_back(aptmoe::expert_cost(0, n, lp.one_routed_expert, bytes, rates, pass));
    if (n >= max_tokens) break;
  }
  const Seconds expert_load = rows.front().load;  // the same at every token count
  if (json) {
    nlohmann::json table = nlohmann::json::array();
    for (const aptmoe::ExpertCost& e : rows)
      table.push_back({{"tokens", e.tokens}, {"cpu_s", e.cpu.value()}, {"gpu_s", e.gpu.value()}});
    print_json({{"model", m.name},
                {"load_s",
                 {{"mha", fixed.load_mha.value()},
                  {"gate", fixed.load_gate.value()},
                  {"expert", expert_load.value()}}},
                {"expert_time", table}});
    return;
  }
  fmt::print("{}: load times: MHA block {}, gate {}, one expert {}\n\n", m.name,
             as_ms(fixed.load_mha.value()), as_ms(fixed.load_gate.value()),
             as_ms(expert_load.value()));
  Table t({"tokens", "CPU time", "GPU time", "faster on"});
  for (const aptmoe::ExpertCost& e : rows) {
    t.add({fmt::format("{:.0f}", e.tokens), as_ms(e.cpu.value()), as_ms(e.gpu.value()),
           e.cpu < e.gpu + expert_load ? "CPU" : "GPU (with its load)"});
  }
  fmt::print("{}", t.render());
}

// The per-layer expert shares eq. (1) splits by: a popularity file (--popularity, or --skew FILE)
// or one row for every layer (--G x, or --skew balanced | G=x, which parse_skew reads as plan
// does). capacity=F and worst give only the busiest rank's load, not each expert's share.
// Empty when none is given.
std::vector<std::vector<double>> popularity_rows(const AffinityOptions& o, const ModelSpec& m) {
  if (!o.skew.empty() && (o.g || !o.popularity.empty()))
    throw InputError("--skew", "", "give --skew or --G / --popularity, not both");
  const bool skew_file = o.skew.find(".json") != std::string::npos;  // as skew_for tells
  const std::string file = skew_file ? o.skew : o.popularity;
  if (!file.empty()) {
    std::vector<std::vector<double>> pop = io::load_popularity(file);
    if (o.layer < 0 || o.layer >= static_cast<int64_t>(pop.size())) {
      throw InputError("--layer", "",
                       fmt::format("layer {} is not in {} ({} layers)", o.layer, file, pop.size()));
    }
    if (static_cast<int64_t>(pop[o.layer].size()) != m.num_routed_experts) {
      throw InputError(
          file, fmt::format("/layers/{}", o.layer),
          fmt::format("has {} experts, model has {}", pop[o.layer].size(), m.num_routed_experts));
    }
    return pop;
  }
  if (!o.skew.empty()) {
    const RoutingSkew skew = parse_skew(o.skew, m);
    if (skew.kind == RoutingSkew::Kind::kBalanced)
      return {std::vector<double>(static_cast<size_t>(m.num_routed_experts),
                                  1.0 / static_cast<double>(m.num_routed_experts))};
    if (skew.kind == RoutingSkew::Kind::kPopularity) return skew.proportions;
    throw InputError("--skew", "",
                     fmt::format("'{}': affinity needs each expert's share: balanced, G=x or a "
                                 "popularity file",
                                 o.skew));
  }
  if (!o.g) return {};
  try {
    return {aptmoe::proportions_for_g(m.num_routed_experts, *o.g)};
  } catch (const ConfigError& e) {
    throw InputError("--G", "", e.what());
  }
}

void run_affinity(const AffinityOptions& o) {
  const ModelSpec m = io::load_model(o.model);
  const ClusterSpec c = io::load_cluster(o.cluster);
  if (!m.is_moe()) throw InputError(o.model, "", "affinity needs a model with routed experts");
  if (o.gpu < 0 || o.gpu >= c.num_gpus()) {
    throw InputError("--gpu", "",
                     fmt::format("GPU {} does not exist (cluster has {})", o.gpu, c.num_gpus()));
  }
  const std::vector<std::vector<double>> rows = popularity_rows(o, m);
  if (rows.empty() && !o.table)  // the profiler's table needs no popularity
    throw InputError("--popularity", "",
                     "give --skew G=x (or balanced, or FILE), --G x or --popularity FILE");
  const std::vector<double> proportions =
      rows.empty() ? std::vector<double>{}
                   : rows[rows.size() == 1 ? 0 : static_cast<size_t>(o.layer)];
  const double g_metric = rows.empty() ? 0.0 : aptmoe::popularity_metric(rows);
  const aptmoe::Pass pass = o.pass == "backward" ? aptmoe::Pass::kBackward : aptmoe::Pass::kForward;
  if (o.pass != "forward" && o.pass != "backward") {
    throw InputError("--pass", "", fmt::format("'{}' is not one of forward, backward", o.pass));
  }
  const Dtype dtype = parse_dtype(o.dtype, "--dtype");
  const double bytes = dtype_bytes(dtype);

  // Rates: the GPU's peak for the dtype; the CPU socket shared by the GPUs under it; PCIe as
  // the narrowest link between the GPU and its host memory.
  const ClusterGraph graph(c);
  const int local = o.gpu % c.node.num_gpus;
  const int socket = c.node.cpu_of_gpu(local);
  int sharing = 0;
  for (int gidx = 0; gidx < c.node.num_gpus; ++gidx) sharing += c.node.cpu_of_gpu(gidx) == socket;
  aptmoe::Rates rates;
  rates.gpu = c.node.gpu.peak_for(dtype == Dtype::kFp32 ? Dtype::kFp32 : dtype);
  rates.cpu = c.node.cpus[socket].achievable_flops / static_cast<double>(sharing);
  rates.cpu_memory = c.node.cpus[socket].memory_bandwidth / static_cast<double>(sharing);
  rates.pcie = ClusterGraph::bottleneck(graph.host_path(o.gpu));

  // Profiler tables (APTMoE Sec. III-A) from a calibration file, when given.
  std::optional<io::Calibration> cal;
  if (!o.calibration.empty()) cal = io::load_calibration(o.calibration);
  auto curve = [&](const char* name) -> const EfficiencyCurve* {
    if (!cal) return nullptr;
    auto it = cal->curves.find(name);
    return it == cal->curves.end() ? nullptr : &it->second;
  };
  rates.cpu_efficiency = curve("cpu_expert_ffn");
  // A measured CPU curve is relative to the best rate `calibrate` saw over every hardware
  // thread of the node, which all its GPUs share; that rate replaces the cluster file's figure.
  std::string cpu_source = fmt::format("{} GPU(s) per socket", sharing);
  if (cal && cal->reference_flops.count("cpu_expert_ffn")) {
    const FlopsPerSec measured = cal->reference_flops.at("cpu_expert_ffn");
    rates.cpu = measured / static_cast<double>(c.node.num_gpus);
    cpu_source = fmt::format("calibrated {:.0f} GFLOP/s over {} GPU(s)", measured.value() / 1e9,
                             c.node.num_gpus);
  }
  const std::optional<std::string> gemm = calibrate::gemm_curve_for(dtype);
  rates.gpu_efficiency = gemm ? curve(gemm->c_str()) : nullptr;
  // Without a measured copy curve, the default one the offload plans price loads with.
  static const EfficiencyCurve kDefaultCopy = defaults::pcie_h2d();
  const EfficiencyCurve* measured_copy = curve("pcie_h2d");
  rates.pcie_efficiency = measured_copy ? measured_copy : &kDefaultCopy;

  const LayerParams lp = layer_params(m, true);
  aptmoe::Fixed fixed{rates.load_time(Bytes(lp.attention * bytes)),
                      rates.load_time(Bytes(lp.router * bytes))};
  if (o.table) {
    print_profile_table(m, lp, bytes, rates, pass, o.tokens * static_cast<double>(m.top_k), fixed,
                        o.json);
    return;
  }
  std::vector<aptmoe::ExpertCost> experts;
  for (size_t e = 0; e < proportions.size(); ++e) {
    experts.push_back(aptmoe::expert_cost(static_cast<int>(e),
                                          proportions[e] * o.tokens * static_cast<double>(m.top_k),
                                          lp.one_routed_expert, bytes, rates, pass));
  }
  const aptmoe::Allocation a = aptmoe::allocate(experts, fixed);
  const nlohmann::json execution = o.execute ? execute_split(o, m, a) : nlohmann::json();

  if (o.json) {
    nlohmann::json ex = nlohmann::json::array();
    for (size_t i = 0; i < a.experts.size(); ++i) {
      const auto& e = a.experts[i];
      ex.push_back({{"expert", e.expert},
                    {"tokens", e.tokens},
                    {"device", a.on_gpu[i] ? "gpu" : "cpu"},
                    {"cpu_s", e.cpu.value()},
                    {"gpu_s", e.gpu.value()},
                    {"load_s", e.load.value()}});
    }
    print_json({{"model", m.name},
                {"pass", o.pass},
                {"G", g_metric},
                {"experts", ex},
                {"r_trace", a.r_trace},
                {"final_r", a.final_r},
                {"cpu_time_s", a.cpu_time.value()},
                {"load_time_s", a.load_time.value()},
                {"rates",
                 {{"cpu_flops", rates.cpu.value()},
                  {"gpu_flops", rates.gpu.value()},
                  {"pcie_Bps", rates.pcie.value()}}},
                {"execution", execution}});
    return;
  }
  const Bytes expert_bytes(lp.one_routed_expert * bytes);
  fmt::print(
      "{}: {} pass, G = {:.4f}, {:.0f} tokens x top-{}, GPU {} ({:.1f} TFLOP/s), CPU share {:.0f} "
      "GFLOP/s ({}), PCIe {} ({} for one expert's {:.1f} MB, pinned copies at pcie_h2d)\n\n",
      m.name, o.pass, g_metric, o.tokens, m.top_k, o.gpu, rates.gpu.value() / 1e12,
      rates.cpu.value() / 1e9, cpu_source, as_gbps(rates.pcie.value()),
      as_gbps(expert_bytes.value() / rates.load_time(expert_bytes).value()),
      expert_bytes.value() / 1e6);
  Table t({"rank", "expert", "tokens", "CPU time", "GPU time", "load time", "runs on", "R after"});
  for (size_t i = 0; i < a.experts.size(); ++i) {
    const auto& e = a.experts[i];
    const std::string r_after =
        i + 1 < a.r_trace.size() ? fmt::format("{:.3f}", a.r_trace[i + 1]) : "";
    t.add({std::to_string(i), std::to_string(e.expert), fmt::format("{:.0f}", e.tokens),
           as_ms(e.cpu.value()), as_ms(e.gpu.value()), as_ms(e.load.value()),
           a.on_gpu[i] ? "GPU" : "CPU", r_after});
  }
  fmt::print("{}\n", t.render());
  fmt::print("R before loading {:.3f}; final R {:.3f} (loading stops at R <= 1, APTMoE eq. 1)\n",
             a.r_trace.front(), a.final_r);
  fmt::print("CPU work left {} vs loading {} (MHA {} + gate {} + experts)\n",
             as_ms(a.cpu_time.value()), as_ms(a.load_time.value()), as_ms(fixed.load_mha.value()),
             as_ms(fixed.load_gate.value()));
  if (!o.execute) return;
  fmt::print("\n");
  print_affinity_execution(execution, o.device);
}

}  // namespace

void add_affinity(CommandLine& cli) {
  auto o = std::make_shared<AffinityOptions>();
  Subcommand cmd = cli.subcommand(
      "affinity", "APTMoE CPU/GPU allocation of one MoE layer's experts (eq. 1, R = 1)");
  cmd.option("--model", o->model, "model file").required();
  cmd.option("--cluster", o->cluster, "cluster file").required();
  cmd.option("--popularity", o->popularity,
             "per-layer, per-expert token counts (moeplan-popularity/1)");
  cmd.option("--G", o->g, "target popularity metric G (eq. 2); builds a Zipf-shaped popularity");
  cmd.option("--skew", o->skew,
             "routing skew as plan takes it: balanced | G=x | a popularity file (.json)");
  cmd.option("--layer", o->layer, "layer of the popularity file");
  cmd.option("--tokens", o->tokens, "tokens entering the layer over the micro-batches considered")
      .positive();
  cmd.option(
      "--calibration", o->calibration,
      "calibration file: cpu_expert_ffn, the dtype's GEMM (gemm for bf16) and pcie_h2d curves");
  cmd.option("--pass", o->pass, "forward (predicted popularity) or backward (actual, 2x compute)");
  cmd.option("--dtype", o->dtype, "weights and compute precision (APTMoE fine-tunes in fp32)");
  cmd.option("--gpu", o->gpu, "global GPU index whose PCIe path and CPU socket are used");
  cmd.flag("--json", o->json, "print one JSON document (seconds)");
  cmd.flag("--table", o->table,
           "print the profiler's table instead: one expert's CPU and GPU time per token "
           "count, and the load times of an MHA block, a gate and an expert");
  cmd.flag("--execute", o->execute,
           "run the split on this GPU and CPU (forward, --dtype bf16) beside loading every "
           "expert, predicted vs measured");
  cmd.option("--repeats", o->repeats, "with --execute: timed runs, median kept (default 5)");
  cmd.option("--device", o->device, "with --execute: CUDA device index (default 0)");
  cmd.option("--threads", o->threads,
             "with --execute: CPU expert threads (default: hardware threads - 1)");
  cmd.on_run([o] { run_affinity(*o); });
}

}  // namespace moe::cli
