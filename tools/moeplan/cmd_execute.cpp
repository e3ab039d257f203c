// moeplan execute: run a saved plan's MoE layer on this machine's GPU, MemFine-style in c chunks
// with chunked recompute, and print the cost model's prediction beside what the GPU measured,
// per operator and in total, with the peak memory the allocator saw.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <sstream>

#include "calibrate/layer_device.h"
#include "calibrate/moe_layer_execute.h"
#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/offload.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct ExecuteCliOptions {
  std::string model, cluster, plan, calibration, skew = "balanced", json, chunks = "1,2,4,8",
                                                 nccl_id_file;
  int64_t layer = -1;
  int repeats = 5, device = 0, threads = 0;
  bool predict_only = false;  // the case and the prediction, without a GPU
  uint32_t seed = 1;
};

std::vector<int64_t> chunk_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    const std::optional<int64_t> v = positive_integer(item);
    if (!v)
      throw InputError("--chunks", "", fmt::format("'{}' is not a positive chunk count", item));
    out.push_back(*v);
  }
  if (out.empty()) throw InputError("--chunks", "", "no chunk count given");
  return out;
}

std::string error_pct(double predicted, double measured) {
  return measured > 0 ? fmt::format("{:+.1f} %", 100.0 * (predicted - measured) / measured) : "-";
}

// `measured`: false under --predict-only, whose runs carry no measurement.
nlohmann::json to_json(const calibrate::LayerExecution& e, const PlanChoice& choice, int64_t layer,
                       bool measured) {
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& r : e.runs) {
    nlohmann::json ops = nlohmann::json::array();
    for (int op = 0; op < calibrate::kLayerOps; ++op) {
      const size_t i = static_cast<size_t>(op);
      ops.push_back({{"op", calibrate::layer_op_name(static_cast<calibrate::LayerOp>(op))},
                     {"predicted_s", r.predicted.seconds[i]}});
      if (measured) ops.back()["measured_s"] = r.measured.seconds[i];
    }
    runs.push_back({{"chunks", r.chunks},
                    {"predicted_s", r.predicted.total_seconds},
                    {"memfine_peak_bytes", r.predicted.memfine_peak_bytes},
                    {"buffer_peak_bytes", r.predicted.buffer_peak_bytes},
                    {"operators", ops}});
    if (measured) {
      runs.back()["measured_s"] = r.measured.total_seconds;
      runs.back()["measured_peak_bytes"] = r.measured.peak_bytes;
    }
  }
  const auto& c = e.layer;
  return {{"schema", "moeplan-execute/1"},
          {"device", e.device},
          {"plan", choice.describe()},
          {"layer", layer},
          {"case",
           {{"hidden", c.hidden},
            {"ffn", c.ffn},
            {"gated", c.gated},
            {"top_k", c.top_k},
            {"tokens", c.tokens},
            {"expert_rows", c.expert_rows}}},
          {"check_relative_error", e.check_error},
          {"runs", runs}};
}

// An APTMoE offload plan: the layer's eq. (1) split over a stage's tokens (all its micro-batches
// at once), run forward beside loading every expert. The GPU runs BF16, so the split is the one
// a BF16 plan makes whatever the plan's precision.
void execute_offload(const ExecuteCliOptions& o, const ModelSpec& m, const ClusterSpec& cl,
                     const PlanChoice& choice, const TimeContext& ctx, int64_t layer) {
  calibrate::check_moe_layer(m, layer);
  const aptmoe::Rates rates = offload_rates(ctx, cl, choice.offload_gpus, Precision::kBf16);
  const double tokens = offload_pass_tokens(choice.parallel.gbs.value_or(1),
                                            choice.parallel.mbs.value_or(1), choice.seq_len);
  const aptmoe::Allocation a =
      offload_allocation(ctx, rates, layer, aptmoe::Pass::kForward, tokens, Precision::kBf16);
  const nlohmann::json execution =
      execute_affinity(calibrate::affinity_case(m, a), o.device, o.threads, o.repeats);
  fmt::print("{} layer {}, APTMoE offload plan ({} tokens per stage pass):\n", m.name, layer,
             tokens);
  print_affinity_execution(execution, o.device);
  if (!o.json.empty()) {
    io::write_file_atomically(o.json, nlohmann::json{{"schema", "moeplan-execute/1"},
                                                     {"plan", choice.describe()},
                                                     {"layer", layer},
                                                     {"aptmoe", execution}}
                                              .dump(2) +
                                          "\n");
    fmt::print("written to {}\n", o.json);
  }
}

// Launched as several ranks: MoNTA's strategies for the plan's expert all-to-all (experts
// tensor-parallel over etp, exchanged over ep), one rank per GPU of that etp x ep group.
void execute_monta_plan(const ExecuteCliOptions& o, const PlanChoice& choice,
                        const TimeContext& ctx) {
  const int64_t etp = choice.parallel.etp.value_or(1), ep = choice.parallel.ep.value_or(1);
  if (etp < 2 || ep < 2) {
    throw InputError(o.plan, "/parallel",
                     fmt::format("several ranks run MoNTA's expert all-to-all, which needs etp > 1 "
                                 "and ep > 1; the plan has etp={}, ep={}",
                                 etp, ep));
  }
  const monta::Problem p = expert_alltoall_problem(ctx, choice);
  const monta::ChunkChoice o2 = monta::best_chunking(p, monta::Pipelining::kO2);
  const monta::ChunkChoice o3 = monta::best_chunking(p, monta::Pipelining::kO3);
  const auto rows = execute_monta(p, o2, o3, o.nccl_id_file, o.repeats, o.plan + ": /parallel");
  if (!rows) return;  // ranks other than 0 print nothing
  fmt::print("MoNTA's expert all-to-all of {:.1f} MiB per rank, etp={} ep={} (plan: {}):",
             p.volume.value() / kMebi, etp, ep, monta::strategy_name(choice.alltoall));
  print_monta_execution(*rows, monta::select_strategy(monta::o1_time(p), o2.time, o3.time));
  if (!o.json.empty()) {
    const nlohmann::json j = {{"schema", "moeplan-execute/1"},
                              {"plan", choice.describe()},
                              {"monta", monta_execution_json(*rows)}};
    io::write_file_atomically(o.json, j.dump(2) + "\n");
    fmt::print("written to {}\n", o.json);
  }
}

void run_execute(const ExecuteCliOptions& o) {
  const ModelSpec m = io::load_model(o.model);
  const ClusterSpec cl = io::load_cluster(o.cluster);
  const PlanChoice choice = io::load_plan_choice(o.plan);
  if (!choice.offload) {
    try {
      check(choice.parallel, m);
    } catch (const ConfigError& e) {
      throw InputError(o.plan, "/parallel", e.what());
    }
  }
  if (o.repeats < 1)
    throw InputError("--repeats", "", fmt::format("{} must be at least 1", o.repeats));
  int64_t layer = o.layer;
  if (layer < 0) {
    for (layer = 0; layer < m.num_layers && !m.moe_layer[static_cast<size_t>(layer)];) ++layer;
  }
  const CalibrationIn cal = calibration_from(o.calibration);
  const TimeContext ctx =
      make_time_context(m, cl, cal.efficiencies, skew_for(o.skew, m), choice.seq_len);
  warn_about_calibration(cal, cl);
  if (choice.offload) {
    execute_offload(o, m, cl, choice, ctx, layer);
    return;
  }
  if (launcher_world().size > 1) {
    execute_monta_plan(o, choice, ctx);
    return;
  }
  calibrate::ExecuteOptions opt;
  opt.chunks = chunk_list(o.chunks);
  opt.repeats = o.repeats;
  opt.seed = o.seed;
  const calibrate::MoeLayerCase c = calibrate::layer_case_of(ctx, choice, layer);
  calibrate::LayerExecution e;
  if (o.predict_only) {
    e.device = "no device (--predict-only)";
    e.layer = c;
    for (int64_t chunks : opt.chunks) {
      calibrate::ChunkExecution r;
      r.chunks = chunks;
      r.predicted = calibrate::predict_layer(ctx, c, calibrate::route_in_chunks(c, chunks, o.seed));
      e.runs.push_back(r);
    }
  } else {
    // The GPU last: every input error above is reported on any machine.
    std::unique_ptr<calibrate::LayerDevice> gpu = calibrate::make_gpu_layer_device(o.device);
    const bool tty = isatty(fileno(stderr)) != 0;
    e = calibrate::execute_layer(*gpu, ctx, c, opt, [&](size_t done, size_t all) {
      if (tty) fmt::print(stderr, "\rexecuting: {}/{} chunk counts", done, all);
    });
    if (tty) fmt::print(stderr, "\n");
  }
  fmt::print(
      "{} layer {} on {}: {} rows of {} tokens (top-{}) over {} local experts, h = {}, "
      "g = {}{}",
      m.name, layer, e.device, c.rows(), c.tokens, c.top_k, c.experts(), c.hidden, c.ffn,
      c.gated ? " (SwiGLU)" : "");
  if (!o.predict_only)
    fmt::print("; output and gradients within {:.2g} of the CPU reference", e.check_error);
  fmt::print("\n\n");
  auto measured = [&](double v, double scale_to_unit) {
    return o.predict_only ? std::string("-") : scale_to_unit > 0 ? as_gb(v) : as_ms(v);
  };
  Table totals({"chunks", "predicted", "measured", "error", "MemFine eq.2 peak", "buffers peak",
                "measured peak", "error"});
  for (const auto& r : e.runs) {
    totals.add({std::to_string(r.chunks), as_ms(r.predicted.total_seconds),
                measured(r.measured.total_seconds, 0),
                error_pct(r.predicted.total_seconds, r.measured.total_seconds),
                as_gb(r.predicted.memfine_peak_bytes), as_gb(r.predicted.buffer_peak_bytes),
                measured(r.measured.peak_bytes, 1),
                error_pct(r.predicted.buffer_peak_bytes, r.measured.peak_bytes)});
  }
  fmt::print("{}\n", totals.render());
  const auto& first = e.runs.front();
  Table ops({"operator", "predicted", "measured", "error"});
  for (int op = 0; op < calibrate::kLayerOps; ++op) {
    const size_t i = static_cast<size_t>(op);
    ops.add({calibrate::layer_op_name(static_cast<calibrate::LayerOp>(op)),
             as_ms(first.predicted.seconds[i]), measured(first.measured.seconds[i], 0),
             error_pct(first.predicted.seconds[i], first.measured.seconds[i])});
  }
  fmt::print("per operator at {} chunk{}, forward and backward:\n{}", first.chunks,
             first.chunks == 1 ? "" : "s", ops.render());
  if (!o.json.empty()) {
    io::write_file_atomically(o.json, to_json(e, choice, layer, !o.predict_only).dump(2) + "\n");
    fmt::print("written to {}\n", o.json);
  }
}

}  // namespace

void add_execute(CommandLine& cli) {
  auto o = std::make_shared<ExecuteCliOptions>();
  Subcommand cmd = cli.subcommand(
      "execute", "Run a saved plan's MoE layer on this GPU: predicted beside measured");
  cmd.option("--model", o->model, "model file").required();
  cmd.option("--cluster", o->cluster, "cluster file (the GPU peaks predictions use)").required();
  cmd.option("--plan", o->plan, "plan file from `moeplan plan --save`").required();
  cmd.option("--layer", o->layer, "model layer to run (default: the first MoE layer)");
  cmd.option("--chunks", o->chunks, "MemFine chunk counts to run (default 1,2,4,8)");
  cmd.option("--skew", o->skew,
             "routing: balanced | capacity=F | G=x | worst | popularity file (.json)");
  cmd.option("--calibration", o->calibration, "calibration file with efficiency curves");
  cmd.option("--repeats", o->repeats, "timed runs per chunk count, median kept (default 5)");
  cmd.option("--seed", o->seed, "seed of inputs, weights and routing (default 1)");
  cmd.option("--device", o->device, "CUDA device index (default 0)");
  cmd.option("--nccl-id-file", o->nccl_id_file,
             "launched as several ranks (MoNTA): where rank 0 leaves NCCL's unique id");
  cmd.option("--threads", o->threads,
             "offload plans: CPU expert threads (default: hardware threads - 1)");
  cmd.option("--json", o->json, "also write the results to this file (atomically)");
  cmd.flag("--predict-only", o->predict_only,
           "print the layer case and the prediction without running it (no GPU needed)");
  cmd.on_run([o] { run_execute(*o); });
}

}  // namespace moe::cli
