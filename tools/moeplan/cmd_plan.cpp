// moeplan plan: search the parallelism space for a model on a cluster and print the best plans
// with the launch arguments a user can run.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>

#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/layer_ops.h"
#include "planner/megatron_flops.h"
#include "planner/monta.h"
#include "planner/search.h"
#include "simulator/training_sim.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/explain_layers.h"
#include "tools/moeplan/plan_difference.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct PlanOptions {
  std::string model, cluster, parallel, calibration, skew = "balanced", objective = "throughput",
                                                     save;
  std::vector<std::string> recompute_modules;
  std::vector<std::string> offload_modules;
  std::optional<double> optimizer_offload;
  std::string recompute, precision = "bf16", overlap = "search", attention = "search",
                         intra_overlap = "off", schedule = "1f1b", permute_fusion = "on",
                         attention_kernel = "fused", dispatcher = "search", cuda_graph = "none",
                         grad_reduce = "search";
  std::optional<std::string> fp8_recipe;
  int64_t global_batch = 0, seq_len = 4096;
  std::optional<int64_t> gpus;
  int top = 5, threads = 2, verify = 0;
  double alpha = 1.0;
  std::optional<double> static_override_gb;
  std::optional<int> zero;
  bool json = false, explain = false, megatron_only = false;
};

Objective parse_objective(const std::string& s) {
  if (s == "throughput") return Objective::kThroughput;
  if (s == "memory") return Objective::kMemory;
  if (s == "cost") return Objective::kCost;
  throw InputError("--objective", "",
                   fmt::format("'{}' is not one of throughput, memory, cost", s));
}

std::string ms(Seconds s) {
  return as_ms(s.value(), 1);
}

// A group whose ranks do not tile the NVLink domain (EP 32 in a 72-GPU rack) straddles two
// somewhere, and its collectives run at the worst-placed member's NIC share: say so, and what
// keeps them inside.
void print_straddling_groups(const LinkRates& links, const ParallelConfig& p) {
  for (const auto& [name, kind] :
       {std::pair{"TP", GroupKind::kTp}, std::pair{"CP", GroupKind::kCp},
        std::pair{"EP", GroupKind::kEp}, std::pair{"DP", GroupKind::kDp}}) {
    const GroupShape g = group_shape(p, kind);
    if (g.n < 2 || !links.straddles(g.span())) continue;
    fmt::print(
        "\nnote: {} groups span {} ranks, which do not tile the {}-GPU NVLink domain: one "
        "straddles two with {} of its {} ranks on one side, and every {} collective is priced "
        "at that rank's NIC share. Spans that divide {}, or {} GPUs of each domain, keep the "
        "groups whole.\n",
        name, g.span(), links.gpus_per_node, links.local_peers(g.n, g.stride), g.n, name,
        links.gpus_per_node, std::bit_floor(static_cast<uint64_t>(links.gpus_per_node)));
  }
}

// A best plan whose GPUs wait for the host (planner/host_time.h) a tenth of the iteration or
// more: what would take it away.
void print_host_bound(const Plan& best) {
  const TimeBreakdown& b = best.score.time;
  const double share = b.host / b.iteration;
  if (share < 0.1) return;
  fmt::print(
      "\nnote: the GPUs wait {:.0f} % of the iteration for the host to issue kernels (micro-batch "
      "{}, {}): larger micro-batches give each kernel more work, and CUDA graphs replay them "
      "without the host ({}).\n",
      100 * share, *best.choice.parallel.mbs,
      best.choice.cuda_graph == CudaGraph::kNone ? "no CUDA graphs" : "experts issued eagerly",
      best.choice.cuda_graph == CudaGraph::kNone ? "--cuda-graph attn or full"
                                                 : "--cuda-graph full");
}

void explain_difference(const Plan& a, const Plan& b, bool simulated_order) {
  const TimeBreakdown& x = a.score.time;
  const TimeBreakdown& y = b.score.time;
  if (simulated_order) {
    fmt::print(
        "\nWhere #1 and #2 differ in the planner's terms ({} vs {}; the simulator ordered "
        "them):\n",
        ms(x.iteration), ms(y.iteration));
  } else {
    fmt::print("\nWhy #1 beats #2 ({} vs {} per iteration):\n", ms(x.iteration), ms(y.iteration));
  }
  fmt::print("  #1 {}\n  #2 {}\n", a.choice.describe(), b.choice.describe());
  print_plan_difference(a, b, "#1", "#2");
}

// True when --parallel fixed any size (or a pipeline layout).
bool fixes_sizes(const ParallelConfig& p) {
  if (!p.layout.empty()) return true;
  for (const ParallelField& f : parallel_fields())
    if (f.member != &ParallelConfig::gbs && (p.*f.member).has_value()) return true;
  return false;
}

// The user's fixed sizes against the search's best with them free and every switch as given
// (--explain): how much their layout leaves, and in which terms.
void explain_free_layout(const Plan& yours, const Plan& free, const ParallelConfig& fixed,
                         Objective objective) {
  const Seconds x = yours.score.time.iteration, y = free.score.time.iteration;
  fmt::print("\nYour sizes ({}) against the search's best with them free and the same switches:\n",
             fixed.to_string());
  fmt::print("  yours   {}\n  search  {}\n", yours.choice.describe(), free.choice.describe());
  if (yours.choice.describe() == free.choice.describe()) {
    fmt::print("  the same plan: the search keeps your layout\n");
    return;
  }
  if (objective == Objective::kMemory) {
    fmt::print("  peak memory {} vs {} ({:+.1f} %)\n", as_gb(yours.score.peak_bytes.value()),
               as_gb(free.score.peak_bytes.value()),
               100 * (free.score.peak_bytes / yours.score.peak_bytes - 1));
  } else {
    fmt::print("  {} vs {} per iteration: {}\n", ms(x), ms(y),
               y < x ? fmt::format("the search's plan runs {:.2f}x as fast", x / y)
                     : std::string("yours is as fast or faster"));
  }
  print_plan_difference(yours, free, "yours", "search");
}

// A ranked plan run through the discrete-event simulator (--verify).
struct Verified {
  Seconds iteration;
  int64_t oom_events = 0;
  size_t planner_rank = 0;  // 0-based, before the simulator reordered them
};

// Simulates the first `count` plans for one iteration each and, for the throughput objective,
// reorders them by simulated time (a plan that runs out of memory in simulation goes last):
// contention, the pipeline's real order and sampled routing can swap plans the closed form
// put within a few percent. Returns the results aligned with the new order.
std::vector<Verified> verify_plans(const TimeContext& ctx, const ClusterSpec& c,
                                   const SearchRequest& req, std::vector<Plan>& ranked,
                                   size_t count, bool reorder, bool tty) {
  sim::TrainingOptions opt;
  opt.alpha = req.alpha;
  opt.static_override = req.static_override;
  std::vector<std::pair<Plan, Verified>> runs;
  for (size_t i = 0; i < count; ++i) {
    if (tty) fmt::print(stderr, "\rsimulating plan {} of {}", i + 1, count);
    const sim::TrainingReport r = sim::simulate_training(ctx, c, ranked[i].choice, opt);
    runs.push_back({ranked[i], {r.mean_iteration, r.oom_count, i}});
  }
  if (tty) fmt::print(stderr, "\r                          \r");
  if (reorder) {
    std::stable_sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) {
      if ((a.second.oom_events > 0) != (b.second.oom_events > 0)) return b.second.oom_events > 0;
      return a.second.iteration < b.second.iteration;
    });
  }
  std::vector<Verified> out;
  for (size_t i = 0; i < count; ++i) {
    ranked[i] = std::move(runs[i].first);
    out.push_back(runs[i].second);
  }
  return out;
}

void run_plan(const PlanOptions& o) {
  const ModelSpec m = io::load_model(o.model);
  const ClusterSpec c = io::load_cluster(o.cluster);
  const RoutingSkew skew = skew_for(o.skew, m);
  const CalibrationIn cal = calibration_from(o.calibration);
  const TimeContext ctx = make_time_context(m, c, cal.efficiencies, skew, o.seq_len);

  SearchRequest req;
  req.num_gpus = o.gpus.value_or(c.num_gpus());
  if (req.num_gpus > c.num_gpus()) {
    throw InputError(
        "--gpus", "",
        fmt::format("{} GPUs asked, cluster {} has {}", req.num_gpus, c.name, c.num_gpus()));
  }
  req.global_batch = o.global_batch;
  req.fixed = parse_parallel(o.parallel);
  if (req.fixed.gbs && *req.fixed.gbs != o.global_batch) {
    throw InputError(
        "--parallel", "gbs",
        fmt::format("gbs={} contradicts --global-batch {}", *req.fixed.gbs, o.global_batch));
  }
  req.objective = parse_objective(o.objective);
  req.top_k = o.top;
  req.alpha = o.alpha;
  req.threads = o.threads;
  req.zero = o.zero;
  req.dp_bf16_compression = parse_grad_reduce(o.grad_reduce, "--grad-reduce", true);
  if (o.schedule == "gpipe")
    req.gpipe = true;
  else if (o.schedule != "1f1b")
    throw InputError(
        "--schedule", "",
        fmt::format("'{}' is not one of 1f1b (interleaved when vpp > 1), gpipe", o.schedule));
  if (o.static_override_gb) req.static_override = moe::gigabytes(*o.static_override_gb);
  if (!o.recompute.empty()) req.recompute = parse_recompute(o.recompute);
  if (!o.recompute_modules.empty()) {
    if (req.recompute && *req.recompute != Recompute::kSelective)
      throw InputError("--recompute-modules", "",
                       fmt::format("names what selective recompute replays; --recompute is {}",
                                   recompute_name(*req.recompute)));
    req.recompute = Recompute::kSelective;
    req.recompute_modules = parse_recompute_modules(o.recompute_modules, m);
  }
  if (o.offload_modules == std::vector<std::string>{"search"}) {
    req.search_offload = true;
  } else if (!o.offload_modules.empty()) {
    req.offload_modules = parse_offload_modules(o.offload_modules, m);
    if (req.recompute) require_offloadable(*req.recompute, "--offload-modules", "", "--recompute");
  }
  if (o.optimizer_offload) {
    if (!(*o.optimizer_offload > 0 && *o.optimizer_offload <= 1))
      throw InputError("--optimizer-offload", "",
                       fmt::format("{} is not a share in (0, 1]", *o.optimizer_offload));
    if (c.node.cpus.empty())
      throw InputError(o.cluster, "node.cpus",
                       "the cluster lists no CPUs to run the offloaded optimizer on");
    req.optimizer_offload = *o.optimizer_offload;
  }
  req.overlap = parse_on_off(o.overlap, "--overlap", true);
  req.intra_overlap = parse_on_off(o.intra_overlap, "--intra-overlap", true);
  req.megatron_only = o.megatron_only;
  if (o.megatron_only && (!req.intra_overlap || *req.intra_overlap))
    throw InputError("--intra-overlap", "",
                     "MegaScale-MoE's intra-operator overlap has no Megatron-LM kernel; "
                     "--megatron-only leaves it off");
  if (o.megatron_only && req.recompute == Recompute::kRematerialize)
    throw InputError("--recompute", "",
                     "sar (MegaScale-MoE's rematerialization) has no Megatron-LM argument; "
                     "--megatron-only leaves it out");
  req.permute_fusion = *parse_on_off(o.permute_fusion, "--permute-fusion", false);
  req.attention_kernel = parse_attention_kernel(o.attention_kernel, "--attention-kernel");
  req.cuda_graph = parse_cuda_graph(o.cuda_graph, "--cuda-graph");
  req.attention = parse_attention(o.attention, "--attention", true);
  req.dispatcher = parse_dispatcher(o.dispatcher, "--dispatcher", true);
  if (req.dispatcher && !megascale::dispatcher_priced(*req.dispatcher, req.fixed.ep.value_or(1),
                                                      req.fixed.etp.value_or(1)))
    throw InputError("--dispatcher", "",
                     fmt::format("{} is priced {}; --parallel fixes ep = {}, etp = {} (expert TP "
                                 "takes the all-to-all, MoNTA's across EP)",
                                 megascale::dispatcher_name(*req.dispatcher),
                                 megascale::dispatcher_priced_where(*req.dispatcher),
                                 req.fixed.ep.value_or(1), req.fixed.etp.value_or(1)));
  req.precision = parse_precision(o.precision, "--precision");
  if (req.precision == Precision::kFp8 && !c.node.gpu.peak.count(Dtype::kFp8)) {
    throw InputError("--precision", "",
                     fmt::format("{} in {} has no fp8 peak (node/gpu/peak_TFLOPS/fp8)",
                                 c.node.gpu.model, o.cluster));
  }
  if (o.fp8_recipe) {
    req.fp8_recipe = parse_fp8_recipe(*o.fp8_recipe, "--fp8-recipe");
    if (req.precision != Precision::kFp8)
      throw InputError("--fp8-recipe", "",
                       fmt::format("scales FP8 GEMMs; --precision is {} (add --precision fp8)",
                                   precision_name(req.precision)));
  }
  const bool tty = isatty(fileno(stderr)) != 0;
  if (tty && !o.json) {
    req.progress = [](double share) {
      fmt::print(stderr, "\rsearching: {:3.0f} %", 100.0 * share);
    };
  }

  // The cost objective without --gpus weighs cluster sizes too: whole nodes in powers of two,
  // and the whole cluster.
  std::vector<int64_t> counts = {req.num_gpus};
  if (req.objective == Objective::kCost && !o.gpus) {
    counts.clear();
    for (int64_t n = c.node.num_gpus; n < c.num_gpus(); n *= 2) counts.push_back(n);
    counts.push_back(c.num_gpus());
  }
  auto search = [&](const SearchRequest& q) {
    return counts.size() == 1 ? search_plans(ctx, q) : search_gpu_counts(ctx, q, counts);
  };
  SearchResult r = search(req);
  if (tty && !o.json) fmt::print(stderr, "\r                 \r");
  // Nothing fits in GPU memory as it is: Megatron's activation offloading first, which runs as
  // the arguments say, where a candidate needs it (unless the user fixed the modules). For MoE
  // models APTMoE's plans come next, which keep the weights in host memory; the optimizer's CPU
  // offload only where those leave nothing (--optimizer-offload asks for it directly).
  bool offloaded = false, activations_offloaded = false, tried_activations = false;
  if (r.ranked.empty() && !req.search_offload && req.offload_modules == 0) {
    SearchRequest again = req;
    again.search_offload = true;
    SearchResult a = search(again);
    tried_activations = true;
    if (!a.ranked.empty()) {
      a.stats.seconds += r.stats.seconds;
      r = std::move(a);
      activations_offloaded = true;
    } else if (a.closest && (!r.closest || a.closest->needed < r.closest->needed)) {
      r.closest = a.closest;  // what offloading activations too leaves short
    }
  }
  // Nothing fits in GPU memory as it is: two ways remain. Megatron's optimizer CPU offload (all
  // of the states, activations offloaded where needed too) keeps the weights on the GPUs;
  // APTMoE's plans keep them in host memory and run cold experts on the CPU. The faster leads
  // and the other gets a line below the plans.
  bool optimizer_offloaded = false;
  std::optional<Plan> megatron_alternative, aptmoe_alternative;
  if (r.ranked.empty()) {
    std::vector<Plan> aptmoe = offload_plans(ctx, c, req);
    std::optional<SearchResult> cpu_optimizer;
    if (req.optimizer_offload == 0 && !c.node.cpus.empty()) {
      SearchRequest again = req;
      again.optimizer_offload = 1.0;
      again.search_offload = req.offload_modules == 0;
      cpu_optimizer = search(again);
      if (cpu_optimizer->ranked.empty()) cpu_optimizer.reset();
    }
    const bool cpu_optimizer_leads =
        cpu_optimizer &&
        (aptmoe.empty() ||
         (req.objective == Objective::kMemory
              ? cpu_optimizer->ranked.front().score.peak_bytes < aptmoe.front().score.peak_bytes
              : cpu_optimizer->ranked.front().score.time.iteration <
                    aptmoe.front().score.time.iteration));
    if (cpu_optimizer_leads) {
      cpu_optimizer->stats.seconds += r.stats.seconds;
      r = std::move(*cpu_optimizer);
      optimizer_offloaded = true;
      if (!aptmoe.empty()) aptmoe_alternative = aptmoe.front();
    } else if (!aptmoe.empty()) {
      r.ranked = std::move(aptmoe);
      offloaded = true;
      if (cpu_optimizer) megatron_alternative = cpu_optimizer->ranked.front();
    }
  }
  // With sizes fixed by --parallel: the best the search finds with them free (and every switch
  // as given), for --explain's comparison and wherever the fixed sizes fit only with offloading
  // or not at all.
  const bool sizes_fixed = fixes_sizes(req.fixed);
  const bool fits_as_is =
      !r.ranked.empty() && !activations_offloaded && !optimizer_offloaded && !offloaded;
  std::optional<Plan> free_best;
  if (sizes_fixed && (o.explain || !fits_as_is)) {
    SearchRequest free = req;
    free.fixed = ParallelConfig{};
    free.top_k = 1;
    free.progress = nullptr;
    SearchResult f = search(free);
    if (!f.ranked.empty()) free_best = std::move(f.ranked.front());
  }
  const std::string free_fits =
      free_best && !fits_as_is
          ? fmt::format(
                "with --parallel's sizes free and the same switches, {} fits in GPU "
                "memory ({} an iteration)",
                free_best->choice.describe(), ms(free_best->score.time.iteration))
          : std::string();
  if (r.ranked.empty()) {
    if (!r.closest) throw NoFitError("nothing fits and no candidate was scored");
    const NoFit& n = *r.closest;
    // How many such GPUs the weights, gradients and optimizer states alone would fill, sharded
    // over all of them (ZeRO-3), and with the optimizer's states on the host: a floor on the
    // cluster to ask for.
    PlanChoice sharded;
    sharded.precision = req.precision;
    const Bytes room = c.node.gpu.hbm_capacity * req.alpha;
    const memfine::StaticBytesPerParam b =
        memory_request(ctx, sharded, c.node.gpu.hbm_capacity, req.alpha).static_bytes;
    auto gpus_for = [&](double bytes_per_param) {
      return std::ceil(ctx.params.total() * bytes_per_param / room.value());
    };
    const double all = gpus_for(b.per_param()), offloaded = gpus_for(b.param + b.grad);
    const std::string floor =
        all > static_cast<double>(req.num_gpus)
            ? fmt::format(
                  "; its weights, gradients and optimizer states alone ({:.0f} bytes a "
                  "parameter) fill {:.0f} such GPUs sharded over all of them ({:.0f} with "
                  "the optimizer's states in host memory)",
                  b.per_param(), all, offloaded)
            : std::string();
    throw NoFitError(fmt::format(
        "nothing fits: needs {:.1f} GB on stage {} at {} (binding: {}{}); {} has {:.1f} GB{}{}{}",
        n.needed.value() / 1e9, n.stage, n.layout, n.binding,
        tried_activations ? ", activations offloaded where Megatron can" : "", n.holder,
        n.capacity.value() / 1e9,
        m.is_moe() ? " (and no APTMoE offload plan fits GPU and host memory)" : "", floor,
        free_fits.empty() ? "" : "; " + free_fits));
  }
  warn_if_calibrated_on_another_gpu(cal, c);
  // --verify: the shortlist through the simulator, ranked by what it measures.
  const size_t verified_count =
      offloaded ? 0 : std::min(r.ranked.size(), static_cast<size_t>(std::max(o.verify, 0)));
  const std::vector<Verified> verified =
      verified_count == 0 ? std::vector<Verified>{}
                          : verify_plans(ctx, c, req, r.ranked, verified_count,
                                         req.objective == Objective::kThroughput, tty && !o.json);
  const Plan& best = r.ranked.front();
  if (!o.save.empty())
    io::write_file_atomically(o.save, io::plan_to_json(best, m, c).dump(2) + "\n");

  if (o.json) {
    nlohmann::json plans = nlohmann::json::array();
    for (size_t i = 0; i < r.ranked.size(); ++i) {
      nlohmann::json j = io::plan_to_json(r.ranked[i], m, c);
      if (i == 0 && o.explain && !best.choice.offload) {
        TimeContext own = ctx;
        own.links.world = best.choice.parallel.world();
        j["explain"] = layer_explanation_json(own, best);
      }
      if (i < verified.size()) {
        j["simulated"] = {{"iteration_s", verified[i].iteration.value()},
                          {"oom_events", verified[i].oom_events},
                          {"planner_rank", verified[i].planner_rank + 1}};
      }
      plans.push_back(std::move(j));
    }
    print_json(
        {{"model", m.name},
         {"cluster", c.name},
         {"gpus", req.num_gpus},
         {"global_batch", o.global_batch},
         {"seq_len", o.seq_len},
         {"skew", skew.describe()},
         {"objective", objective_name(req.objective)},
         {"search",
          {{"layouts", r.stats.layouts},
           {"pruned_by_memory", r.stats.pruned_by_memory},
           {"evaluated", r.stats.evaluated},
           {"cut_by_time_bound", r.stats.bounded},
           {"seconds", r.stats.seconds}}},
         {"verified", verified.size()},
         {"plans", plans},
         {"megatron_alternative",
          megatron_alternative ? io::plan_to_json(*megatron_alternative, m, c) : nlohmann::json()},
         {"aptmoe_alternative",
          aptmoe_alternative ? io::plan_to_json(*aptmoe_alternative, m, c) : nlohmann::json()},
         {"free_layout_best", free_best ? io::plan_to_json(*free_best, m, c) : nlohmann::json()}});
    return;
  }
  fmt::print(
      "{} on {}: {} GPUs, global batch {}, seq {}, skew {}, objective {}\n", m.name, c.name,
      counts.size() == 1 ? fmt::format("{}", req.num_gpus) : fmt::format("up to {}", req.num_gpus),
      o.global_batch, o.seq_len, skew.describe(), objective_name(req.objective));
  auto counted = [](int64_t n, const char* noun) {
    return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
  };
  fmt::print(
      "searched {} ({} cut by the memory bound), weighed {} ({} cut by the time bound before "
      "their DP syncs were priced) in {:.2f} s\n\n",
      counted(r.stats.layouts, "layout"), r.stats.pruned_by_memory,
      counted(r.stats.evaluated, "candidate"), r.stats.bounded, r.stats.seconds);
  if (activations_offloaded) {
    fmt::print(
        "No layout fits in GPU memory as it is. These plans offload activations to host memory "
        "(Megatron's\n--fine-grained-activation-offloading --offload-modules):\n\n");
  }
  if (optimizer_offloaded) {
    fmt::print(
        "No layout fits in GPU memory as it is. These plans keep the optimizer states in host "
        "memory and\nstep them on the CPU (Megatron's --optimizer-cpu-offload "
        "--optimizer-offload-fraction 1):\n\n");
  }
  if (offloaded) {
    fmt::print(
        "No layout fits in GPU memory. APTMoE offload plans: weights in host memory, hot experts "
        "loaded\n"
        "over PCIe, cold experts on the CPU (planner/offload.h):\n\n");
  }
  std::vector<std::string> columns = {"#",        "GPUs", "layout", "switches", "iteration",
                                      "tokens/s", "MFU",  "TGS",    "peak mem", "headroom"};
  if (!verified.empty()) columns.insert(columns.end(), {"simulated", "sim vs plan", "planner #"});
  Table t(columns);
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const Plan& p = r.ranked[i];
    std::string sw = fmt::format("{} attn={}", recompute_name(p.choice.recompute),
                                 attention_mode_name(p.choice.attention));
    const std::string full = p.choice.describe();
    const size_t space = full.find(' ');
    if (space != std::string::npos) sw = full.substr(space + 1);
    if (p.choice.offload) sw = "recompute=full, experts split by APTMoE eq. (1)";
    std::vector<std::string> cells = {std::to_string(i + 1),
                                      std::to_string(p.choice.gpus()),
                                      p.choice.offload ? full : p.choice.parallel.to_string(),
                                      sw,
                                      ms(p.score.time.iteration),
                                      fmt::format("{:.0f}", p.score.tokens_per_second),
                                      fmt::format("{:.1f} %", 100 * p.score.mfu),
                                      fmt::format("{:.0f}", p.score.tgs),
                                      as_gb(p.score.peak_bytes.value()),
                                      as_gb(p.score.headroom.value())};
    if (i < verified.size()) {
      const Verified& v = verified[i];
      cells.push_back(v.oom_events > 0 ? "out of memory" : ms(v.iteration));
      cells.push_back(fmt::format("{:+.1f} %", 100 * (v.iteration / p.score.time.iteration - 1)));
      cells.push_back(std::to_string(v.planner_rank + 1));
    } else if (!verified.empty()) {
      cells.insert(cells.end(), {"-", "-", std::to_string(i + 1)});
    }
    t.add(cells);
  }
  fmt::print("{}\n", t.render());
  if (!free_fits.empty()) fmt::print("note: {}\n\n", free_fits);
  if (aptmoe_alternative) {
    const Plan& a = *aptmoe_alternative;
    fmt::print(
        "APTMoE's offload plans (weights in host memory, cold experts on the CPU; not Megatron-LM) "
        "are slower here: {} at best, {} an iteration ({:.0f} tokens/s)\n\n",
        a.choice.describe(), ms(a.score.time.iteration), a.score.tokens_per_second);
  }
  if (!verified.empty()) {
    size_t was_first = 0;  // where the planner's #1 went
    while (verified[was_first].planner_rank != 0) ++was_first;
    fmt::print("Simulated the first {} plans, one iteration each (moeplan simulate); {}\n\n",
               verified.size(),
               verified[0].planner_rank == 0
                   ? std::string("the simulator agrees on the best.")
                   : fmt::format("its fastest is the planner's #{} ({}), shown first and saved; "
                                 "the planner's #1 simulates at {} (shared links, sampled "
                                 "routing and the real schedule, which its closed form prices "
                                 "lower).",
                                 verified[0].planner_rank + 1, ms(verified[0].iteration),
                                 ms(verified[was_first].iteration)));
  }
  const TimeBreakdown& b = best.score.time;
  fmt::print("Best plan, per iteration ({} micro-batch{}, {}):\n", b.microbatches,
             b.microbatches == 1 ? "" : "es", schedule_name(best.choice.schedule()));
  Table bt({"term", "time", "share"});
  auto row = [&](const char* name, Seconds s) {
    bt.add({name, ms(s), fmt::format("{:.1f} %", 100 * s.value() / b.iteration.value())});
  };
  row("compute", b.compute);
  row("recompute", b.recompute);
  row("TP/SP comm (exposed)", b.tp_comm);
  row("EP comm (exposed)", b.ep_comm);
  row("CP comm (exposed)", b.cp_comm);
  row("PP comm", b.pp_comm);
  row("DP comm (exposed)", b.dp_comm);
  row("pipeline bubble", b.bubble);
  row("optimizer step", b.optimizer);
  if (b.host.value() > 0) row("host launch-bound", b.host);
  if (best.choice.offload_modules != 0) row("activation offload (exposed)", b.activation_offload);
  if (best.choice.offload) {
    row("PCIe loading (exposed)", b.pcie_load);
    row("CPU experts (exposed)", b.cpu_experts);
  }
  fmt::print("{}\n", bt.render());
  // Where the exposed DP time comes from: the stage with the least slack behind its sync (the
  // first, with the embedding, in 1F1B; the slowest when interleaved).
  if (b.dp_comm.value() > 0 && (b.dp_reduce_stage >= 0 || b.dp_gather_stage >= 0)) {
    std::vector<std::string> parts;
    if (b.dp_reduce_stage >= 0)
      parts.push_back(
          fmt::format("stage {}'s gradient reduce-scatter ({}) behind its last backward",
                      b.dp_reduce_stage, ms(b.dp_reduce_scatter)));
    if (b.dp_gather_stage >= 0)
      parts.push_back(fmt::format("stage {}'s parameter all-gather ({}) before its first forward",
                                  b.dp_gather_stage, ms(b.dp_all_gather)));
    fmt::print(
        "DP comm: {} show most; link sharing and ZeRO-2/3's per-micro-batch syncs add the "
        "rest\n\n",
        fmt::join(parts, " and "));
  }
  if (b.ep_held_sms.value() > 0)
    fmt::print(
        "EP comm: {} of it is compute slowed beside the overlapped dispatch and combine, whose "
        "kernels hold {:g} of the GPU's {} SMs\n\n",
        ms(b.ep_held_sms), ep_comm_sms(ctx, best.choice), ctx.gpu.sms);
  const ParallelConfig& bp = best.choice.parallel;
  // The two numbers users compare with first: Megatron-LM's per-iteration log line (an APTMoE
  // offload plan does not run on Megatron-LM).
  if (!best.choice.offload)
    fmt::print(
        "Megatron-LM would log: elapsed time per iteration (ms): {:.1f} | throughput per GPU "
        "(TFLOP/s/GPU): {:.1f}\n\n",
        b.iteration.value() * 1e3,
        megatron_logged_tflops(m, best.choice.seq_len, *bp.gbs, *bp.tp, best.choice.gpus(),
                               b.iteration));
  if (!best.choice.offload && *bp.cp > 1 && *bp.ep > 1) {
    const monta::CpExpansionChoice e = monta::choose_cp_expansion(*bp.cp, *bp.ep, c.switch_radix);
    fmt::print("CP and EP groups (MoNTA Sec. 5): {} expansion, network scale {}{}; {}\n\n",
               monta::cp_expansion_name(e.expansion), e.network_scale,
               e.fits_switch ? "" : " (beyond one switch)", e.reason);
  }
  if (best.choice.offload) {
    fmt::print(
        "Memory: {} per GPU (one stage's loaded weights and gradients, checkpoints of every "
        "micro-batch); "
        "{} of host memory per node for weights and optimizer states\n\n",
        as_gb(best.score.peak_bytes.value()), as_gb(best.score.host_bytes.value()));
  }
  // Received tokens and MemFine's chunks belong to MoE layers; a dense model has neither.
  std::vector<std::string> memory_columns = {"stage", "static", "checkpoints", "activation",
                                             "total"};
  if (m.is_moe()) memory_columns.push_back("MACT c");
  Table mt(memory_columns);
  for (const StageMemory& s : best.score.memory.stages) {
    std::vector<std::string> row = {
        std::to_string(s.stage), as_gb(s.static_bytes.value()), as_gb(s.checkpoint_bytes.value()),
        as_gb(s.activation_bytes.value()), as_gb(s.total_bytes.value())};
    if (m.is_moe()) row.push_back(std::to_string(s.mact_chunks));
    mt.add(row);
  }
  if (!best.choice.offload) {
    const std::string received =
        m.is_moe()
            ? fmt::format("; runs out at s'' = {:.0f} received tokens, {:.1f}x balanced{}",
                          best.score.oom_received_tokens,
                          best.score.oom_received_tokens / balanced_received_tokens(m, o.seq_len),
                          best.choice.mact ? fmt::format(", MACT chunking up to {}",
                                                         best.score.memory.largest_chunk_bin)
                                           : "")
            : "";
    fmt::print("Memory per GPU by stage (headroom {}{}):\n{}\n", as_gb(best.score.headroom.value()),
               received, mt.render());
  }
  const std::vector<std::string> args = megatron_arguments(best, m, c.node.num_gpus);
  // Before the arguments, so that they stay one paste-able command.
  for (const std::string& gap : megatron_gaps(best, m)) fmt::print("Megatron-LM gap: {}\n", gap);
  if (args.empty()) {
    fmt::print(
        "Megatron-LM arguments: none (Megatron-LM cannot run experts on the CPU; APTMoE or the "
        "DeepSpeed offload below)\n");
    if (megatron_alternative) {
      const Plan& a = *megatron_alternative;
      fmt::print(
          "With the optimizer's states on the CPU instead (Megatron's --optimizer-cpu-offload, "
          "--optimizer-offload 1) it runs more slowly: {} at {} an iteration ({:.0f} tokens/s, {} "
          "a GPU)\n",
          a.choice.describe(), ms(a.score.time.iteration), a.score.tokens_per_second,
          as_gb(a.score.peak_bytes.value()));
    }
  } else {
    fmt::print("Megatron-LM arguments:\n");
  }
  // Shell continuation lines, pasted after the launcher: the last one ends the command.
  for (size_t i = 0; i < args.size(); ++i)
    fmt::print("  {}{}\n", args[i], i + 1 < args.size() ? " \\" : "");
  fmt::print(
      "\nDeepSpeed config{}:\n{}\n",
      m.is_moe() ? fmt::format(" (MoE layers take ep_size={})", *best.choice.parallel.ep) : "",
      io::deepspeed_config(best).dump(2));
  if (!o.save.empty()) fmt::print("\nsaved the best plan to {}\n", o.save);
  if (o.explain && r.ranked.size() > 1)
    explain_difference(r.ranked[0], r.ranked[1], verified.size() > 1);
  if (o.explain && free_best && fits_as_is)
    explain_free_layout(best, *free_best, req.fixed, req.objective);
  if (best.choice.offload) return;
  TimeContext own = ctx;  // the best plan's GPUs decide which groups straddle nodes
  own.links.world = bp.world();
  if (o.explain) print_layer_explanation(own, best);
  print_straddling_groups(own.links, bp);
  print_host_bound(best);
  // The search leaves DeepEP out (it needs its own library); where the best plan's experts
  // span nodes, say what it would save.
  if (o.explain && *bp.ep > 1 && *bp.etp == 1 &&
      best.choice.dispatcher != megascale::Dispatcher::kDeepEp &&
      crosses_nodes(own, bp, OpKind::kEp)) {
    PlanChoice deepep = best.choice;
    deepep.dispatcher = megascale::Dispatcher::kDeepEp;
    const TimeBreakdown t = estimate_time(own, deepep);
    fmt::print(
        "\nWith DeepEP (--dispatcher deepep: Megatron-Core's flex dispatcher, a token once per "
        "destination node): {} instead of {}, EP comm exposed {} instead of {}\n",
        ms(t.iteration), ms(best.score.time.iteration), ms(t.ep_comm), ms(best.score.time.ep_comm));
  }
}

}  // namespace

void add_plan(CommandLine& cli) {
  auto o = std::make_shared<PlanOptions>();
  Subcommand cmd = cli.subcommand(
      "plan", "Search the parallelism space; print ranked plans and launch arguments");
  cmd.option("--model", o->model, "model file").required();
  cmd.option("--cluster", o->cluster, "cluster file").required();
  cmd.option("--global-batch", o->global_batch, "global batch size in sequences")
      .required()
      .positive();
  cmd.option("--seq-len", o->seq_len, "sequence length").positive();
  cmd.option("--gpus", o->gpus, "GPUs to use (default: the whole cluster)").positive();
  cmd.option("--parallel", o->parallel,
             "fix any subset of the layout, e.g. tp=8,ep=8 (a full layout evaluates just it); "
             "layout=Et|(tt|)*30mL gives Megatron's --pipeline-model-parallel-layout");
  cmd.option("--calibration", o->calibration, "calibration file with efficiency curves");
  cmd.option("--skew", o->skew,
             "routing skew: balanced | capacity=F | G=x | worst | a popularity file (.json)");
  cmd.option("--objective", o->objective,
             "throughput | memory (the least peak memory a GPU; plans within 0.5 % of it by "
             "time) | cost");
  cmd.option("--recompute", o->recompute,
             "fix recompute: none | selective | full | sar (MegaScale rematerialization)");
  cmd.option("--recompute-modules", o->recompute_modules,
             "Megatron's --recompute-modules for selective recompute (implies it): any of "
             "core_attn moe_act layernorm mla_up_proj mlp moe (default moe_act layernorm)")
      .expected(1, 6);
  cmd.option("--offload-modules", o->offload_modules,
             "Megatron's fine-grained activation offloading (--fine-grained-activation-"
             "offloading --offload-modules): any of attn_norm core_attn attn_proj mlp_norm "
             "expert_fc1 moe_act, whose saved inputs go to host memory in forward and come back "
             "for backward (recompute none or selective); search: offload only where a "
             "candidate fits no other way")
      .expected(1, 6);
  cmd.option("--optimizer-offload", o->optimizer_offload,
             "Megatron's optimizer CPU offload (--optimizer-cpu-offload "
             "--optimizer-offload-fraction): this share of each GPU's optimizer states lives in "
             "host memory and steps on the CPU");
  cmd.option("--precision", o->precision,
             "bf16 (mixed) | fp8 (FP8 GEMMs and collectives, Transformer Engine) | fp32");
  cmd.option("--fp8-recipe", o->fp8_recipe,
             "Megatron --fp8-recipe of an fp8 plan: delayed (default) | tensorwise | "
             "blockwise (DeepSeek-V3's 128-blocks, Hopper) | mxfp8 (Blackwell)");
  cmd.option("--zero", o->zero,
             "fix the ZeRO stage: 0 (plain DDP), 1 (distributed optimizer), 2, 3 (default: "
             "the lowest of 1-3 that fits)")
      .range(0, 3);
  cmd.option("--grad-reduce", o->grad_reduce,
             "DP gradient reduction on the wire: bf16 (Megatron --grad-reduce-in-bf16, "
             "MegaScale-MoE's compression) | fp32 (Megatron's default) | search (default)");
  cmd.option("--schedule", o->schedule,
             "pipeline schedule: 1f1b (interleaved when vpp > 1) | gpipe");
  cmd.option("--overlap", o->overlap, "communication overlap: on | off | search");
  cmd.option("--intra-overlap", o->intra_overlap,
             "MegaScale-MoE intra-operator overlap (communication fused into GEMMs; not in "
             "Megatron-LM): off (default) | on | search");
  cmd.option("--permute-fusion", o->permute_fusion,
             "Megatron-Core --moe-permute-fusion: on (default) | off (a Megatron that "
             "predates it: the permutation moves twice the bytes)");
  cmd.option("--attention", o->attention, "attention parallelism: tp | ulysses | search");
  cmd.option("--cuda-graph", o->cuda_graph,
             "CUDA graphs (Megatron --cuda-graph-impl/--cuda-graph-scope): none (default: "
             "every op issued by the host) | attn (attention and router captured) | full "
             "(the whole iteration)");
  cmd.option("--dispatcher", o->dispatcher,
             "MoE token dispatcher (Megatron-Core --moe-token-dispatcher-type): alltoall | "
             "allgather (MegaScale-MoE's, with etp = 1 or ep = 1) | deepep (flex on DeepEP "
             "or HybridEP: one copy per destination rank and node, etp = 1) | search "
             "(alltoall or allgather)");
  cmd.option("--attention-kernel", o->attention_kernel,
             "core attention: fused (FlashAttention or cuDNN, default) | unfused (Megatron "
             "--attention-backend unfused, and Megatron-LM before FlashAttention: the s x s "
             "scores in HBM)");
  cmd.option("--alpha", o->alpha, "usable fraction of GPU memory").range(0.01, 1.0);
  cmd.option("--static-override", o->static_override_gb,
             "measured static memory per GPU in GB (MemFine Table 4)")
      .positive();
  cmd.option("--top", o->top, "plans to show").range(1, 100);
  cmd.option("--threads", o->threads, "search threads").range(1, 256);
  cmd.option("--verify", o->verify,
             "simulate the first K plans shown (one iteration each) and rank them by "
             "simulated time; the best of those is the one saved and launched")
      .range(1, 100);
  cmd.option("--save", o->save, "write the best plan (moeplan-plan/1) to this file");
  cmd.flag("--json", o->json, "print the ranked plans as one JSON document");
  cmd.flag("--explain", o->explain, "say why the best plan beats the runner-up");
  cmd.flag("--megatron-only", o->megatron_only,
           "search only what Megatron-Core runs (no MegaScale-MoE rematerialization or "
           "intra-operator overlap, no MemFine chunking), so the printed arguments run the "
           "plan as priced");
  cmd.on_run([o] { run_plan(*o); });
}

}  // namespace moe::cli
