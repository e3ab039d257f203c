#include "tools/moeplan/simulate_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "planner/megatron_flops.h"
#include "planner/power_limit.h"
#include "simulator/board_power.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

std::string percent(Seconds part, Seconds whole) {
  return fmt::format("{:.1f} %", 100.0 * part.value() / whole.value());
}

// What Megatron-LM's log line prints for an iteration of length t.
double logged_tflops(const SimulatedRun& run, Seconds t) {
  const PlanChoice& choice = run.choice;
  return megatron_logged_tflops(run.model, choice.seq_len, *choice.parallel.gbs,
                                *choice.parallel.tp, choice.gpus(), t);
}

// What the GPU boards draw and the tokens trained a joule, the planner's beside the
// simulator's (planner/power_limit.h); zeros where the cluster gives no power entry.
struct BoardDraw {
  double predicted_w = 0, predicted_tokens_per_joule = 0;
  double simulated_w = 0, simulated_tokens_per_joule = 0;
};
BoardDraw board_draw(const SimulatedRun& run) {
  BoardDraw d;
  const PlanChoice& choice = run.choice;
  const sim::BoardDraw simulated = sim::simulated_board_draw(run.ctx.gpu.power, choice, run.report);
  if (!(simulated.watts > 0)) return d;
  Plan planned;
  planned.choice = choice;
  planned.score.time = run.predicted;
  planned.score.tokens_per_second =
      static_cast<double>(*choice.parallel.gbs * choice.seq_len) / run.predicted.iteration.value();
  const BoardEnergy e = board_energy(run.ctx.gpu.power, planned);
  d.predicted_w = e.watts;
  d.predicted_tokens_per_joule = e.tokens_per_joule;
  d.simulated_w = simulated.watts;
  d.simulated_tokens_per_joule = simulated.tokens_per_joule;
  return d;
}

}  // namespace

void print_simulation_json(const SimulatedRun& run) {
  const ModelSpec& m = run.model;
  const PlanChoice& choice = run.choice;
  const sim::TrainingReport& r = run.report;
  const Seconds iteration = r.mean_iteration;
  const Seconds total = iteration * static_cast<double>(run.iterations);
  const double error = iteration / run.predicted.iteration - 1.0;
  nlohmann::json stages = nlohmann::json::array();
  for (const sim::StageReport& s : r.stages) {
    nlohmann::json waited;
    for (int k = 1; k < sim::kStreams; ++k)
      waited[sim::stream_name(k)] = s.waited[k].value() / total.value();
    stages.push_back({{"compute_busy_fraction", s.compute_busy.value() / total.value()},
                      {"waited_on_communication_fraction", waited},
                      {"pipeline_wait_fraction", s.pipeline_wait.value() / total.value()},
                      {"nvlink_busy_fraction", s.nvlink_busy.value() / total.value()},
                      {"nic_busy_fraction", s.nic_busy.value() / total.value()},
                      {"static_bytes", s.static_bytes.value()},
                      {"peak_bytes", s.peak_bytes.value()},
                      {"gpus", s.gpus},
                      {"compute_busy_fraction_min", s.compute_busy_min.value() / total.value()},
                      {"compute_busy_fraction_max", s.compute_busy_max.value() / total.value()},
                      {"peak_gpu", s.peak_gpu}});
  }
  nlohmann::json ooms = nlohmann::json::array();
  for (const sim::OomEvent& e : r.ooms) {
    ooms.push_back({{"iteration", e.iteration},
                    {"stage", e.stage},
                    {"gpu", e.gpu},
                    {"layer", e.layer},
                    {"microbatch", e.microbatch},
                    {"op", e.op},
                    {"chunk", e.chunk},
                    {"chunks", e.chunks},
                    {"needed_bytes", e.needed.value()},
                    {"capacity_bytes", e.capacity.value()}});
  }
  nlohmann::json iterations = nlohmann::json::array();
  for (Seconds t : r.iteration_times) iterations.push_back(t.value());
  nlohmann::json energy;
  if (const BoardDraw d = board_draw(run); d.simulated_w > 0) {
    energy = {{"predicted_gpu_power_W", d.predicted_w},
              {"simulated_gpu_power_W", d.simulated_w},
              {"predicted_tokens_per_joule", d.predicted_tokens_per_joule},
              {"simulated_tokens_per_joule", d.simulated_tokens_per_joule}};
  }
  nlohmann::json measured;
  if (run.measured_ms)
    measured = {{"iteration_s", *run.measured_ms / 1e3},
                {"logged_iterations", run.logged_iterations},
                {"simulated_relative_difference", iteration.value() / (*run.measured_ms / 1e3) - 1},
                {"predicted_relative_difference",
                 run.predicted.iteration.value() / (*run.measured_ms / 1e3) - 1}};
  print_json({{"model", m.name},
              {"measured", measured},
              {"energy", energy},
              {"plan", choice.describe()},
              {"compute_clock", choice.compute_clock},
              {"routing", run.routing},
              {"seed", run.seed},
              {"iteration_s", iterations},
              {"simulated_iteration_s", iteration.value()},
              {"predicted_iteration_s", run.predicted.iteration.value()},
              {"relative_difference", error},
              {"tokens_per_s", r.tokens_per_second},
              {"mfu", r.mfu},
              {"tgs", r.tgs},
              {"megatron_log",
               {{"elapsed_time_per_iteration_ms", iteration.value() * 1e3},
                {"throughput_per_gpu_tflops", logged_tflops(run, iteration)}}},
              {"stages", stages},
              {"oom_count", r.oom_count},
              {"oom_events", ooms},
              {"alpha", run.alpha},
              {"allocator_retries", r.allocator_retries},
              {"fcda_chunk_histogram", r.chunk_histogram},
              {"gpus_simulated", r.gpus_simulated},
              {"collectives", r.collectives},
              {"port_flows", r.flows},
              {"nvlink_bytes", r.nvlink_bytes.value()},
              {"nic_bytes", r.nic_bytes.value()},
              {"events", r.events},
              {"tasks", r.tasks},
              {"wall_s", run.wall_s}});
}

void print_simulation_text(const SimulatedRun& run) {
  const ModelSpec& m = run.model;
  const ClusterSpec& c = run.cluster;
  const PlanChoice& choice = run.choice;
  const sim::TrainingReport& r = run.report;
  const Seconds iteration = r.mean_iteration;
  const Seconds total = iteration * static_cast<double>(run.iterations);
  const double error = iteration / run.predicted.iteration - 1.0;
  fmt::print("{} on {}: {}\n", m.name, c.name, choice.describe());
  fmt::print("routing {}; {} iteration(s), seed {}; {}{}\n\n", run.routing, run.iterations,
             run.seed,
             run.every_gpu ? fmt::format("every GPU simulated ({})", r.gpus_simulated)
                           : std::string("one representative GPU per stage"),
             choice.compute_clock < 1
                 ? fmt::format("; GEMMs and fused attention at the plan's {:.2f} of full clock "
                               "(its GPUs' power limit)",
                               choice.compute_clock)
                 : "");
  // Where the cluster gives the boards' power, what they draw and the tokens a joule.
  const BoardDraw draw = board_draw(run);
  const bool powered = draw.simulated_w > 0;
  std::vector<std::string> columns = {"",    "iteration", "tokens/s",
                                      "MFU", "TGS",       "TFLOP/s/GPU (Megatron log)"};
  if (powered) columns.insert(columns.end(), {"W a GPU", "tokens/J"});
  Table t(columns);
  auto energy = [&](std::vector<std::string> row, double watts, double per_joule) {
    if (powered)
      row.insert(row.end(), {fmt::format("{:.0f}", watts), fmt::format("{:.2f}", per_joule)});
    return row;
  };
  const double tokens = static_cast<double>(*choice.parallel.gbs * choice.seq_len);
  const PlanScore planned = [&] {
    PlanScore s;
    s.tokens_per_second = tokens / run.predicted.iteration.value();
    s.mfu = r.mfu * (iteration / run.predicted.iteration);
    s.tgs = r.tgs * (iteration / run.predicted.iteration);
    return s;
  }();
  t.add(energy({"planner (closed form)", as_ms(run.predicted.iteration.value()),
                fmt::format("{:.0f}", planned.tokens_per_second),
                fmt::format("{:.1f} %", 100 * planned.mfu), fmt::format("{:.0f}", planned.tgs),
                fmt::format("{:.1f}", logged_tflops(run, run.predicted.iteration))},
               draw.predicted_w, draw.predicted_tokens_per_joule));
  t.add(energy({fmt::format("simulator (mean of {})", run.iterations), as_ms(iteration.value()),
                fmt::format("{:.0f}", r.tokens_per_second), fmt::format("{:.1f} %", 100 * r.mfu),
                fmt::format("{:.0f}", r.tgs), fmt::format("{:.1f}", logged_tflops(run, iteration))},
               draw.simulated_w, draw.simulated_tokens_per_joule));
  // The run as its own log measured it: the same tokens over the logged time.
  if (run.measured_ms) {
    const Seconds measured(*run.measured_ms / 1e3);
    const double ratio = iteration / measured;
    std::vector<std::string> row = {
        fmt::format("measured (the log's median of {})", run.logged_iterations - 1),
        as_ms(measured.value()),
        fmt::format("{:.0f}", tokens / measured.value()),
        fmt::format("{:.1f} %", 100 * r.mfu * ratio),
        fmt::format("{:.0f}", r.tgs * ratio),
        fmt::format("{:.1f}", logged_tflops(run, measured))};
    if (powered) row.insert(row.end(), {"-", "-"});  // a log gives no power
    t.add(row);
  }
  fmt::print("{}", t.render());
  fmt::print("difference {:+.2f} %\n", 100 * error);
  if (run.measured_ms)
    fmt::print("against the measurement: planner {:+.2f} %, simulator {:+.2f} %\n",
               100 * (run.predicted.iteration.value() * 1e3 / *run.measured_ms - 1),
               100 * (iteration.value() * 1e3 / *run.measured_ms - 1));
  if (run.iterations > 1) {
    std::string list;
    for (Seconds s : r.iteration_times) list += " " + as_ms(s.value());
    fmt::print("iterations:{}\n", list);
  }
  fmt::print("\nper stage, share of the simulated time (waited: compute idle inside a pass)\n");
  // The copy streams' column only where something waited on them (MoNTA O3's D2D copies,
  // activation offloading's to and from the host).
  auto copy_wait = [](const sim::StageReport& x) {
    return x.waited[sim::kCopyStream] + x.waited[sim::kD2hStream] + x.waited[sim::kH2dStream];
  };
  const bool copies = std::any_of(r.stages.begin(), r.stages.end(), [&](const sim::StageReport& x) {
    return copy_wait(x).value() > 0;
  });
  std::vector<std::string> head = {"stage",     "compute",   "waited TP",  "waited EP",
                                   "waited CP", "waited DP", "waited host"};
  if (copies) head.push_back("waited copy");
  head.insert(head.end(), {"outside passes", "NVLink", "NIC", "peak memory"});
  Table st(head);
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const sim::StageReport& x = r.stages[s];
    std::vector<std::string> row = {std::to_string(s),
                                    percent(x.compute_busy, total),
                                    percent(x.waited[sim::kTpStream], total),
                                    percent(x.waited[sim::kEpStream], total),
                                    percent(x.waited[sim::kCpStream], total),
                                    percent(x.waited[sim::kDpStream], total),
                                    percent(x.waited[sim::kHostStream], total)};
    if (copies) row.push_back(percent(copy_wait(x), total));
    row.insert(row.end(), {percent(x.pipeline_wait, total), percent(x.nvlink_busy, total),
                           percent(x.nic_busy, total),
                           fmt::format("{} / {}", as_gb(x.peak_bytes.value()),
                                       as_gb(c.node.gpu.hbm_capacity.value()))});
    st.add(row);
  }
  fmt::print("{}", st.render());
  if (run.every_gpu) {
    // Under uneven routing the EP ranks' compute differs; the lighter ones wait at the
    // collectives for the busiest.
    Table spread({"stage", "GPUs", "compute least busy", "mean", "most busy", "peak on GPU"});
    for (size_t s = 0; s < r.stages.size(); ++s) {
      const sim::StageReport& x = r.stages[s];
      spread.add({std::to_string(s), std::to_string(x.gpus), percent(x.compute_busy_min, total),
                  percent(x.compute_busy, total), percent(x.compute_busy_max, total),
                  std::to_string(x.peak_gpu)});
    }
    fmt::print("\nper GPU within each stage\n{}", spread.render());
    const double per_iteration = 1.0 / static_cast<double>(run.iterations);
    auto volume = [&](Bytes b) {
      const double v = b.value() * per_iteration;
      return v >= 1e12 ? fmt::format("{:.2f} TB", v / 1e12) : as_gb(v);
    };
    fmt::print("collectives sent {} over NVLink and {} over NICs per iteration (PXN {})\n",
               volume(r.nvlink_bytes), volume(r.nic_bytes), run.pxn ? "on" : "off");
  }
  std::string hist;
  for (size_t k = 1; k < r.chunk_histogram.size(); ++k) {
    if (r.chunk_histogram[k] > 0) hist += fmt::format(" c={}: {}", k, r.chunk_histogram[k]);
  }
  if (!hist.empty()) fmt::print("FCDA chunks per MoE layer and iteration:{}\n", hist);
  if (r.oom_count > 0) {
    fmt::print("\nOUT OF MEMORY: {} allocation(s) past the GPU's {}; the first:\n", r.oom_count,
               as_gb(r.ooms.front().capacity.value()));
    for (size_t i = 0; i < r.ooms.size() && i < 8; ++i) {
      const sim::OomEvent& e = r.ooms[i];
      fmt::print("  iteration {}, stage {}{}, layer {}, micro-batch {}, {} (chunk {} of {}): {}\n",
                 e.iteration, e.stage, run.every_gpu ? fmt::format(" GPU {}", e.gpu) : "", e.layer,
                 e.microbatch, e.op, e.chunk, e.chunks, as_gb(e.needed.value()));
    }
  } else {
    fmt::print("no out-of-memory event\n");
  }
  if (r.allocator_retries > 0) {
    fmt::print(
        "{} allocation(s) past alpha = {} of the GPU's memory, each stalled {} for the caching "
        "allocator to free its cache and retry (allocator_retry_us)\n",
        r.allocator_retries, run.alpha, as_ms(run.ctx.eff.allocator_retry.value()));
  }
  fmt::print("\n{} events, {} tasks in {:.2f} s ({:.0f} events/s)\n", r.events, r.tasks, run.wall_s,
             static_cast<double>(r.events) / std::max(run.wall_s, 1e-9));
  if (!run.trace.empty())
    fmt::print("trace written to {} (open in Perfetto or chrome://tracing)\n", run.trace);
}

}  // namespace moe::cli
