// moeplan whatif: sweep inputs and answer with a table, a CSV and a self-contained HTML report.
// Each point re-plans (--search) or simulates a fixed plan (--plan); points run in parallel and
// points.csv is rewritten atomically after each, so --resume never recomputes a finished point.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/search.h"
#include "simulator/training_sim.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/report_format.h"
#include "tools/moeplan/svg_chart.h"

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
                                        "cpu-cores-per-gpu",
                                        "chunks",
                                        "recompute",
                                        "precision",
                                        "overlap",
                                        "intra-overlap",
                                        "attention",
                                        "attention-kernel",
                                        "permute-fusion",
                                        "zero",
                                        "tp",
                                        "pp",
                                        "ep",
                                        "etp",
                                        "cp",
                                        "vpp",
                                        "mbs"};
const std::string kAxisList = fmt::format("{}", fmt::join(kAxes, ", "));

struct WhatifOptions {
  std::string model, cluster, plan, out, skew = "balanced", calibration;
  std::vector<std::string> sweeps;
  bool search = false, resume = false;
  int64_t global_batch = 0, seq_len = 4096;
  int threads = 0;
};

struct Axis {
  std::string name;
  std::vector<std::string> values;
};

struct Point {
  std::map<std::string, std::string> at;  // axis -> value
  std::string key() const {
    std::string k;
    for (const auto& [a, v] : at) k += (k.empty() ? "" : ";") + a + "=" + v;
    return k;
  }
};

struct Result {
  static Result failed(std::string why) {
    Result r;
    r.status = std::move(why);
    return r;
  }
  std::string status = "ok";  // or why there is no number
  double iteration_s = NAN, tokens_per_s = NAN, mfu = NAN, peak_gb = NAN;
  // The iteration split: compute (recompute included), communication left exposed, pipeline
  // bubble; the rest (optimizer, offload loading) is iteration minus these.
  double compute_s = NAN, exposed_comm_s = NAN, bubble_s = NAN;
  std::string plan;
};

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

int64_t positive(const std::string& axis, const std::string& v) {
  if (const std::optional<int64_t> n = positive_integer(v)) return *n;
  throw InputError("--sweep", "", fmt::format("{}={} is not a positive integer", axis, v));
}

// GPU models by name, from the cluster files beside --cluster (the `gpu` axis).
using GpuCatalog = std::map<std::string, GpuSpec>;

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
  try {
    size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size() && x > 0 && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
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
  std::optional<int64_t> chunks;
  std::optional<Precision> precision;
  std::optional<bool> overlap, intra_overlap;
  std::optional<AttentionMode> attention;
  std::optional<AttentionKernel> attention_kernel;
  std::optional<bool> permute_fusion;
  std::optional<int> zero;
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
    if (axis == "precision") in.precision = parse_precision(v, "--sweep", axis);
    if (axis == "overlap") in.overlap = parse_on_off(v, "--sweep", false, axis);
    if (axis == "intra-overlap") in.intra_overlap = parse_on_off(v, "--sweep", false, axis);
    if (axis == "attention") in.attention = parse_attention(v, "--sweep", false, axis);
    if (axis == "attention-kernel")
      in.attention_kernel = parse_attention_kernel(v, "--sweep", axis);
    if (axis == "permute-fusion") in.permute_fusion = parse_on_off(v, "--sweep", false, axis);
    if (axis == "zero")
      in.zero = named<int>("--sweep", v, {{"0", 0}, {"1", 1}, {"2", 2}, {"3", 3}}, false, axis);
    for (const ParallelField& f : parallel_fields())
      if (axis == f.key) in.sizes.*f.member = positive(axis, v);
  }
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
  if (in.precision) plan.precision = *in.precision;
  if (in.overlap) plan.overlap = *in.overlap;
  if (in.intra_overlap) plan.intra_overlap = *in.intra_overlap;
  if (in.attention) plan.attention = *in.attention;
  if (in.attention_kernel) plan.attention_kernel = *in.attention_kernel;
  if (in.permute_fusion) plan.permute_fusion = *in.permute_fusion;
  if (in.zero) plan.zero_stage = *in.zero;
  if (in.chunks) {
    plan.fcda_chunks = *in.chunks;
    plan.mact = false;
  }
  return plan;
}

Result evaluate(const WhatifOptions& o, const ModelSpec& base, const ClusterSpec& base_cluster,
                const GpuCatalog& catalog, const Efficiencies& eff,
                const std::optional<PlanChoice>& fixed, const Point& p) {
  PointInputs in;
  try {
    in = point_inputs(o, base, base_cluster, catalog, p);
    validate(in.model);
  } catch (const ConfigError& e) {
    return Result::failed(fmt::format("model: {}", e.what()));
  } catch (const InputError& e) {
    return Result::failed(e.what());
  }
  const ModelSpec& m = in.model;
  const ClusterSpec& c = in.cluster;
  const int64_t seq = in.seq, gbs = in.gbs, gpus = in.gpus;
  Result r;
  try {
    const TimeContext ctx = make_time_context(m, c, eff, skew_for(in.skew, m), seq);
    if (fixed) {
      PlanChoice plan = replanned_layout(*fixed, in);
      plan.seq_len = seq;
      if (gbs > 0) plan.parallel.gbs = gbs;
      check(plan.parallel, m);
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
        r.exposed_comm_s = std::max(0.0, r.iteration_s - r.compute_s - r.bubble_s);
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
    if (in.precision) req.precision = *in.precision;
    req.overlap = in.overlap;
    if (in.intra_overlap) req.intra_overlap = in.intra_overlap;
    req.attention = in.attention;
    if (in.attention_kernel) req.attention_kernel = *in.attention_kernel;
    if (in.permute_fusion) req.permute_fusion = *in.permute_fusion;
    req.zero = in.zero;
    req.threads = 1;
    const SearchResult s = search_plans(ctx, req);
    if (s.ranked.empty()) return Result::failed("nothing fits");
    const Plan& best = s.ranked.front();
    r.iteration_s = best.score.time.iteration.value();
    r.tokens_per_s = best.score.tokens_per_second;
    r.mfu = best.score.mfu;
    r.peak_gb = best.score.peak_bytes.value() / 1e9;
    const TimeBreakdown& b = best.score.time;
    r.compute_s = (b.compute + b.recompute).value();
    r.exposed_comm_s = (b.tp_comm + b.ep_comm + b.cp_comm + b.pp_comm + b.dp_comm).value();
    r.bubble_s = b.bubble.value();
    r.plan = best.choice.describe();
  } catch (const ConfigError& e) {
    return Result::failed(e.what());
  } catch (const InputError& e) {
    return Result::failed(e.what());
  }
  return r;
}

std::string csv(const std::vector<Axis>& axes, const std::vector<std::pair<Point, Result>>& rows) {
  std::string out = "point";
  for (const Axis& a : axes) out += "," + a.name;
  out +=
      ",status,iteration_s,tokens_per_s,mfu,peak_memory_GB,compute_s,exposed_comm_s,bubble_s,"
      "plan\n";
  for (const auto& [p, r] : rows) {
    out += csv_field(p.key());
    for (const Axis& a : axes) out += "," + csv_field(p.at.at(a.name));
    out += fmt::format(",{},{},{},{},{},{},{},{},{}\n", csv_field(r.status), r.iteration_s,
                       r.tokens_per_s, r.mfu, r.peak_gb, r.compute_s, r.exposed_comm_s, r.bubble_s,
                       csv_field(r.plan));
  }
  return out;
}

std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t k = 0; k < line.size(); ++k) {
    const char ch = line[k];
    if (quoted && ch == '"' && k + 1 < line.size() && line[k + 1] == '"') {
      out.back() += '"';
      ++k;
    } else if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += ch;
    }
  }
  return out;
}

// The results an earlier run's points.csv holds, by point key; rows from another set of axes
// (a different column count) are not reused.
std::map<std::string, Result> earlier_results(const std::string& path, size_t axes) {
  std::map<std::string, Result> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const std::vector<std::string> f = csv_fields(line);
    if (f.size() != axes + 10) continue;
    Result r;
    r.status = f[axes + 1];
    auto number = [](const std::string& v) {
      try {
        return std::stod(v);
      } catch (const std::exception&) {
        return static_cast<double>(NAN);
      }
    };
    r.iteration_s = number(f[axes + 2]);
    r.tokens_per_s = number(f[axes + 3]);
    r.mfu = number(f[axes + 4]);
    r.peak_gb = number(f[axes + 5]);
    r.compute_s = number(f[axes + 6]);
    r.exposed_comm_s = number(f[axes + 7]);
    r.bubble_s = number(f[axes + 8]);
    r.plan = f[axes + 9];
    rows[f[0]] = r;
  }
  return rows;
}

std::string html_report(const WhatifOptions& o, const ModelSpec& m, const ClusterSpec& c,
                        const std::vector<Axis>& axes,
                        const std::vector<std::pair<Point, Result>>& rows) {
  std::string body;
  // One chart per metric against each axis, one series per combination of the other axes'
  // values.
  struct Metric {
    const char* title;
    const char* unit;
    double Result::*field;
    double scale;
  };
  const Metric metrics[] = {{"Throughput", "tokens/s", &Result::tokens_per_s, 1.0},
                            {"MFU", "%", &Result::mfu, 100.0},
                            {"Iteration time", "s", &Result::iteration_s, 1.0},
                            {"Exposed communication", "s", &Result::exposed_comm_s, 1.0},
                            {"Peak memory per GPU", "GB", &Result::peak_gb, 1.0}};
  auto metric_chart = [&](const Metric& k, const Axis& x) {
    Chart chart{k.title + std::string(" vs ") + x.name, x.name, k.unit, {}, {}, {}, {}};
    // An axis with a value that is not a number (skew=G=0.3, recompute=full) is drawn in sweep
    // order, its values as tick labels.
    const bool categorical = std::any_of(x.values.begin(), x.values.end(), [](const auto& v) {
      char* end = nullptr;
      std::strtod(v.c_str(), &end);
      return v.empty() || *end != '\0';
    });
    if (categorical) chart.categories = x.values;
    std::map<std::string, size_t> index;
    for (const auto& [p, r] : rows) {
      std::string others;
      for (const auto& [a, v] : p.at)
        if (a != x.name) others += (others.empty() ? "" : ", ") + a + "=" + v;
      if (!index.count(others)) {
        index[others] = chart.series.size();
        chart.series.push_back({others.empty() ? "all" : others, {}, {}});
      }
      Series& s = chart.series[index[others]];
      const std::string& value = p.at.at(x.name);
      double xv = NAN;
      if (categorical) {
        xv = static_cast<double>(std::find(x.values.begin(), x.values.end(), value) -
                                 x.values.begin());
      } else {
        xv = std::stod(value);
      }
      s.x.push_back(xv);
      s.y.push_back(r.*k.field * k.scale);
    }
    if (k.field == &Result::peak_gb) {
      chart.limit = c.node.gpu.hbm_capacity.value() / 1e9;
      chart.limit_label = "GPU memory";
    }
    return svg_line_chart(chart);
  };
  for (const Axis& x : axes) {
    if (axes.size() > 1) body += fmt::format("<h2>Against {}</h2>\n", html_escape(x.name));
    for (const Metric& k : metrics) body += metric_chart(k, x);
  }
  // Where each point's iteration goes, one stacked bar per point (numbered as in the table).
  StackedBars split{
      "Iteration time breakdown",
      "s",
      {},
      {"compute", "exposed communication", "pipeline bubble", "other (optimizer, offload)"},
      {{}, {}, {}, {}}};
  for (const auto& [p, r] : rows) {
    split.categories.push_back(p.key());
    const double known = r.compute_s + r.exposed_comm_s + r.bubble_s;
    const double rest = r.iteration_s - known;
    split.values[0].push_back(r.compute_s);
    split.values[1].push_back(r.exposed_comm_s);
    split.values[2].push_back(r.bubble_s);
    split.values[3].push_back(std::max(rest, 0.0));
  }
  body += svg_stacked_bars(split);
  std::string table =
      "<table><tr><th>#</th><th>point</th><th>status</th><th>iteration</th><th>tokens/s</th>"
      "<th>MFU</th><th>peak GB</th><th>plan</th></tr>\n";
  size_t number = 0;
  for (const auto& [p, r] : rows) {
    table += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.4g} s</td><td>{:.0f}</td><td>{:.1f} %</td>"
        "<td>{:.2f}</td><td>{}</td></tr>\n",
        ++number, html_escape(p.key()), html_escape(r.status), r.iteration_s, r.tokens_per_s,
        100 * r.mfu, r.peak_gb, html_escape(r.plan));
  }
  return html_page(
      fmt::format("moeplan whatif: {}", m.name),
      fmt::format(
          "<h1>What if: {} on {}</h1>\n<p>{}; {} points. Numbers in points.csv.</p>\n{}\n"
          "<h2>Points</h2>\n{}</table>\n",
          html_escape(m.name), html_escape(c.name),
          o.search ? "each point re-planned (best plan)" : "the plan simulated at each point",
          rows.size(), body, table));
}

void run_whatif(const WhatifOptions& o) {
  if (o.search == !o.plan.empty())
    throw InputError("--plan", "", "give a plan file to simulate or --search to re-plan, not both");
  if (o.sweeps.empty()) throw InputError("--sweep", "", "give at least one AXIS=V1,V2,...");
  const ModelSpec m = io::load_model(o.model);
  const ClusterSpec c = io::load_cluster(o.cluster);
  std::optional<PlanChoice> fixed;
  if (!o.plan.empty()) fixed = io::load_plan_choice(o.plan);
  std::vector<Axis> axes;
  for (const std::string& s : o.sweeps) axes.push_back(parse_axis(s));
  if (fixed &&
      std::any_of(axes.begin(), axes.end(), [](const Axis& a) { return a.name == "gpus"; }))
    throw InputError("--sweep", "", "gpus needs --search (a fixed plan has its GPU count)");
  if (o.search &&
      std::any_of(axes.begin(), axes.end(), [](const Axis& a) { return a.name == "chunks"; }))
    throw InputError("--sweep", "", "chunks needs --plan (the search picks its own chunks)");
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
  const Efficiencies eff = efficiencies_from(o.calibration);
  std::filesystem::create_directories(o.out);
  const std::string csv_path = o.out + "/points.csv";
  const std::map<std::string, Result> earlier =
      o.resume ? earlier_results(csv_path, axes.size()) : std::map<std::string, Result>{};

  std::vector<std::optional<Result>> results(points.size());
  std::vector<std::pair<Point, Result>> done_rows;
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
    std::vector<std::pair<Point, Result>> rows;
    for (size_t i = 0; i < points.size(); ++i)
      if (results[i]) rows.push_back({points[i], *results[i]});
    io::write_file_atomically(csv_path, csv(axes, rows));
  };
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < points.size(); i = next++) {
        if (was_kept[i]) continue;
        const Result r = evaluate(o, m, c, catalog, eff, fixed, points[i]);
        std::lock_guard<std::mutex> g(lock);
        results[i] = r;
        ++finished;
        write_csv();
        if (tty) {
          const double elapsed =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          const size_t todo = points.size() - kept;
          fmt::print(
              stderr, "\rpoints {}/{}, ~{:.0f} s left ", finished, todo,
              elapsed / static_cast<double>(finished) * static_cast<double>(todo - finished));
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  if (tty) fmt::print(stderr, "\r{:40}\r", "");
  write_csv();
  for (size_t i = 0; i < points.size(); ++i)
    if (results[i]) done_rows.push_back({points[i], *results[i]});
  io::write_file_atomically(o.out + "/report.html", html_report(o, m, c, axes, done_rows));

  fmt::print("{:<40} {:>14} {:>12} {:>8} {:>10}  {}\n", "point", "iteration", "tokens/s", "MFU",
             "peak GB", "status");
  for (const auto& [p, r] : done_rows) {
    fmt::print("{:<40} {:>12.4f} s {:>12.0f} {:>6.1f} % {:>10.2f}  {}\n", p.key(), r.iteration_s,
               r.tokens_per_s, 100 * r.mfu, r.peak_gb, r.status);
  }
  fmt::print("{} point(s) computed, {} kept from the earlier run; {} and {}\n", finished, kept,
             csv_path, o.out + "/report.html");
}

}  // namespace

void add_whatif(CLI::App& app) {
  auto o = std::make_shared<WhatifOptions>();
  CLI::App* cmd = app.add_subcommand(
      "whatif", "Sweep model, cluster and plan fields; write points.csv and report.html");
  cmd->add_option("--model", o->model, "model file")->required();
  cmd->add_option("--cluster", o->cluster, "cluster file")->required();
  cmd->add_option("--plan", o->plan, "simulate this plan at every point");
  cmd->add_flag("--search", o->search, "re-plan at every point (the best plan)");
  cmd->add_option("--sweep", o->sweeps,
                  fmt::format("AXIS=V1,V2,... (axes: {}); repeatable", kAxisList));
  cmd->add_option("--global-batch", o->global_batch, "global batch when not swept");
  cmd->add_option("--seq-len", o->seq_len, "sequence length when not swept");
  cmd->add_option("--skew", o->skew, "routing skew when not swept");
  cmd->add_option("--calibration", o->calibration,
                  "calibration file (curves and constants) for every point");
  cmd->add_option("--threads", o->threads, "points evaluated at once (default: all cores)");
  cmd->add_option("--out", o->out, "directory for points.csv and report.html")->required();
  cmd->add_flag("--resume", o->resume, "keep the points an earlier run finished");
  cmd->callback([o] { run_whatif(*o); });
}

}  // namespace moe::cli
