#include "tools/moeplan/common.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <thread>

#include "calibrate/nccl_bench.h"
#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/io/loaders.h"
#include "planner/io/megatron_args.h"
#include "planner/io/plan_io.h"
#include "planner/power_limit.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

Recompute parse_recompute(const std::string& value, const std::string& option,
                          const std::string& where) {
  const std::optional<Recompute> r = recompute_from_name(value);
  if (!r) {
    throw InputError(option, where,
                     fmt::format("'{}' is not one of none, selective, full, sar", value));
  }
  return *r;
}

void require_offloadable(Recompute r, const std::string& source, const std::string& where,
                         const std::string& whose) {
  if (!offload_allowed(r))
    throw InputError(source, where,
                     fmt::format("Megatron offloads activations under recompute none or "
                                 "selective; {} is {}",
                                 whose, recompute_name(r)));
}

void require_mxfp8_runs(const GpuSpec& gpu, Fp8Recipe recipe, const std::string& cluster,
                        const std::string& source, const std::string& where) {
  if (recipe != Fp8Recipe::kMxfp8 || gpu.runs_mxfp8()) return;
  throw InputError(source, where,
                   fmt::format("mxfp8 needs Blackwell GPUs (compute capability 10.0 or later); "
                               "{} in {} is {:.1f} (take tensorwise, delayed or blockwise)",
                               gpu.model, cluster, gpu.compute_capability));
}

uint32_t parse_offload_modules(const std::vector<std::string>& names, const ModelSpec& m,
                               const std::string& option) {
  std::string unknown;
  const std::optional<uint32_t> mods = offload_modules_from_names(names, &unknown);
  if (!mods)
    throw InputError(option, "",
                     fmt::format("'{}' is not one of {}", unknown,
                                 fmt::join(offload_module_names(kAllOffloadModules), ", ")));
  if (!m.is_moe() && (*mods & (kOffloadExpertFc1 | kOffloadMoeAct)))
    throw InputError(
        option, "",
        fmt::format("expert_fc1 and moe_act match no layer of {}: it has no MoE layers", m.name));
  return *mods;
}

uint32_t parse_recompute_modules(const std::vector<std::string>& names, const ModelSpec& m,
                                 const std::string& option) {
  std::string unknown;
  const std::optional<uint32_t> mods = recompute_modules_from_names(names, &unknown);
  if (unknown == "shared_experts")
    throw InputError(option, "",
                     "shared_experts is not modelled: MemFine eq. (2) holds no shared-expert "
                     "activations, so recomputing them would only cost time");
  if (!mods)
    throw InputError(option, "",
                     fmt::format("'{}' is not one of {}", unknown,
                                 fmt::join(recompute_module_names(kAllRecomputeModules), ", ")));
  auto refuse = [&](const char* name, const char* why) {
    throw InputError(option, "", fmt::format("{} matches no layer of {}: {}", name, m.name, why));
  };
  if ((*mods & kRecomputeMoe) && !m.is_moe()) refuse("moe", "it has no MoE layers");
  if ((*mods & kRecomputeMoeAct) && !m.is_moe()) refuse("moe_act", "it has no MoE layers");
  if ((*mods & kRecomputeMlp) && m.num_dense_layers() == 0)
    refuse("mlp", "every layer is MoE (recompute the experts with moe)");
  if ((*mods & kRecomputeMlaUpProj) &&
      (m.attention.kind != AttentionKind::kLatent || !m.linear_layer.empty()))
    refuse("mla_up_proj", "its attention is not multi-latent on every layer");
  return *mods;
}

Precision parse_precision(const std::string& value, const std::string& option,
                          const std::string& where) {
  return *named(option, value, precision_names(), false, where);
}

Fp8Recipe parse_fp8_recipe(const std::string& value, const std::string& option,
                           const std::string& where) {
  return *named(option, value, fp8_recipe_names(), false, where);
}

CudaGraph parse_cuda_graph(const std::string& value, const std::string& option,
                           const std::string& where) {
  return *named(option, value, cuda_graph_names(), false, where);
}

std::optional<AttentionMode> parse_attention(const std::string& value, const std::string& option,
                                             bool search, const std::string& where) {
  return named<AttentionMode>(
      option, value, {{"tp", AttentionMode::kTensor}, {"ulysses", AttentionMode::kUlysses}}, search,
      where);
}

std::optional<bool> parse_on_off(const std::string& value, const std::string& option, bool search,
                                 const std::string& where) {
  return named<bool>(option, value, {{"on", true}, {"off", false}}, search, where);
}

std::optional<bool> parse_grad_reduce(const std::string& value, const std::string& option,
                                      bool search, const std::string& where) {
  return named<bool>(option, value, {{"bf16", true}, {"fp32", false}}, search, where);
}

std::optional<megascale::Dispatcher> parse_dispatcher(const std::string& value,
                                                      const std::string& option, bool search,
                                                      const std::string& where) {
  return named<megascale::Dispatcher>(option, value,
                                      {{"alltoall", megascale::Dispatcher::kAllToAll},
                                       {"allgather", megascale::Dispatcher::kAllGather},
                                       {"deepep", megascale::Dispatcher::kDeepEp}},
                                      search, where);
}

AttentionKernel parse_attention_kernel(const std::string& value, const std::string& option,
                                       const std::string& where) {
  return *named(option, value, attention_kernel_names(), false, where);
}

CrossEntropy parse_cross_entropy(const std::string& value, const std::string& option,
                                 const std::string& where) {
  return *named(option, value, cross_entropy_names(), false, where);
}

ParallelConfig layout_for(const std::string& text, const ModelSpec& m, int64_t seq_len) {
  try {
    ParallelConfig p = resolve(parse_parallel(text));
    check(p, m);
    check_sequence(p, seq_len);
    return p;
  } catch (const ConfigError& e) {
    throw InputError("--parallel", "", e.what());
  }
}

void warn_world_size(const ParallelConfig& p, const ClusterSpec& c) {
  if (p.world() != c.num_gpus()) {
    fmt::print(stderr,
               "warning: layout {} spans {} GPUs; cluster {} has {} (per-GPU numbers still hold)\n",
               p.to_string(), p.world(), c.name, c.num_gpus());
  }
}

void warn_if_planned_for_another(const std::string& plan_file, const std::string& planned_model,
                                 const ModelSpec& m) {
  if (!planned_model.empty() && planned_model != m.name) {
    fmt::print(stderr, "warning: {} was planned for {}; pricing it for {}\n", plan_file,
               planned_model, m.name);
  }
}

void check_plan_layout(const PlanChoice& choice, const ModelSpec& m, const ClusterSpec& c,
                       const std::string& plan_file) {
  try {
    check(choice.parallel, m);
    check_sequence(choice.parallel, choice.seq_len);
  } catch (const ConfigError& e) {
    throw InputError(plan_file, "/parallel", e.what());
  }
  if (choice.parallel.world() > c.num_gpus()) {
    throw InputError(plan_file, "/parallel",
                     fmt::format("the plan needs {} GPUs; cluster {} has {}",
                                 choice.parallel.world(), c.name, c.num_gpus()));
  }
}

RoutingSkew skew_for(const std::string& text, const ModelSpec& m) {
  if (text.find(".json") == std::string::npos) return parse_skew(text, m);
  RoutingSkew skew;
  skew.kind = RoutingSkew::Kind::kPopularity;
  skew.proportions = io::load_popularity(text);
  for (size_t l = 0; l < skew.proportions.size(); ++l) {
    if (static_cast<int64_t>(skew.proportions[l].size()) != m.num_routed_experts) {
      throw InputError(text, fmt::format("/layers/{}", l),
                       fmt::format("has {} experts, model has {}", skew.proportions[l].size(),
                                   m.num_routed_experts));
    }
  }
  return skew;
}

CalibrationIn calibration_from(const std::string& calibration_file) {
  if (calibration_file.empty()) return {"", efficiencies(), ""};
  const io::Calibration cal = io::load_calibration(calibration_file);
  const nlohmann::json& p = cal.provenance;
  const bool named = p.is_object() && p.contains("gpu") && p["gpu"].is_object() &&
                     p["gpu"].contains("name") && p["gpu"]["name"].is_string();
  const bool sustained =
      p.is_object() && p.contains("gemm_sustain_s") && p["gemm_sustain_s"].is_number();
  return {calibration_file, efficiencies(cal.curves, cal.constants),
          named ? p["gpu"]["name"].get<std::string>() : std::string(),
          sustained ? p["gemm_sustain_s"].get<double>() : 0.0};
}

ClusterSpec capped(ClusterSpec c, std::optional<double> watts) {
  if (!watts) return c;
  try {
    cap_power_limit(c.node.gpu, *watts);
  } catch (const ConfigError& e) {
    throw InputError("--power-limit", "", e.what());
  }
  return c;
}

std::string gpu_chip(const std::string& name) {
  static const std::regex chip("[A-Z]{1,3}[0-9]{2,4}");
  std::smatch match;
  return std::regex_search(name, match, chip) ? match.str() : std::string();
}

void warn_about_calibration(const CalibrationIn& cal, const ClusterSpec& c) {
  if (cal.gemm_sustain_s > 0 && c.node.gpu.power.limit_w > 0) {
    fmt::print(stderr,
               "warning: {}'s GEMM curves were timed after {} s back to back, at the clock the "
               "power limit leaves; cluster {} slows its GPUs by their power limit too "
               "(node.gpu.power), so that clock counts twice: calibrate without --sustain\n",
               cal.file, cal.gemm_sustain_s, c.name);
  }
  const std::string chip = gpu_chip(cal.measured_on), cluster_chip = gpu_chip(c.node.gpu.model);
  if (chip.empty() || cluster_chip.empty() || chip == cluster_chip) return;
  fmt::print(stderr,
             "warning: {} was measured on {}; cluster {} has {} GPUs (efficiencies carry over "
             "between like GPUs only)\n",
             cal.file, cal.measured_on, c.name, c.node.gpu.model);
}

Dtype parse_dtype(const std::string& text, const std::string& option) {
  for (Dtype d : {Dtype::kFp32, Dtype::kTf32, Dtype::kBf16, Dtype::kFp16, Dtype::kFp8}) {
    if (text == dtype_name(d)) return d;
  }
  throw InputError(option, "", fmt::format("'{}' is not one of fp32, tf32, bf16, fp16, fp8", text));
}

nlohmann::json execute_affinity(const calibrate::AffinityCase& c, int device, int threads,
                                int repeats) {
  if (repeats < 1) throw InputError("--repeats", "", fmt::format("{} must be at least 1", repeats));
  if (threads <= 0)
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
  const calibrate::AffinityTimes p = calibrate::predict_affinity(c);
  const calibrate::AffinityTimes r = calibrate::run_affinity(c, device, threads, repeats);
  auto row = [](double predicted, double measured) {
    return nlohmann::json{{"predicted_s", predicted}, {"measured_s", measured}};
  };
  int on_gpu = 0;
  for (const auto& e : c.experts) on_gpu += e.on_gpu;
  return {{"threads", threads},
          {"experts_on_gpu", on_gpu},
          {"experts", c.experts.size()},
          {"load_all", row(p.load_all_s, r.load_all_s)},
          {"split", row(p.split_s, r.split_s)},
          {"split_gpu_path", row(p.split_gpu_s, r.split_gpu_s)},
          {"split_cpu_path", row(p.split_cpu_s, r.split_cpu_s)},
          {"speedup_predicted", p.load_all_s / p.split_s},
          {"speedup_measured", r.load_all_s / r.split_s}};
}

void print_affinity_execution(const nlohmann::json& execution, int device) {
  fmt::print(
      "executed forward on GPU {} and {} CPU threads, {} of {} experts on the GPU (MHA "
      "and gate loads left out):\n",
      device, execution["threads"].get<int>(), execution["experts_on_gpu"].get<int>(),
      execution["experts"].get<size_t>());
  Table e({"schedule", "predicted", "measured", "error"});
  for (const char* key : {"load_all", "split", "split_gpu_path", "split_cpu_path"}) {
    const double p = execution[key]["predicted_s"], r = execution[key]["measured_s"];
    // A path given no expert predicts nothing; what it measures is starting its thread.
    e.add({key, as_ms(p), as_ms(r), p > 0 ? fmt::format("{:+.1f} %", 100.0 * (p - r) / r) : "-"});
  }
  fmt::print("{}split speedup over loading all: predicted {:.2f}x, measured {:.2f}x\n", e.render(),
             execution["speedup_predicted"].get<double>(),
             execution["speedup_measured"].get<double>());
}

std::optional<int64_t> positive_integer(const std::string& text) {
  try {
    size_t used = 0;
    const long long n = std::stoll(text, &used);
    if (used == text.size() && n > 0) return n;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::optional<double> finite_number(const std::string& text) {
  try {
    size_t used = 0;
    const double x = std::stod(text, &used);
    if (used == text.size() && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

calibrate::NcclWorld launcher_world() {
  return calibrate::world_from_environment([](const char* name) { return std::getenv(name); });
}

void require_nccl_id_file(const calibrate::NcclWorld& world, const std::string& nccl_id_file) {
  if (world.size > 1 && nccl_id_file.empty()) {
    throw InputError(
        "--nccl-id-file", "",
        fmt::format("{} ranks need a file all of them can read to meet through", world.size));
  }
}

std::optional<std::vector<MontaExecution>> execute_monta(
    const monta::Problem& p, const monta::ChunkChoice& o2, const monta::ChunkChoice& o3,
    const std::string& nccl_id_file, int repeats, const std::string& layout_source) {
  const calibrate::NcclWorld world = launcher_world();
  if (world.size != p.tp * p.ep) {
    throw InputError(layout_source, "",
                     fmt::format("the launcher started {} rank(s); tp x ep = {} x {} = {}",
                                 world.size, p.tp, p.ep, p.tp * p.ep));
  }
  require_nccl_id_file(world, nccl_id_file);
  if (repeats < 1) throw InputError("--repeats", "", fmt::format("{} must be at least 1", repeats));
  calibrate::NcclBench bench(world, nccl_id_file);
  calibrate::BenchOptions opt;
  opt.repeats = repeats;
  std::vector<MontaExecution> rows = {{"baseline", 1, monta::baseline_time(p).value(), 0},
                                      {"O1", 1, monta::o1_time(p).value(), 0},
                                      {"O2", o2.chunks, o2.time.value(), 0},
                                      {"O3", o3.chunks, o3.time.value(), 0}};
  const monta::Strategy order[] = {monta::Strategy::kBaseline, monta::Strategy::kO1,
                                   monta::Strategy::kO2, monta::Strategy::kO3};
  for (size_t i = 0; i < rows.size(); ++i)
    rows[i].measured_s = bench.time_monta(order[i], p.tp, p.volume.value(), rows[i].chunks, opt);
  if (world.rank != 0) return std::nullopt;
  return rows;
}

nlohmann::json monta_execution_json(const std::vector<MontaExecution>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const MontaExecution& r : rows) {
    out.push_back({{"strategy", r.name},
                   {"chunks", r.chunks},
                   {"predicted_s", r.predicted_s},
                   {"measured_s", r.measured_s}});
  }
  return out;
}

void print_monta_execution(const std::vector<MontaExecution>& rows, monta::Strategy choice) {
  Table e({"strategy", "chunks", "predicted", "measured", "error"});
  const MontaExecution* fastest = &rows.front();
  for (const MontaExecution& x : rows) {
    e.add({x.name, std::to_string(x.chunks), as_ms(x.predicted_s), as_ms(x.measured_s),
           fmt::format("{:+.1f} %", 100.0 * (x.predicted_s - x.measured_s) / x.measured_s)});
    if (x.measured_s < fastest->measured_s) fastest = &x;
  }
  fmt::print("\nexecuted on NCCL (the slowest rank's median):\n{}", e.render());
  fmt::print("fastest measured: {}; Algorithm 3 chose {}\n", fastest->name,
             monta::strategy_name(choice));
}

LoggedIterations logged_iterations(const std::string& path) {
  if (path.empty()) return {};
  const std::vector<double> logged = io::logged_iteration_times_ms(io::read_text_file(path));
  const std::optional<double> typical = io::typical_logged_iteration_ms(logged);
  if (!typical)
    throw InputError(path, "",
                     "fewer than two 'elapsed time per iteration (ms)' lines to take the run's "
                     "iteration from");
  return {typical, logged.size()};
}

}  // namespace moe::cli
