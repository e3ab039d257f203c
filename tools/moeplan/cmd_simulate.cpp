// moeplan simulate: run a saved plan's training iterations operator by operator through the
// discrete-event simulator and put the result beside the planner's prediction.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/offload.h"
#include "planner/power_limit.h"
#include "planner/search.h"
#include "planner/time_model.h"
#include "simulator/offload_sim.h"
#include "simulator/training_sim.h"
#include "tools/moeplan/chrome_trace.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/simulate_report.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct SimulateOptions {
  std::string model, cluster, plan, calibration, skew = "balanced", trace, measured_log;
  int64_t iterations = 1;
  uint64_t seed = 1;
  std::optional<double> static_override_gb;
  std::optional<double> power_limit_w;
  double alpha = 1.0;
  bool json = false;
  bool comm_priorities = false;
  bool every_gpu = false;
  std::optional<std::string> pxn;  // with --every-gpu only; NCCL's default (on) when unset
  // Unset: the plan file's (switches.predictor_accuracy, ...; absent there: 1, 1, 0).
  std::optional<double> predictor_accuracy, historical_accuracy;
  std::optional<int64_t> load_window;
  std::set<std::string> given;  // the flags on the command line
};

// Flags that only one of the two simulators reads: given to the other, they are an error
// rather than silently ignored.
const char* const kResidentOnly[] = {"--iterations",      "--seed",        "--static-override",
                                     "--comm-priorities", "--every-gpu",   "--pxn",
                                     "--alpha",           "--measured-log"};
const char* const kOffloadOnly[] = {"--predictor-accuracy", "--load-window",
                                    "--historical-accuracy"};

// An APTMoE offload plan: simulated as planned, beside the two baselines the paper compares.
void run_offload(const SimulateOptions& o, const ModelSpec& m, const ClusterSpec& c,
                 const PlanChoice& choice, const TimeContext& ctx) {
  if (choice.offload_gpus < 1 || choice.offload_gpus > c.num_gpus()) {
    throw InputError(
        o.plan, "/offload_gpus",
        fmt::format("{} GPUs; cluster {} has {}", choice.offload_gpus, c.name, c.num_gpus()));
  }
  const OffloadEstimate predicted =
      estimate_offload(ctx, c, choice.offload_gpus, *choice.parallel.pp, *choice.parallel.mbs,
                       *choice.parallel.gbs, choice.precision, 1.0);
  nlohmann::json systems = nlohmann::json::object();
  Table t({"system", "iteration", "tokens/s", "vs Mobius", "GPU busy", "H2D busy", "CPU busy"});
  std::map<OffloadSystem, sim::OffloadReport> reports;
  for (OffloadSystem s :
       {OffloadSystem::kAptMoe, OffloadSystem::kMobius, OffloadSystem::kGPipeOffload}) {
    sim::OffloadRun run = sim::offload_run(choice, s);
    run.record_trace = !o.trace.empty() && s == OffloadSystem::kAptMoe;
    run.predictor_accuracy = o.predictor_accuracy.value_or(run.predictor_accuracy);
    run.load_window = o.load_window.value_or(run.load_window);
    run.historical_accuracy = o.historical_accuracy.value_or(run.historical_accuracy);
    reports[s] = sim::simulate_offload(ctx, c, run);
  }
  if (!o.trace.empty()) {
    io::write_file_atomically(o.trace, chrome_trace(reports[OffloadSystem::kAptMoe]).dump() + "\n");
  }
  const double mobius = reports[OffloadSystem::kMobius].tokens_per_second;
  for (const auto& [s, r] : reports) {
    auto mean = [&](const std::vector<Seconds>& v) {
      Seconds sum;
      for (Seconds x : v) sum += x;
      return sum / static_cast<double>(v.size()) / r.iteration;
    };
    t.add({offload_system_name(s), as_ms(r.iteration.value()),
           fmt::format("{:.0f}", r.tokens_per_second),
           fmt::format("{:+.1f} %", 100.0 * (r.tokens_per_second / mobius - 1.0)),
           fmt::format("{:.1f} %", 100 * mean(r.gpu_busy)),
           fmt::format("{:.1f} %", 100 * mean(r.h2d_busy)),
           fmt::format("{:.1f} %", 100 * mean(r.cpu_busy))});
    systems[offload_system_name(s)] = {{"iteration_s", r.iteration.value()},
                                       {"tokens_per_s", r.tokens_per_second},
                                       {"events", r.events}};
  }
  const sim::OffloadReport& apt = reports[OffloadSystem::kAptMoe];
  const double error = apt.iteration / predicted.time.iteration - 1.0;
  if (o.json) {
    print_json({{"model", m.name},
                {"plan", fmt::format("APTMoE offload, {} stages on {} GPUs", *choice.parallel.pp,
                                     choice.offload_gpus)},
                {"routing", ctx.skew.describe()},
                {"simulated_iteration_s", apt.iteration.value()},
                {"predicted_iteration_s", predicted.time.iteration.value()},
                {"relative_difference", error},
                {"systems", systems}});
    return;
  }
  fmt::print("{} on {}: APTMoE offload, {} stages on {} GPUs, global batch {}, routing {}\n\n",
             m.name, c.name, *choice.parallel.pp, choice.offload_gpus, *choice.parallel.gbs,
             ctx.skew.describe());
  fmt::print("{}", t.render());
  fmt::print("APTMoE: planner (closed form) {}, simulator {} ({:+.2f} %)\n",
             as_ms(predicted.time.iteration.value()), as_ms(apt.iteration.value()), 100 * error);
  if (!o.trace.empty())
    fmt::print("APTMoE trace written to {} (open in Perfetto or chrome://tracing)\n", o.trace);
}

void run_simulate(const SimulateOptions& o) {
  const bool pxn = !o.pxn || *parse_on_off(*o.pxn, "--pxn", false);
  if (o.pxn && !o.every_gpu)
    throw InputError("--pxn", "", "routes the every-GPU simulation's traffic: add --every-gpu");
  const ModelSpec m = io::load_model(o.model);
  const nlohmann::json saved = io::read_json_file(o.plan);  // read once: choice and model
  // The cap the plan was priced under, unless the command line sets another; a cluster without
  // a power entry has none to take.
  ClusterSpec c = io::load_cluster(o.cluster);
  const std::optional<double> planned_cap = io::planned_power_limit(saved, o.plan);
  if (o.power_limit_w || (planned_cap && c.node.gpu.power.limit_w > 0))
    c = capped(std::move(c), o.power_limit_w ? o.power_limit_w : planned_cap);
  PlanChoice choice = io::plan_choice_from_json(saved, o.plan);
  if (choice.precision == Precision::kFp8)
    require_mxfp8_runs(c.node.gpu, choice.fp8_recipe, o.cluster, o.plan, "switches.fp8_recipe");
  if (o.power_limit_w) choice.power_cap_w = 0;  // the command line's cap replaces the plan's
  const sim::RoutingSpec routing = sim::parse_routing_spec(o.skew);
  const CalibrationIn cal = calibration_from(o.calibration);
  const TimeContext ctx =
      make_time_context(m, c, cal.efficiencies, skew_for(routing.skew, m), choice.seq_len);
  if (choice.offload) {
    if (routing.dynamics.drift_iterations > 0 || routing.dynamics.jitter > 0)
      throw InputError("--skew", "", "drift and jitter apply to GPU-resident plans only");
    for (const char* flag : kResidentOnly) {
      if (o.given.count(flag) > 0)
        throw InputError(flag, "",
                         "applies to GPU-resident plans; this is an APTMoE offload plan (simulated "
                         "as one steady-state iteration)");
    }
    warn_if_planned_for_another(o.plan, io::planned_model(saved), m);
    warn_about_calibration(cal, c);
    run_offload(o, m, c, choice, ctx);
    return;
  }
  for (const char* flag : kOffloadOnly) {
    if (o.given.count(flag) > 0)
      throw InputError(flag, "", "applies to offload plans; this plan is GPU-resident");
  }
  check_plan_layout(choice, m, c, o.plan);
  warn_if_planned_for_another(o.plan, io::planned_model(saved), m);
  if (o.iterations < 1)
    throw InputError("--iterations", "", fmt::format("{} must be at least 1", o.iterations));
  warn_about_calibration(cal, c);

  sim::TrainingOptions opt;
  opt.iterations = o.iterations;
  opt.seed = o.seed;
  opt.dynamics = routing.dynamics;
  if (o.static_override_gb) opt.static_override = gigabytes(*o.static_override_gb);
  // The budget the plan was sized to, unless the command line sets another.
  opt.alpha = o.given.count("--alpha") > 0 ? o.alpha : io::planned_alpha(saved, o.plan);
  // Priced as the search prices it: MACT's chunk count per stage from the memory at this budget,
  // at the clock this cluster's power limit leaves the plan under these curves (the plan file's
  // compute_clock is what the planner derived where it planned), which the simulator runs at.
  const PlanScore scored =
      score_plan(ctx, choice, c.node.gpu.hbm_capacity, opt.alpha, opt.static_override);
  const TimeBreakdown& predicted = scored.time;
  choice.compute_clock = scored.compute_clock;
  opt.record_trace = !o.trace.empty();
  opt.comm_priorities = o.comm_priorities;
  opt.every_gpu = o.every_gpu;
  opt.pxn = pxn;
  const auto wall_start = std::chrono::steady_clock::now();
  auto seconds_since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  };
  const bool tty = isatty(fileno(stderr)) != 0;
  int64_t iterations_done = 0;
  if (tty && !o.json) {
    opt.on_progress = [&](double share) {
      fmt::print(stderr, "\rsimulating: iteration {}/{}, {:3.0f} %          ", iterations_done + 1,
                 o.iterations, 100.0 * share);
    };
    opt.on_iteration = [&](int64_t done, int64_t total) {
      iterations_done = done;
      const double left =
          seconds_since_start() / static_cast<double>(done) * static_cast<double>(total - done);
      if (done < total)
        fmt::print(stderr, "\rsimulating: iteration {}/{} done, ~{:.0f} s left ", done, total,
                   left);
    };
  }
  const LoggedIterations measured = logged_iterations(o.measured_log);
  const sim::TrainingReport r = sim::simulate_training(ctx, c, choice, opt);
  if (opt.on_iteration) fmt::print(stderr, "\r{:50}\r", "");
  const double wall = seconds_since_start();
  if (!o.trace.empty()) io::write_file_atomically(o.trace, chrome_trace(r).dump() + "\n");
  const sim::RoutingGenerator generator(m, ctx.skew, routing.dynamics, o.seed);
  const SimulatedRun run{m,
                         c,
                         ctx,
                         choice,
                         r,
                         predicted,
                         generator.describe(),
                         o.seed,
                         o.iterations,
                         o.every_gpu,
                         opt.pxn,
                         opt.alpha,
                         wall,
                         o.trace,
                         measured.typical_ms,
                         measured.count};
  if (o.json)
    print_simulation_json(run);
  else
    print_simulation_text(run);
}

}  // namespace

void add_simulate(CommandLine& cli) {
  auto o = std::make_shared<SimulateOptions>();
  Subcommand cmd = cli.subcommand(
      "simulate", "Simulate a saved plan's iterations operator by operator beside the prediction");
  cmd.option("--model", o->model, "model file").required();
  cmd.option("--cluster", o->cluster, "cluster file").required();
  cmd.option("--plan", o->plan, "plan file from `moeplan plan --save`").required();
  cmd.option("--calibration", o->calibration, "calibration file with efficiency curves");
  cmd.option("--power-limit", o->power_limit_w,
             "cap the GPUs' power at W watts (a GPU with a node.gpu.power entry)")
      .positive();
  cmd.option("--iterations", o->iterations, "training iterations to simulate (default 1)");
  cmd.option("--seed", o->seed, "seed of the routing noise (default 1)").non_negative();
  cmd.option("--skew", o->skew,
             "routing: balanced | capacity=F | G=x | worst | popularity file (.json), "
             "optionally with ,drift=T (skew grows with depth, settles over T iterations) "
             "and ,jitter=x (per-iteration noise)");
  cmd.option("--static-override", o->static_override_gb,
             "measured static memory per GPU in GB (MemFine Table 4)")
      .positive();
  cmd.option("--alpha", o->alpha,
             "share of GPU memory training plans to use (MemFine eq. 3; default: the plan "
             "file's, from plan --alpha, else 1): an "
             "allocation past it that still fits the GPU stalls for a caching-allocator retry "
             "(calibration constant allocator_retry_us); past the GPU it is out of memory")
      .range(0.01, 1.0);
  cmd.flag("--comm-priorities", o->comm_priorities,
           "serve shared links by MoNTA's priorities (EP and TP, then PP, CP, DP) instead of "
           "sharing them fairly");
  cmd.flag("--every-gpu", o->every_gpu,
           "simulate every GPU (its own links, memory and EP rank's tokens; collectives wait "
           "for their group) instead of one representative per pipeline stage; the trace "
           "shows each stage's first GPU");
  cmd.option("--pxn", o->pxn,
             "with --every-gpu: all-to-all across nodes goes through the NIC on the "
             "receiver's rail, reached over NVLink, as NCCL's PXN does: on (default, as "
             "NCCL) | off (NCCL_PXN_DISABLE=1: each GPU's own NIC)");
  cmd.option("--trace", o->trace, "write a Chrome trace-event JSON here");
  cmd.option("--measured-log", o->measured_log,
             "the run's Megatron-LM training log: its iterations (the median past the first) "
             "beside the planner's and the simulator's");
  cmd.option(
         "--predictor-accuracy", o->predictor_accuracy,
         "offload plans: share of the GPU experts APTMoE's predictor picks ahead of the "
         "gate; the rest load on demand (default: the plan file's, else 1, an oracle; the paper: "
         "0.85 or 0.64)")
      .range(0.0, 1.0);
  cmd.option("--load-window", o->load_window,
             "offload plans: block loads APTMoE launches onto the copy stream at a time, "
             "most urgent first (a launched load is never overtaken); 0: an ideal scheduler that "
             "picks the most urgent ready load whenever the copy engine frees (default: the "
             "plan file's, else 0)")
      .range(int64_t{0}, int64_t{1} << 20);
  cmd.option("--historical-accuracy", o->historical_accuracy,
             "offload plans: share of the experts APTMoE's inter-stage phase picks right by "
             "last iteration's popularity (default: the plan file's, else 1; the paper: 73.3 % "
             "on NLLB-MoE); a wrong pick loads an unused expert before the right one")
      .range(0.0, 1.0);
  cmd.flag("--json", o->json, "print one JSON document");
  cmd.on_run([o, cmd] {
    o->given = cmd.given();
    run_simulate(*o);
  });
}

}  // namespace moe::cli
