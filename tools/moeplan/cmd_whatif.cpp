// moeplan whatif: sweep inputs and answer with a table, a CSV and a self-contained HTML report.
// Each point re-plans (--search) or simulates a fixed plan (--plan); points run in parallel and
// points.csv is rewritten atomically after each, so --resume never recomputes a finished point.
// The points are whatif_point.h's, the files whatif_report.h's.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <thread>

#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/workers.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/whatif_point.h"
#include "tools/moeplan/whatif_report.h"

namespace moe::cli {

namespace {

void run_whatif(const WhatifOptions& given) {
  WhatifOptions o = given;
  if (o.search == !o.plan.empty())
    throw InputError("--plan", "", "give a plan file to simulate or --search to re-plan, not both");
  if (o.sweeps.empty()) throw InputError("--sweep", "", "give at least one AXIS=V1,V2,...");
  const ModelSpec m = io::load_model(o.model);
  const ClusterSpec c = io::load_cluster(o.cluster);
  std::optional<PlanChoice> fixed;
  if (!o.plan.empty()) fixed = io::load_plan_choice(o.plan);
  // A plan's points run at its own sequence length unless one is given.
  if (o.seq_len <= 0) o.seq_len = fixed ? fixed->seq_len : 4096;
  std::vector<Axis> axes;
  for (const std::string& s : o.sweeps) axes.push_back(parse_axis(s));
  if (fixed &&
      std::any_of(axes.begin(), axes.end(), [](const Axis& a) { return a.name == "gpus"; }))
    throw InputError("--sweep", "", "gpus needs --search (a fixed plan has its GPU count)");
  if (o.search &&
      std::any_of(axes.begin(), axes.end(), [](const Axis& a) { return a.name == "chunks"; }))
    throw InputError("--sweep", "", "chunks needs --plan (the search picks its own chunks)");
  // The expert axes vary a MoE model's experts; a dense one has no MoE layer to hold them.
  for (const Axis& a : axes) {
    if (!m.is_moe() && (a.name == "experts" || a.name == "expert-size" || a.name == "top-k"))
      throw InputError(
          "--sweep", a.name,
          fmt::format("{} is dense: it has no MoE layers whose experts to vary", m.name));
  }
  const GpuCatalog catalog =
      std::any_of(axes.begin(), axes.end(), [](const Axis& a) { return a.name == "gpu"; })
          ? gpu_catalog(o.cluster)
          : GpuCatalog{};
  if (o.search && o.global_batch <= 0 && std::none_of(axes.begin(), axes.end(), [](const Axis& a) {
        return a.name == "global-batch";
      }))
    throw InputError("--global-batch", "", "--search needs a global batch (or sweep it)");

  // The Cartesian product, the last axis varying fastest.
  std::vector<Point> points(1);
  for (auto a = axes.rbegin(); a != axes.rend(); ++a) {
    std::vector<Point> next;
    for (const std::string& v : a->values) {
      for (Point p : points) {
        p.at[a->name] = v;
        next.push_back(p);
      }
    }
    points = next;
  }
  const CalibrationIn cal = calibration_from(o.calibration);
  const Efficiencies& eff = cal.efficiencies;
  warn_about_calibration(cal, c);
  std::filesystem::create_directories(o.out);
  const std::string csv_path = o.out + "/points.csv";
  const std::map<std::string, PointResult> earlier =
      o.resume ? earlier_results(csv_path, axes.size()) : std::map<std::string, PointResult>{};

  std::vector<std::optional<PointResult>> results(points.size());
  std::vector<std::pair<Point, PointResult>> done_rows;
  std::mutex lock;
  std::atomic<size_t> next{0};
  size_t finished = 0, kept = 0;
  const auto start = std::chrono::steady_clock::now();
  const bool tty = isatty(fileno(stderr)) != 0;
  // Points an earlier run finished are read back from its CSV instead of recomputed.
  for (size_t i = 0; i < points.size(); ++i) {
    auto it = earlier.find(points[i].key());
    if (it == earlier.end()) continue;
    results[i] = it->second;
    ++kept;
  }
  const std::vector<bool> was_kept = [&] {
    std::vector<bool> v(points.size());
    for (size_t i = 0; i < points.size(); ++i) v[i] = results[i].has_value();
    return v;
  }();
  auto write_csv = [&] {
    std::vector<std::pair<Point, PointResult>> rows;
    for (size_t i = 0; i < points.size(); ++i)
      if (results[i]) rows.push_back({points[i], *results[i]});
    io::write_file_atomically(csv_path, points_csv(axes, rows));
  };
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  run_workers(threads, [&](int) {
    for (size_t i = next++; i < points.size(); i = next++) {
      if (was_kept[i]) continue;
      const PointResult r = evaluate(o, m, c, catalog, eff, fixed, points[i]);
      std::lock_guard<std::mutex> g(lock);
      results[i] = r;
      ++finished;
      write_csv();
      if (tty) {
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const size_t todo = points.size() - kept;
        fmt::print(stderr, "\rpoints {}/{}, ~{:.0f} s left ", finished, todo,
                   elapsed / static_cast<double>(finished) * static_cast<double>(todo - finished));
      }
    }
  });
  if (tty) fmt::print(stderr, "\r{:40}\r", "");
  write_csv();
  for (size_t i = 0; i < points.size(); ++i)
    if (results[i]) done_rows.push_back({points[i], *results[i]});
  io::write_file_atomically(o.out + "/report.html", html_report(o, m, c, axes, done_rows));

  fmt::print("{:<40} {:>14} {:>12} {:>8} {:>10} {:>9}  {}\n", "point", "iteration", "tokens/s",
             "MFU", "peak GB", "tokens/J", "status");
  for (const auto& [p, r] : done_rows) {
    if (!std::isfinite(r.iteration_s)) {  // the status says why the point has no numbers
      fmt::print("{:<40} {:>14} {:>12} {:>8} {:>10} {:>9}  {}\n", p.key(), "-", "-", "-", "-", "-",
                 r.status);
      continue;
    }
    fmt::print("{:<40} {:>12.4f} s {:>12.0f} {:>6.1f} % {:>10.2f} {:>9}  {}\n", p.key(),
               r.iteration_s, r.tokens_per_s, 100 * r.mfu, r.peak_gb,
               std::isfinite(r.tokens_per_joule) ? fmt::format("{:.2f}", r.tokens_per_joule) : "-",
               r.status);
  }
  fmt::print("{} point(s) computed, {} kept from the earlier run; {} and {}\n", finished, kept,
             csv_path, o.out + "/report.html");
  // Each point says why it has no number; a sweep where none has one is an error as a whole
  // (a plan file the model cannot run, say), not a table of blanks with exit 0.
  const bool any = std::any_of(done_rows.begin(), done_rows.end(), [](const auto& row) {
    return std::isfinite(row.second.iteration_s);
  });
  if (!done_rows.empty() && !any) {
    throw InputError(o.plan.empty() ? "--sweep" : o.plan, "",
                     fmt::format("no point of the sweep ran; {}: {}", done_rows.front().first.key(),
                                 done_rows.front().second.status));
  }
}

}  // namespace

void add_whatif(CommandLine& cli) {
  auto o = std::make_shared<WhatifOptions>();
  Subcommand cmd = cli.subcommand(
      "whatif", "Sweep model, cluster and plan fields; write points.csv and report.html");
  cmd.option("--model", o->model, "model file").required();
  cmd.option("--cluster", o->cluster, "cluster file").required();
  cmd.option("--plan", o->plan, "simulate this plan at every point");
  cmd.flag("--search", o->search, "re-plan at every point (the best plan)");
  cmd.option("--sweep", o->sweeps,
             fmt::format("AXIS=V1,V2,... (axes: {}); repeatable", whatif_axis_list()));
  cmd.option("--global-batch", o->global_batch, "global batch when not swept");
  cmd.option("--seq-len", o->seq_len,
             "sequence length when not swept (default: the plan's; 4096 with --search)")
      .positive();
  cmd.option("--skew", o->skew, "routing skew when not swept");
  cmd.option("--calibration", o->calibration,
             "calibration file (curves and constants) for every point");
  cmd.option("--threads", o->threads, "points evaluated at once (default: all cores)")
      .non_negative();
  cmd.option("--out", o->out, "directory for points.csv and report.html").required();
  cmd.flag("--resume", o->resume, "keep the points an earlier run finished");
  cmd.on_run([o] { run_whatif(*o); });
}

}  // namespace moe::cli
