// moeplan simulate: run a saved plan's training iteration through the discrete-event simulator
// and put the result beside the planner's prediction.
#include <fmt/format.h>

#include <map>

#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/time_model.h"
#include "simulator/pipeline.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct SimulateOptions {
  std::string model, cluster, plan, calibration, skew = "balanced", trace;
  bool json = false;
};

// Chrome trace-event JSON: a process per pipeline stage, a thread per lane, times in us.
nlohmann::json chrome_trace(const sim::PipelineResult& r, const Seconds tail_start,
                            const Seconds tail) {
  nlohmann::json events = nlohmann::json::array();
  std::map<std::string, int> lanes = {{"compute", 0}, {"send", 1}, {"dp+optimizer", 2}};
  for (size_t s = 0; s < r.busy.size(); ++s) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", s},
                      {"tid", 0},
                      {"args", {{"name", fmt::format("pipeline stage {}", s)}}}});
    for (const auto& [lane, tid] : lanes) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", s},
                        {"tid", tid},
                        {"args", {{"name", lane}}}});
    }
    events.push_back({{"ph", "X"},
                      {"name", "dp sync + optimizer"},
                      {"pid", s},
                      {"tid", 2},
                      {"ts", tail_start.value() * 1e6},
                      {"dur", tail.value() * 1e6}});
  }
  for (const sim::Span& sp : r.spans) {
    events.push_back({{"ph", "X"},
                      {"name", sp.name},
                      {"pid", sp.stage},
                      {"tid", lanes.at(sp.lane)},
                      {"ts", sim::to_seconds(sp.start).value() * 1e6},
                      {"dur", sim::to_seconds(sp.end - sp.start).value() * 1e6}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
}

void run_simulate(const SimulateOptions& o) {
  const ModelSpec m = io::load_model(o.model);
  const ClusterSpec c = io::load_cluster(o.cluster);
  PlanChoice choice = io::load_plan_choice(o.plan);
  if (choice.offload)
    throw InputError(o.plan, "/switches/offload", "offload plans are not simulated yet");
  try {
    check(choice.parallel, m);
  } catch (const ConfigError& e) {
    throw InputError(o.plan, "/parallel", e.what());
  }
  if (choice.parallel.world() > c.num_gpus()) {
    throw InputError(o.plan, "/parallel",
                     fmt::format("the plan needs {} GPUs; cluster {} has {}",
                                 choice.parallel.world(), c.name, c.num_gpus()));
  }
  std::map<std::string, EfficiencyCurve> curves;
  if (!o.calibration.empty()) curves = io::load_calibration(o.calibration).curves;
  const TimeContext ctx =
      make_time_context(m, c, efficiencies(curves), parse_skew(o.skew, m), choice.seq_len);
  const TimeBreakdown predicted = estimate_time(ctx, choice);

  // Leaf durations from the planner; the simulator resolves the schedule and the transfers.
  const ParallelConfig& p = choice.parallel;
  sim::PipelineSpec spec;
  for (int64_t s = 0; s < *p.pp; ++s) {
    const StageTimes st = stage_times(ctx, choice, s);
    spec.stages.push_back({sim::to_sim_time(st.forward), sim::to_sim_time(st.backward)});
  }
  spec.microbatches = predicted.microbatches;
  spec.gpipe = choice.gpipe;
  spec.chunks = *p.vpp;
  const int64_t span = *p.tp * *p.cp * *p.dp * 2;  // neighbouring stages are a stage apart
  spec.boundary_bytes = Bytes(static_cast<double>(*p.mbs * choice.seq_len * m.hidden_size) * 2.0 /
                              static_cast<double>(*p.tp * *p.cp));
  spec.boundary_bandwidth = ctx.links.bandwidth(span);
  spec.boundary_latency = sim::to_sim_time(ctx.links.latency(span));
  const sim::PipelineResult r = sim::simulate_pipeline(spec);
  // Gradient sync and the optimizer step follow the pipeline, as the planner has them.
  const Seconds pipeline = sim::to_seconds(r.makespan);
  const Seconds tail = predicted.dp_comm + predicted.optimizer;
  const Seconds iteration = pipeline + tail;
  const double error = iteration / predicted.iteration - 1.0;
  if (!o.trace.empty())
    io::write_file_atomically(o.trace, chrome_trace(r, pipeline, tail).dump() + "\n");

  if (o.json) {
    nlohmann::json busy = nlohmann::json::array();
    for (sim::SimTime b : r.busy) busy.push_back(sim::to_seconds(b).value() / iteration.value());
    print_json({{"model", m.name},
                {"plan", choice.describe()},
                {"simulated_iteration_s", iteration.value()},
                {"predicted_iteration_s", predicted.iteration.value()},
                {"relative_difference", error},
                {"pipeline_s", pipeline.value()},
                {"tokens_per_s", static_cast<double>(*p.gbs * choice.seq_len) / iteration.value()},
                {"stage_busy_fraction", busy},
                {"events", r.events}});
    return;
  }
  fmt::print("{} on {}: {}\n\n", m.name, c.name, choice.describe());
  Table t({"", "iteration", "tokens/s"});
  t.add({"planner (closed form)", fmt::format("{:.1f} ms", predicted.iteration.value() * 1e3),
         fmt::format("{:.0f}",
                     static_cast<double>(*p.gbs * choice.seq_len) / predicted.iteration.value())});
  t.add({"simulator", fmt::format("{:.1f} ms", iteration.value() * 1e3),
         fmt::format("{:.0f}", static_cast<double>(*p.gbs * choice.seq_len) / iteration.value())});
  fmt::print("{}", t.render());
  fmt::print("difference {:+.2f} % ({} micro-batches, {} events)\n\n", 100 * error,
             spec.microbatches, r.events);
  Table bt({"stage", "busy", "of iteration"});
  for (size_t s = 0; s < r.busy.size(); ++s) {
    const double busy = sim::to_seconds(r.busy[s]).value();
    bt.add({std::to_string(s), fmt::format("{:.1f} ms", busy * 1e3),
            fmt::format("{:.1f} %", 100 * busy / iteration.value())});
  }
  fmt::print("{}", bt.render());
  if (!o.trace.empty())
    fmt::print("\ntrace written to {} (open in Perfetto or chrome://tracing)\n", o.trace);
}

}  // namespace

void add_simulate(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Simulate a saved plan's iteration (pipeline schedule, transfers) beside the prediction");
  cmd->add_option("--model", o->model, "model file")->required();
  cmd->add_option("--cluster", o->cluster, "cluster file")->required();
  cmd->add_option("--plan", o->plan, "plan file from `moeplan plan --save`")->required();
  cmd->add_option("--calibration", o->calibration, "calibration file with efficiency curves");
  cmd->add_option("--skew", o->skew, "routing skew: balanced | capacity=F | G=x | worst");
  cmd->add_option("--trace", o->trace, "write a Chrome trace-event JSON here");
  cmd->add_flag("--json", o->json, "print one JSON document");
  cmd->callback([o] { run_simulate(*o); });
}

}  // namespace moe::cli
