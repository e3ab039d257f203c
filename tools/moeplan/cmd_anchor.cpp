// moeplan anchor: fits the time model to one measured iteration of a plan the user runs (the
// "elapsed time per iteration (ms)" of Megatron-LM's log) and writes the calibration file that
// carries the fit, so plan, simulate and whatif predict other layouts relative to that run.
#include <fmt/format.h>

#include "planner/anchor.h"
#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/megatron_flops.h"
#include "planner/time_model.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct AnchorOptions {
  std::string model, cluster, plan, calibration, out, skew = "balanced", scope = "all",
                                                      measured_log;
  double measured_ms = 0, measured_tflops = 0;
  bool json = false;
};

// The scaled efficiencies as a calibration file: the planner's curves and constants, and
// whatever else the base file carried (CPU and PCIe curves for affinity) unchanged.
io::Calibration anchored_calibration(const io::Calibration& base, const Efficiencies& e) {
  io::Calibration out = base;
  for (auto& [name, curve] : curves_of(e)) out.curves.insert_or_assign(name, std::move(curve));
  for (const auto& [name, value] : constants_of(e)) out.constants[name] = value;
  return out;
}

void run_anchor(const AnchorOptions& o) {
  const bool communication =
      *named<bool>("--scope", o.scope, {{"all", true}, {"compute", false}}, false);
  const ModelSpec m = io::load_model(o.model);
  const ClusterSpec c = io::load_cluster(o.cluster);
  const nlohmann::json saved = io::read_json_file(o.plan);  // read once: choice and model
  const PlanChoice choice = io::plan_choice_from_json(saved, o.plan);
  if (choice.offload)
    throw InputError(o.plan, "/switches/offload",
                     "anchor fits GPU-resident plans; an offload plan's CPU and PCIe rates come "
                     "from calibrate --only cpu,pcie");
  check_plan_layout(choice, m, c, o.plan);
  warn_if_planned_for_another(o.plan, io::planned_model(saved), m);
  const io::Calibration base =
      o.calibration.empty() ? io::Calibration{} : io::load_calibration(o.calibration);
  const TimeContext ctx = make_time_context(m, c, efficiencies(base.curves, base.constants),
                                            skew_for(o.skew, m), choice.seq_len);
  // A training log's iterations: the median past the first (planner/io/megatron_args.h).
  const double log_ms = logged_iterations(o.measured_log).typical_ms.value_or(0);
  // Megatron-LM logs both numbers; its TFLOP/s/GPU is its FLOP count over time and GPUs.
  const Seconds measured =
      log_ms > 0 ? Seconds(log_ms * 1e-3)
      : o.measured_ms > 0
          ? Seconds(o.measured_ms * 1e-3)
          : Seconds(megatron_iteration_flops(m, choice.seq_len, *choice.parallel.gbs,
                                             *choice.parallel.tp)
                        .value() /
                    (o.measured_tflops * 1e12 * static_cast<double>(choice.gpus())));
  const double measured_ms = measured.value() * 1e3;
  const AnchorFit fit = fit_anchor(ctx, choice, measured, communication);
  if (!fit.converged) {
    throw InputError("--measured-ms", "",
                     fmt::format("{:.1f} ms is out of reach: scaling every efficiency by {:.3f} "
                                 "gives {:.1f} ms (curves cap at 1.5, fused attention and "
                                 "memory-bound kernels at 1)",
                                 measured_ms, fit.scale, fit.after.value() * 1e3));
  }
  io::Calibration out =
      anchored_calibration(base, scale_efficiencies(ctx.eff, fit.scale, communication));
  out.provenance = {
      {"tool", "moeplan anchor"},
      {"model", m.name},
      {"cluster", c.name},
      {"plan", choice.describe()},
      {"measured_iteration_ms", measured_ms},
      {"predicted_before_ms", fit.before.value() * 1e3},
      {"scale", fit.scale},
      {"compute_clock", fit.compute_clock},
      {"scope", o.scope},
      {"base_calibration", o.calibration.empty() ? "built-in defaults" : o.calibration}};
  io::write_file_atomically(o.out, io::calibration_to_json(out).dump(2) + "\n");
  if (o.json) {
    print_json({{"scale", fit.scale},
                {"compute_clock", fit.compute_clock},
                {"scope", o.scope},
                {"predicted_before_s", fit.before.value()},
                {"measured_s", measured.value()},
                {"predicted_after_s", fit.after.value()},
                {"out", o.out}});
    return;
  }
  fmt::print("{} on {}: {}\n", m.name, c.name, choice.describe());
  fmt::print("measured {:.1f} ms per iteration; moeplan predicted {:.1f} ms ({:+.1f} %)\n",
             measured_ms, fit.before.value() * 1e3, 100 * (fit.before / measured - 1.0));
  fmt::print("{} efficiencies scaled by {:.3f}: the plan now predicts {:.1f} ms{}\n",
             communication ? "every (compute and communication)" : "compute", fit.scale,
             fit.after.value() * 1e3,
             fit.compute_clock < 1
                 ? fmt::format(", its GEMMs at {:.2f} of full clock under the GPUs' power limit",
                               fit.compute_clock)
                 : "");
  fmt::print("written to {}; plan, simulate and whatif read it with --calibration\n", o.out);
}

}  // namespace

void add_anchor(CommandLine& cli) {
  auto o = std::make_shared<AnchorOptions>();
  Subcommand cmd = cli.subcommand(
      "anchor",
      "Fit the time model to one measured iteration of a plan and write the calibration file");
  cmd.option("--model", o->model, "model file").required();
  cmd.option("--cluster", o->cluster, "cluster file").required();
  cmd.option("--plan", o->plan, "the plan that ran (moeplan-plan/1)").required();
  Flag ms =
      cmd.option("--measured-ms", o->measured_ms,
                 "its measured iteration time in ms (Megatron-LM: elapsed time per iteration)")
          .positive();
  Flag tflops = cmd.option("--measured-tflops", o->measured_tflops,
                           "or the throughput per GPU (TFLOP/s/GPU) Megatron-LM logged for it")
                    .positive();
  Flag log = cmd.option("--measured-log", o->measured_log,
                        "or the Megatron-LM training log of the run: the median of its 'elapsed "
                        "time per iteration (ms)' past the first");
  ms.excludes(tflops);
  log.excludes(ms);
  log.excludes(tflops);
  cmd.on_run([o, ms, tflops, log] {
    if (!ms.given() && !tflops.given() && !log.given())
      throw InputError("--measured-ms", "",
                       "give the measured iteration (or --measured-tflops, --measured-log)");
    run_anchor(*o);
  });
  cmd.option("--out", o->out, "calibration file to write").required();
  cmd.option("--scope", o->scope,
             "what the fit scales: all (compute and communication efficiencies, default) | "
             "compute (keep measured collective curves)");
  cmd.option("--calibration", o->calibration, "start from this calibration file");
  cmd.option("--skew", o->skew, "routing skew of the run (as plan --skew)");
  cmd.flag("--json", o->json, "print one JSON document");
}

}  // namespace moe::cli
