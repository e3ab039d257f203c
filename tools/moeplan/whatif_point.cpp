#include "tools/moeplan/whatif_point.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/offload.h"
#include "planner/power_limit.h"
#include "planner/search.h"
#include "simulator/board_power.h"
#include "simulator/offload_sim.h"
#include "simulator/training_sim.h"
#include "tools/moeplan/common.h"

namespace moe::cli {

namespace {

// The planner's flag names where it has one; hardware axes rewrite the cluster file's fields;
// the parallel sizes and switches are plan fields (fixed in the plan, or fixed for the search).
const std::vector<std::string> kAxes = {"seq-len",
                                        "global-batch",
                                        "gpus",
                                        "skew",
                                        "top-k",
                                        "experts",
                                        "expert-size",
                                        "gpu",
                                        "nvlink-GBps",
                                        "nic-Gbps",
                                        "pcie-gen",
                                        "power-limit-W",
                                        "cpu-cores-per-gpu",
                                        "chunks",
                                        "recompute",
                                        "recompute-modules",
                                        "offload-modules",
                                        "optimizer-offload",
                                        "precision",
                                        "fp8-recipe",
                                        "overlap",
                                        "intra-overlap",
                                        "attention",
                                        "attention-kernel",
                                        "cross-entropy",
                                        "dispatcher",
                                        "permute-fusion",
                                        "cuda-graph",
                                        "zero",
                                        "grad-reduce",
                                        "adam-moments",
                                        "tp",
                                        "pp",
                                        "ep",
                                        "etp",
                                        "cp",
                                        "vpp",
                                        "mbs"};
const std::string kAxisList = fmt::format("{}", fmt::join(kAxes, ", "));

int64_t positive(const std::string& axis, const std::string& v) {
  if (const std::optional<int64_t> n = positive_integer(v)) return *n;
  throw InputError("--sweep", "", fmt::format("{}={} is not a positive integer", axis, v));
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// The catalog's GPU whose model is `name` or the only one that starts with it ("H800" for
// "H800-SXM5-80GB"); a point that names none, or several, fails with the candidates.
GpuSpec gpu_named(const GpuCatalog& catalog, const std::string& name) {
  std::vector<std::string> hits;
  for (const auto& [model, spec] : catalog) {
    if (lower(model) == lower(name)) return spec;
    if (lower(model).rfind(lower(name), 0) == 0) hits.push_back(model);
  }
  if (hits.size() == 1) return catalog.at(hits.front());
  std::vector<std::string> known;
  for (const auto& [model, spec] : catalog) known.push_back(model);
  throw InputError("--sweep", "gpu",
                   fmt::format("'{}' {} (cluster files beside --cluster have: {})", name,
                               hits.empty() ? "matches no GPU" : "is ambiguous",
                               fmt::join(hits.empty() ? known : hits, ", ")));
}

double positive_number(const std::string& axis, const std::string& v) {
  if (const std::optional<double> x = finite_number(v); x && *x > 0) return *x;
  throw InputError("--sweep", "", fmt::format("{}={} is not a positive number", axis, v));
}

// What one point changes: the model, the cluster, and the plan fields it fixes.
struct PointInputs {
  ModelSpec model;
  ClusterSpec cluster;
  int64_t seq = 0, gbs = 0, gpus = 0;
  std::string skew;
  ParallelConfig sizes;  // the parallel sizes the point fixes
  std::optional<Recompute> recompute;
  std::optional<uint32_t> recompute_modules;  // Megatron's, joined by '+': moe+layernorm
  std::optional<uint32_t> offload_modules;    // the same for --offload-modules; none: off
  std::optional<double> optimizer_offload;    // the share of optimizer states on the CPU
  std::optional<int64_t> chunks;
  std::optional<Precision> precision;
  std::optional<Fp8Recipe> fp8_recipe;  // implies FP8
  std::optional<bool> overlap, intra_overlap;
  std::optional<AttentionMode> attention;
  std::optional<AttentionKernel> attention_kernel;
  std::optional<CrossEntropy> cross_entropy;
  std::optional<StateDtype> adam_moments;
  std::optional<megascale::Dispatcher> dispatcher;
  std::optional<bool> permute_fusion;
  std::optional<CudaGraph> cuda_graph;
  std::optional<int> zero;
  std::optional<bool> dp_bf16_compression;
};

PointInputs point_inputs(const WhatifOptions& o, const ModelSpec& base, const ClusterSpec& c,
                         const GpuCatalog& catalog, const Point& p) {
  PointInputs in;
  in.model = base;
  in.cluster = c;
  in.seq = o.seq_len;
  in.gbs = o.global_batch;
  in.gpus = c.num_gpus();
  in.skew = o.skew;
  NodeSpec& node = in.cluster.node;
  for (const auto& [axis, v] : p.at) {
    if (axis == "seq-len") in.seq = positive(axis, v);
    if (axis == "global-batch") in.gbs = positive(axis, v);
    if (axis == "gpus") in.gpus = positive(axis, v);
    if (axis == "skew") in.skew = v;
    if (axis == "top-k") in.model.top_k = positive(axis, v);
    if (axis == "experts") in.model.num_routed_experts = positive(axis, v);
    if (axis == "expert-size") in.model.expert_ffn_size = positive(axis, v);
    if (axis == "gpu") node.gpu = gpu_named(catalog, v);
    if (axis == "nvlink-GBps") node.nvlink_bandwidth = gigabytes_per_sec(positive_number(axis, v));
    if (axis == "nic-Gbps") {
      for (Nic& nic : node.nics) nic.bandwidth = BytesPerSec(positive_number(axis, v) * 1e9 / 8);
    }
    // A power cap below the board's: the clock falls from a lower busy share (power_limit.h).
    if (axis == "power-limit-W") {
      try {
        cap_power_limit(node.gpu, positive_number(axis, v));
      } catch (const ConfigError& e) {
        throw InputError("--sweep", axis, e.what());
      }
    }
    if (axis == "pcie-gen") {
      node.pcie_generation = static_cast<int>(positive(axis, v));
      if (node.pcie_generation < 3 || node.pcie_generation > 6)
        throw InputError("--sweep", "pcie-gen", fmt::format("{} is not a PCIe generation 3-6", v));
    }
    if (axis == "cpu-cores-per-gpu") {
      // Cores per GPU over the node, spread over its sockets; a socket's FLOP rate moves with
      // its core count.
      const double sockets = static_cast<double>(node.cpus.size());
      for (CpuSocket& cpu : node.cpus) {
        const int cores =
            static_cast<int>(std::max(1.0, positive_number(axis, v) * node.num_gpus / sockets));
        cpu.achievable_flops = cpu.achievable_flops * (static_cast<double>(cores) / cpu.cores);
        cpu.cores = cores;
      }
    }
    if (axis == "chunks") in.chunks = positive(axis, v);
    if (axis == "recompute") in.recompute = parse_recompute(v, "--sweep", axis);
    // Megatron's module names joined by '+'.
    auto names = [&] {
      std::vector<std::string> out;
      for (size_t start = 0; start <= v.size();) {
        const size_t plus = std::min(v.find('+', start), v.size());
        out.push_back(v.substr(start, plus - start));
        start = plus + 1;
      }
      return out;
    };
    if (axis == "recompute-modules")
      in.recompute_modules = parse_recompute_modules(names(), in.model, "--sweep");
    if (axis == "offload-modules")
      in.offload_modules = v == "none" ? 0u : parse_offload_modules(names(), in.model, "--sweep");
    if (axis == "optimizer-offload") {
      const std::optional<double> share = finite_number(v);
      if (!share || !(*share >= 0 && *share <= 1) || in.cluster.node.cpus.empty())
        throw InputError("--sweep", axis,
                         in.cluster.node.cpus.empty()
                             ? "the cluster lists no CPUs to run the offloaded optimizer on"
                             : fmt::format("'{}' is not a share between 0 and 1", v));
      in.optimizer_offload = *share;
    }
    if (axis == "precision") in.precision = parse_precision(v, "--sweep", axis);
    if (axis == "fp8-recipe") in.fp8_recipe = parse_fp8_recipe(v, "--sweep", axis);
    if (axis == "overlap") in.overlap = parse_on_off(v, "--sweep", false, axis);
    if (axis == "intra-overlap") in.intra_overlap = parse_on_off(v, "--sweep", false, axis);
    if (axis == "attention") in.attention = parse_attention(v, "--sweep", false, axis);
    if (axis == "attention-kernel")
      in.attention_kernel = parse_attention_kernel(v, "--sweep", axis);
    if (axis == "cross-entropy") in.cross_entropy = parse_cross_entropy(v, "--sweep", axis);
    if (axis == "permute-fusion") in.permute_fusion = parse_on_off(v, "--sweep", false, axis);
    if (axis == "cuda-graph") in.cuda_graph = parse_cuda_graph(v, "--sweep", axis);
    if (axis == "dispatcher") in.dispatcher = parse_dispatcher(v, "--sweep", false, axis);
    if (axis == "zero")
      in.zero = named<int>("--sweep", v, {{"0", 0}, {"1", 1}, {"2", 2}, {"3", 3}}, false, axis);
    if (axis == "grad-reduce")
      in.dp_bf16_compression = parse_grad_reduce(v, "--sweep", false, axis);
    if (axis == "adam-moments")
      in.adam_moments = named("--sweep", v, state_dtype_names(), false, axis);
    for (const ParallelField& f : parallel_fields())
      if (axis == f.key) in.sizes.*f.member = positive(axis, v);
  }
  if (in.fp8_recipe && in.precision && *in.precision != Precision::kFp8)
    throw InputError("--sweep", "fp8-recipe",
                     fmt::format("scales FP8 GEMMs; this point's precision is {}",
                                 precision_name(*in.precision)));
  return in;
}

// A fixed plan with the point's sizes: the GPU count stays, dp (and edp) follow.
PlanChoice replanned_layout(PlanChoice plan, const PointInputs& in) {
  const int64_t world = plan.parallel.world();
  bool changed = false;
  for (const ParallelField& f : parallel_fields()) {
    if (!(in.sizes.*f.member)) continue;
    plan.parallel.*f.member = in.sizes.*f.member;
    changed = true;
  }
  // A point that moves pp or vpp splits the layers anew: the plan's own split (end stages or a
  // layout) was for its old pipeline.
  if (in.sizes.pp || in.sizes.vpp) {
    plan.parallel.pp_first.reset();
    plan.parallel.pp_last.reset();
    plan.parallel.layout = {};
  }
  if (changed) {
    const ParallelConfig& p = plan.parallel;
    const int64_t per_replica = *p.tp * *p.cp * *p.pp;
    if (world % per_replica != 0) {
      throw ConfigError(
          fmt::format("tp*cp*pp = {} does not divide the plan's {} GPUs", per_replica, world));
    }
    plan.parallel.dp = world / per_replica;
    plan.parallel.edp.reset();
    plan.parallel = resolve(plan.parallel);
  }
  if (in.recompute) plan.recompute = *in.recompute;
  if (in.recompute_modules) {
    plan.recompute = Recompute::kSelective;
    plan.recompute_modules = *in.recompute_modules;
  }
  if (in.offload_modules) plan.offload_modules = *in.offload_modules;
  if (in.optimizer_offload) plan.optimizer_offload = *in.optimizer_offload;
  if (plan.offload_modules != 0)
    require_offloadable(plan.recompute, "--sweep", "offload-modules", "this point's");
  if (in.precision) plan.precision = *in.precision;
  if (in.fp8_recipe) {
    plan.precision = Precision::kFp8;
    plan.fp8_recipe = *in.fp8_recipe;
  }
  if (in.overlap) plan.overlap = *in.overlap;
  if (in.intra_overlap) plan.intra_overlap = *in.intra_overlap;
  if (in.attention) plan.attention = *in.attention;
  if (in.attention_kernel) plan.attention_kernel = *in.attention_kernel;
  if (in.cross_entropy) plan.cross_entropy = *in.cross_entropy;
  if (in.permute_fusion) plan.permute_fusion = *in.permute_fusion;
  if (in.cuda_graph) plan.cuda_graph = *in.cuda_graph;
  if (in.dispatcher) plan.dispatcher = *in.dispatcher;
  if (!megascale::dispatcher_priced(plan.dispatcher, *plan.parallel.ep, *plan.parallel.etp))
    throw InputError("--sweep", "dispatcher",
                     fmt::format("{} is priced {} (this plan has ep = {}, etp = {})",
                                 megascale::dispatcher_name(plan.dispatcher),
                                 megascale::dispatcher_priced_where(plan.dispatcher),
                                 *plan.parallel.ep, *plan.parallel.etp));
  if (in.zero) plan.zero_stage = *in.zero;
  if (in.dp_bf16_compression) plan.dp_bf16_compression = *in.dp_bf16_compression;
  if (in.adam_moments) plan.adam = adam_states_for(*in.adam_moments);
  if (const std::string problem = adam_states_problem(plan); !problem.empty())
    throw ConfigError(problem);
  if (in.chunks) {
    plan.fcda_chunks = *in.chunks;
    plan.mact = false;
    plan.stage_chunks.clear();
  }
  return plan;
}

// An APTMoE offload plan at a point, run by the offload simulator as `simulate` runs it. Its
// stages (pp), micro-batch size and precision may move with the point; the switches and sizes
// of GPU-resident plans have nothing to act on.
PointResult evaluate_offload(PlanChoice plan, const PointInputs& in, const TimeContext& ctx) {
  std::vector<std::string> resident;
  for (const ParallelField& f : parallel_fields()) {
    const std::string key = f.key;
    if ((in.sizes.*f.member) && key != "pp" && key != "mbs") resident.push_back(key);
  }
  const std::pair<const char*, bool> switches[] = {
      {"recompute", in.recompute || in.recompute_modules},
      {"offload-modules", in.offload_modules.has_value()},
      {"optimizer-offload", in.optimizer_offload.has_value()},
      {"chunks", in.chunks.has_value()},
      {"fp8-recipe", in.fp8_recipe.has_value()},
      {"overlap", in.overlap.has_value()},
      {"intra-overlap", in.intra_overlap.has_value()},
      {"attention", in.attention.has_value()},
      {"attention-kernel", in.attention_kernel.has_value()},
      {"cross-entropy", in.cross_entropy.has_value()},
      {"dispatcher", in.dispatcher.has_value()},
      {"permute-fusion", in.permute_fusion.has_value()},
      {"cuda-graph", in.cuda_graph.has_value()},
      {"zero", in.zero.has_value()},
      {"grad-reduce", in.dp_bf16_compression.has_value()},
      {"adam-moments", in.adam_moments.has_value()}};
  for (const auto& [name, swept] : switches)
    if (swept) resident.push_back(name);
  if (!resident.empty())
    throw ConfigError(
        fmt::format("{}: applies to GPU-resident plans; this is an APTMoE offload plan",
                    fmt::join(resident, ", ")));
  if (in.sizes.pp) plan.parallel.pp = in.sizes.pp;
  if (in.sizes.mbs) plan.parallel.mbs = in.sizes.mbs;
  if (in.gbs > 0) plan.parallel.gbs = in.gbs;
  if (in.precision) plan.precision = *in.precision;
  plan.seq_len = in.seq;
  const int64_t stages = *plan.parallel.pp, mbs = *plan.parallel.mbs, gbs = *plan.parallel.gbs;
  if (stages < plan.offload_gpus || stages > ctx.model->num_layers)
    throw ConfigError(
        fmt::format("pp={}: an offload plan needs {} to {} stages (its GPUs to the "
                    "model's layers)",
                    stages, plan.offload_gpus, ctx.model->num_layers));
  if (gbs % mbs != 0)
    throw ConfigError(fmt::format("mbs={}: global batch {} is not divisible by it", mbs, gbs));
  const OffloadEstimate e =
      estimate_offload(ctx, in.cluster, plan.offload_gpus, stages, mbs, gbs, plan.precision, 1.0);
  const sim::OffloadReport s =
      sim::simulate_offload(ctx, in.cluster, sim::offload_run(plan, OffloadSystem::kAptMoe));
  TimeBreakdown t;
  t.iteration = s.iteration;
  const PlanScore score = complete_score(ctx, plan, {}, t, ctx.gpu.hbm_capacity, 1.0);
  PointResult r;
  r.iteration_s = s.iteration.value();
  r.tokens_per_s = score.tokens_per_second;
  r.mfu = score.mfu;
  r.peak_gb = e.gpu_peak.value() / 1e9;
  // The busiest GPU's compute; its waits on PCIe loads, CPU experts and the CPU optimizer step
  // are the rest ("other").
  r.compute_s = 0;
  for (Seconds busy : s.gpu_busy) r.compute_s = std::max(r.compute_s, busy.value());
  r.exposed_comm_s = r.bubble_s = r.host_s = 0;
  r.plan = plan.describe();
  if (e.gpu_peak > ctx.gpu.hbm_capacity) {
    r.status = fmt::format("OOM: a stage needs {:.1f} GB, the GPU has {:.1f}", r.peak_gb,
                           ctx.gpu.hbm_capacity.value() / 1e9);
  } else if (e.host_bytes > e.host_capacity) {
    r.status = fmt::format("host OOM: a node needs {:.1f} GB of host memory, has {:.1f}",
                           e.host_bytes.value() / 1e9, e.host_capacity.value() / 1e9);
  }
  return r;
}

}  // namespace

const std::string& whatif_axis_list() {
  return kAxisList;
}

Axis parse_axis(const std::string& text) {
  const size_t eq = text.find('=');
  Axis a;
  a.name = text.substr(0, eq);
  if (std::find(kAxes.begin(), kAxes.end(), a.name) == kAxes.end())
    throw InputError("--sweep", "", fmt::format("'{}' is not an axis ({})", a.name, kAxisList));
  std::stringstream in(eq == std::string::npos ? "" : text.substr(eq + 1));
  for (std::string v; std::getline(in, v, ',');)
    if (!v.empty()) a.values.push_back(v);
  if (a.values.empty()) throw InputError("--sweep", "", fmt::format("'{}' has no values", text));
  return a;
}

GpuCatalog gpu_catalog(const std::string& cluster_file) {
  GpuCatalog out;
  const std::filesystem::path dir = std::filesystem::path(cluster_file).parent_path();
  for (const auto& entry : std::filesystem::directory_iterator(dir.empty() ? "." : dir)) {
    if (entry.path().extension() != ".json") continue;
    try {
      const ClusterSpec c = io::load_cluster(entry.path().string());
      out.emplace(c.node.gpu.model, c.node.gpu);
    } catch (const std::exception&) {
      // Not a cluster file; the catalog holds the ones that load.
    }
  }
  return out;
}

PointResult evaluate(const WhatifOptions& o, const ModelSpec& base, const ClusterSpec& base_cluster,
                     const GpuCatalog& catalog, const Efficiencies& eff,
                     const std::optional<PlanChoice>& fixed, const Point& p) {
  PointInputs in;
  try {
    in = point_inputs(o, base, base_cluster, catalog, p);
    validate(in.model);
  } catch (const ConfigError& e) {
    return PointResult::failed(fmt::format("model: {}", e.what()));
  } catch (const InputError& e) {
    return PointResult::failed(e.what());
  }
  const ModelSpec& m = in.model;
  const ClusterSpec& c = in.cluster;
  const int64_t seq = in.seq, gbs = in.gbs, gpus = in.gpus;
  PointResult r;
  try {
    const TimeContext ctx = make_time_context(m, c, eff, skew_for(in.skew, m), seq);
    if (fixed && fixed->offload) return evaluate_offload(*fixed, in, ctx);
    if (fixed) {
      PlanChoice plan = replanned_layout(*fixed, in);
      plan.seq_len = seq;
      if (gbs > 0) plan.parallel.gbs = gbs;
      // A swept power limit replaces the cap the plan set on its boards.
      for (const auto& at : p.at)
        if (at.first == "power-limit-W") plan.power_cap_w = 0;
      check(plan.parallel, m);
      check_sequence(plan.parallel, seq);
      if (plan.precision == Precision::kFp8)
        require_mxfp8_runs(c.node.gpu, plan.fp8_recipe, c.name, "--sweep", "fp8-recipe");
      // The clock the power limit leaves is the point's: its GPU and the plan's busy share there.
      estimate_time_at_power_limit(ctx, plan);
      const sim::TrainingReport t = sim::simulate_training(ctx, c, plan, {});
      r.iteration_s = t.mean_iteration.value();
      r.tokens_per_s = t.tokens_per_second;
      r.mfu = t.mfu;
      double peak = 0;
      const sim::StageReport* busiest = nullptr;
      for (const sim::StageReport& s : t.stages) {
        peak = std::max(peak, s.peak_bytes.value());
        if (!busiest || s.compute_busy > busiest->compute_busy) busiest = &s;
      }
      r.peak_gb = peak / 1e9;
      if (busiest) {
        // The stage that computes most sets the pace. Outside its passes is bubble (and the
        // step at the end); the rest of its time not computing waited on communication: its
        // streams, and the parameter gathers a pass cannot end without.
        const double runs = static_cast<double>(t.iteration_times.size());
        r.compute_s = busiest->compute_busy.value() / runs;
        r.bubble_s = busiest->pipeline_wait.value() / runs;
        r.host_s = busiest->waited[sim::kHostStream].value() / runs;
        r.exposed_comm_s = std::max(0.0, r.iteration_s - r.compute_s - r.bubble_s - r.host_s);
      }
      if (const sim::BoardDraw d = sim::simulated_board_draw(ctx.gpu.power, plan, t); d.watts > 0) {
        r.gpu_power_w = d.watts;
        r.tokens_per_joule = d.tokens_per_joule;
      }
      r.plan = plan.describe();
      if (t.oom_count > 0) r.status = fmt::format("OOM x{}", t.oom_count);
      return r;
    }
    SearchRequest req;
    req.num_gpus = gpus;
    req.global_batch = gbs;
    req.fixed = in.sizes;
    req.recompute = in.recompute;
    if (in.recompute_modules) {
      req.recompute = Recompute::kSelective;
      req.recompute_modules = *in.recompute_modules;
    }
    if (in.offload_modules) req.offload_modules = *in.offload_modules;
    if (in.optimizer_offload) req.optimizer_offload = *in.optimizer_offload;
    if (in.precision) req.precision = *in.precision;
    if (in.fp8_recipe) {
      req.precision = Precision::kFp8;
      req.fp8_recipe = *in.fp8_recipe;
      require_mxfp8_runs(c.node.gpu, req.fp8_recipe, c.name, "--sweep", "fp8-recipe");
    }
    req.overlap = in.overlap;
    if (in.intra_overlap) req.intra_overlap = in.intra_overlap;
    req.attention = in.attention;
    if (in.attention_kernel) req.attention_kernel = *in.attention_kernel;
    if (in.cross_entropy) req.cross_entropy = *in.cross_entropy;
    if (in.permute_fusion) req.permute_fusion = *in.permute_fusion;
    if (in.cuda_graph) req.cuda_graph = *in.cuda_graph;
    req.dispatcher = in.dispatcher;
    req.zero = in.zero;
    req.dp_bf16_compression = in.dp_bf16_compression;
    if (in.adam_moments) req.adam = adam_states_for(*in.adam_moments);
    req.threads = 1;
    const SearchResult s = search_plans(ctx, req);
    if (s.ranked.empty()) return PointResult::failed("nothing fits");
    const Plan& best = s.ranked.front();
    r.iteration_s = best.score.time.iteration.value();
    r.tokens_per_s = best.score.tokens_per_second;
    r.mfu = best.score.mfu;
    r.peak_gb = best.score.peak_bytes.value() / 1e9;
    const TimeBreakdown& b = best.score.time;
    r.compute_s = (b.compute + b.recompute).value();
    r.exposed_comm_s = (b.tp_comm + b.ep_comm + b.cp_comm + b.pp_comm + b.dp_comm).value();
    r.bubble_s = b.bubble.value();
    r.host_s = b.host.value();
    if (const BoardEnergy e = board_energy(ctx.gpu.power, best); e.watts > 0) {
      r.gpu_power_w = e.watts;
      r.tokens_per_joule = e.tokens_per_joule;
    }
    r.plan = best.choice.describe();
  } catch (const ConfigError& e) {
    return PointResult::failed(e.what());
  } catch (const InputError& e) {
    return PointResult::failed(e.what());
  } catch (const std::exception& e) {
    // A point the models reject in a way the checks above did not foresee: said in its row
    // rather than taking the sweep's other points down with it.
    return PointResult::failed(fmt::format("internal error (please report): {}", e.what()));
  }
  return r;
}

}  // namespace moe::cli
