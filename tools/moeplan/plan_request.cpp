#include <fmt/format.h>

#include "planner/errors.h"
#include "planner/io/megatron_args.h"
#include "planner/power_limit.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/plan_options.h"

namespace moe::cli {

namespace {

Objective parse_objective(const std::string& s) {
  if (s == "throughput") return Objective::kThroughput;
  if (s == "memory") return Objective::kMemory;
  if (s == "cost") return Objective::kCost;
  if (s == "energy") return Objective::kEnergy;
  throw InputError("--objective", "",
                   fmt::format("'{}' is not one of throughput, memory, cost, energy", s));
}

}  // namespace

void apply_megatron_arguments(PlanOptions& o, const ModelSpec& m) {
  const io::MegatronRun r = io::load_megatron_arguments(o.megatron_args, m);
  MegatronReading reading;
  reading.source = o.megatron_args == "-" ? "standard input" : o.megatron_args;
  reading.notes = r.notes;
  reading.ignored = r.ignored;
  reading.measured_iteration_ms = io::typical_logged_iteration_ms(r.logged_iteration_ms);
  reading.logged_iterations = r.logged_iteration_ms.size();
  reading.memory = r.logged_memory;
  auto open = [&](const char* option) { return !o.given.count(option); };
  std::vector<std::string> fixed;  // the options the launch set, as plan spells them
  // --parallel's sizes override the launch's; a layout and a vpp replace each other.
  ParallelConfig p = r.choice.parallel;
  const ParallelConfig own = parse_parallel(o.parallel);
  for (const ParallelField& f : parallel_fields())
    if (own.*f.member) p.*f.member = own.*f.member;
  if (!own.layout.empty()) p.layout = own.layout;
  if (own.vpp && own.layout.empty()) p.layout = {};
  if (p.gbs && open("--global-batch")) o.global_batch = *p.gbs;
  p.gbs.reset();  // --global-batch carries it
  o.parallel = p.to_string();
  if (r.seq_len && open("--seq-len")) o.seq_len = *r.seq_len;
  if (r.capacity_factor && open("--skew")) {
    o.skew = fmt::format("capacity={}", *r.capacity_factor);
    fixed.push_back("--skew " + o.skew);
  }
  if (r.gpus && open("--gpus")) o.gpus = r.gpus;
  auto set = [&](const char* option, std::string& into, const std::string& value) {
    if (!open(option)) return;
    into = value;
    fixed.push_back(fmt::format("{} {}", option, value));
  };
  set("--attention", o.attention, attention_mode_name(r.choice.attention));
  if (open("--recompute") && open("--recompute-modules")) {
    set("--recompute", o.recompute, recompute_name(r.choice.recompute));
    if (r.choice.recompute == Recompute::kSelective) {
      o.recompute_modules = recompute_module_names(r.choice.recompute_modules);
      fixed.push_back(fmt::format("--recompute-modules {}", fmt::join(o.recompute_modules, " ")));
    }
  }
  if (r.choice.offload_modules != 0 && open("--offload-modules")) {
    o.offload_modules = offload_module_names(r.choice.offload_modules);
    fixed.push_back(fmt::format("--offload-modules {}", fmt::join(o.offload_modules, " ")));
  }
  if (r.choice.optimizer_offload > 0 && open("--optimizer-offload")) {
    o.optimizer_offload = r.choice.optimizer_offload;
    fixed.push_back(fmt::format("--optimizer-offload {}", r.choice.optimizer_offload));
  }
  set("--precision", o.precision, precision_name(r.choice.precision));
  if (r.choice.precision == Precision::kFp8 && open("--fp8-recipe") && open("--precision")) {
    o.fp8_recipe = fp8_recipe_name(r.choice.fp8_recipe);
    fixed.push_back(fmt::format("--fp8-recipe {}", *o.fp8_recipe));
  }
  if (open("--zero")) {
    o.zero = r.choice.zero_stage;
    fixed.push_back(fmt::format("--zero {}", r.choice.zero_stage));
  }
  set("--grad-reduce", o.grad_reduce, r.choice.dp_bf16_compression ? "bf16" : "fp32");
  // Megatron's precision-aware optimizer with its types (the option names the moments alone).
  if (open("--adam-moments")) {
    o.adam = r.choice.adam;
    if (r.choice.adam.precision_aware) {
      std::string types = state_dtype_name(r.choice.adam.exp_avg);
      if (r.choice.adam.exp_avg_sq != r.choice.adam.exp_avg)
        types += fmt::format(" (exp_avg_sq {})", state_dtype_name(r.choice.adam.exp_avg_sq));
      if (r.choice.adam.main_params != StateDtype::kFp32)
        types += fmt::format(" (master weights {})", state_dtype_name(r.choice.adam.main_params));
      fixed.push_back("--adam-moments " + types);
    }
  }
  // Megatron's all-gather dispatcher with both EP and expert TP is not priced as such.
  megascale::Dispatcher dispatcher = r.choice.dispatcher;
  if (m.is_moe() &&
      !megascale::dispatcher_priced(dispatcher, p.ep.value_or(1), p.etp.value_or(1))) {
    reading.notes.push_back(
        fmt::format("--moe-token-dispatcher-type {} with ep {} and etp {}: "
                    "priced as alltoall",
                    megascale::dispatcher_name(dispatcher), p.ep.value_or(1), p.etp.value_or(1)));
    dispatcher = megascale::Dispatcher::kAllToAll;
  }
  if (m.is_moe()) set("--dispatcher", o.dispatcher, megascale::dispatcher_name(dispatcher));
  set("--overlap", o.overlap, r.choice.overlap ? "on" : "off");
  set("--intra-overlap", o.intra_overlap, "off");
  if (m.is_moe()) set("--permute-fusion", o.permute_fusion, r.choice.permute_fusion ? "on" : "off");
  set("--attention-kernel", o.attention_kernel, attention_kernel_name(r.choice.attention_kernel));
  set("--cross-entropy", o.cross_entropy, cross_entropy_name(r.choice.cross_entropy));
  set("--cuda-graph", o.cuda_graph, cuda_graph_name(r.choice.cuda_graph));
  set("--schedule", o.schedule, "1f1b");
  // The launch is Megatron's: no MegaScale-MoE or MemFine mechanism, unless the command line
  // asks for one of MegaScale-MoE's beside it.
  if (open("--intra-overlap") && !(o.recompute == "sar" && !open("--recompute")))
    o.megatron_only = true;
  reading.fixed =
      fmt::format("{}{}{}", o.parallel, fixed.empty() ? "" : " ", fmt::join(fixed, " "));
  o.megatron = std::move(reading);
}

SearchRequest search_request(const PlanOptions& o, const ModelSpec& m, const ClusterSpec& c) {
  SearchRequest req;
  req.num_gpus = o.gpus.value_or(c.num_gpus());
  if (req.num_gpus > c.num_gpus()) {
    throw InputError(
        "--gpus", "",
        fmt::format("{} GPUs asked, cluster {} has {}", req.num_gpus, c.name, c.num_gpus()));
  }
  req.global_batch = o.global_batch;
  req.fixed = parse_parallel(o.parallel);
  // A Megatron launch without uneven stages or a layout splits its layers evenly.
  req.even_split =
      o.megatron && !req.fixed.pp_first && !req.fixed.pp_last && req.fixed.layout.empty();
  if (req.fixed.gbs && *req.fixed.gbs != o.global_batch) {
    throw InputError(
        "--parallel", "gbs",
        fmt::format("gbs={} contradicts --global-batch {}", *req.fixed.gbs, o.global_batch));
  }
  req.objective = parse_objective(o.objective);
  // What counts joules or watts needs the board's draw.
  auto need_power_entry = [&](const char* option, const char* what) {
    if (!(c.node.gpu.power.limit_w > 0))
      throw InputError(option, "",
                       fmt::format("{} needs the GPUs' power entry (node.gpu.power: limit_W, "
                                   "idle_W, busy_W, sustained_rate) in cluster {}'s file",
                                   what, c.name));
  };
  if (req.objective == Objective::kEnergy) {
    need_power_entry("--objective", "energy");
    // A cap on the command line is the user's; without one the search weighs caps below the
    // board's limit.
    if (!o.power_limit_w) req.power_caps = energy_power_caps(c.node.gpu.power);
  }
  if (o.power_budget_kw) {
    if (req.objective != Objective::kThroughput)
      throw InputError("--power-budget-kW", "",
                       "ranks cluster sizes by throughput under the budget: drop --objective");
    if (o.power_limit_w)
      throw InputError("--power-budget-kW", "",
                       "caps each board at its share of the budget: drop --power-limit");
    need_power_entry("--power-budget-kW", "a power budget");
  }
  if (req.objective != Objective::kEnergy && o.max_slowdown_percent) {
    throw InputError("--max-slowdown", "",
                     "bounds the energy objective's time: add --objective energy");
  }
  req.top_k = o.top;
  req.alpha = o.alpha;
  req.threads = o.threads;
  req.zero = o.zero;
  req.dp_bf16_compression = parse_grad_reduce(o.grad_reduce, "--grad-reduce", true);
  req.adam = o.adam.value_or(AdamStates{});
  if (!o.adam_moments.empty()) {
    const StateDtype d = *named("--adam-moments", o.adam_moments, state_dtype_names(), false, "");
    req.adam = adam_states_for(d);
  }
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
  req.cross_entropy = parse_cross_entropy(o.cross_entropy, "--cross-entropy");
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
    require_mxfp8_runs(c.node.gpu, req.fp8_recipe, o.cluster, "--fp8-recipe", "");
  }
  if (const std::string problem = adam_states_problem(req); !problem.empty()) {
    // The option the user gave that Megatron refuses: plain DDP under what needs more, else
    // the Adam states, else the offload.
    const char* option = req.zero == 0              ? "--zero"
                         : req.adam.precision_aware ? "--adam-moments"
                                                    : "--optimizer-offload";
    throw InputError(option, "", problem);
  }
  return req;
}

}  // namespace moe::cli
