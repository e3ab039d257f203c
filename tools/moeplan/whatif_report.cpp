#include "tools/moeplan/whatif_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "tools/moeplan/common.h"
#include "tools/moeplan/report_format.h"
#include "tools/moeplan/svg_chart.h"

namespace moe::cli {

namespace {

// One CSV line's fields, quotes undone.
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

}  // namespace

std::string points_csv(const std::vector<Axis>& axes,
                       const std::vector<std::pair<Point, PointResult>>& rows) {
  std::string out = "point";
  for (const Axis& a : axes) out += "," + a.name;
  out +=
      ",status,iteration_s,tokens_per_s,mfu,peak_memory_GB,compute_s,exposed_comm_s,bubble_s,"
      "host_s,gpu_power_W,tokens_per_joule,plan\n";
  for (const auto& [p, r] : rows) {
    out += csv_field(p.key());
    for (const Axis& a : axes) out += "," + csv_field(p.at.at(a.name));
    out += fmt::format(",{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_field(r.status), r.iteration_s,
                       r.tokens_per_s, r.mfu, r.peak_gb, r.compute_s, r.exposed_comm_s, r.bubble_s,
                       r.host_s, r.gpu_power_w, r.tokens_per_joule, csv_field(r.plan));
  }
  return out;
}

std::map<std::string, PointResult> earlier_results(const std::string& path, size_t axes) {
  std::map<std::string, PointResult> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const std::vector<std::string> f = csv_fields(line);
    if (f.size() != axes + 13) continue;  // a row of another version is computed again
    PointResult r;
    r.status = f[axes + 1];
    auto number = [](const std::string& v) { return finite_number(v).value_or(NAN); };
    r.iteration_s = number(f[axes + 2]);
    r.tokens_per_s = number(f[axes + 3]);
    r.mfu = number(f[axes + 4]);
    r.peak_gb = number(f[axes + 5]);
    r.compute_s = number(f[axes + 6]);
    r.exposed_comm_s = number(f[axes + 7]);
    r.bubble_s = number(f[axes + 8]);
    r.host_s = number(f[axes + 9]);
    r.gpu_power_w = number(f[axes + 10]);
    r.tokens_per_joule = number(f[axes + 11]);
    r.plan = f[axes + 12];
    rows[f[0]] = r;
  }
  return rows;
}

std::string html_report(const WhatifOptions& o, const ModelSpec& m, const ClusterSpec& c,
                        const std::vector<Axis>& axes,
                        const std::vector<std::pair<Point, PointResult>>& rows) {
  std::string body;
  // One chart per metric against each axis, one series per combination of the other axes'
  // values.
  struct Metric {
    const char* title;
    const char* unit;
    double PointResult::*field;
    double scale;
  };
  const Metric metrics[] = {{"Throughput", "tokens/s", &PointResult::tokens_per_s, 1.0},
                            {"MFU", "%", &PointResult::mfu, 100.0},
                            {"Iteration time", "s", &PointResult::iteration_s, 1.0},
                            {"Exposed communication", "s", &PointResult::exposed_comm_s, 1.0},
                            {"Peak memory per GPU", "GB", &PointResult::peak_gb, 1.0}};
  auto metric_chart = [&](const Metric& k, const Axis& x) {
    Chart chart{k.title + std::string(" vs ") + x.name, x.name, k.unit, {}, {}, {}, {}};
    // An axis with a value that is not a number (skew=G=0.3, recompute=full) is drawn in sweep
    // order, its values as tick labels.
    const bool categorical = std::any_of(x.values.begin(), x.values.end(),
                                         [](const auto& v) { return !finite_number(v); });
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
        xv = *finite_number(value);
      }
      s.x.push_back(xv);
      s.y.push_back(r.*k.field * k.scale);
    }
    if (k.field == &PointResult::peak_gb) {
      chart.limit = c.node.gpu.hbm_capacity.value() / 1e9;
      chart.limit_label = "GPU memory";
    }
    return svg_line_chart(chart);
  };
  for (const Axis& x : axes) {
    if (axes.size() > 1) body += fmt::format("<h2>Against {}</h2>\n", html_escape(x.name));
    for (const Metric& k : metrics) body += metric_chart(k, x);
    // Joules where the GPUs' power is known at some point.
    if (std::any_of(rows.begin(), rows.end(),
                    [](const auto& row) { return std::isfinite(row.second.tokens_per_joule); }))
      body += metric_chart(
          {"Tokens per joule (GPU boards)", "tokens/J", &PointResult::tokens_per_joule, 1.0}, x);
  }
  // Where each point's iteration goes, one stacked bar per point (numbered as in the table).
  StackedBars split{"Iteration time breakdown",
                    "s",
                    {},
                    {"compute", "exposed communication", "pipeline bubble", "waiting for the host",
                     "other (optimizer, offload)"},
                    {{}, {}, {}, {}, {}}};
  for (const auto& [p, r] : rows) {
    split.categories.push_back(p.key());
    const double known = r.compute_s + r.exposed_comm_s + r.bubble_s + r.host_s;
    const double rest = r.iteration_s - known;
    split.values[0].push_back(r.compute_s);
    split.values[1].push_back(r.exposed_comm_s);
    split.values[2].push_back(r.bubble_s);
    split.values[3].push_back(r.host_s);
    split.values[4].push_back(std::max(rest, 0.0));
  }
  body += svg_stacked_bars(split);
  std::string table =
      "<table><tr><th>#</th><th>point</th><th>status</th><th>iteration</th><th>tokens/s</th>"
      "<th>MFU</th><th>peak GB</th><th>W a GPU</th><th>tokens/J</th><th>plan</th></tr>\n";
  size_t number = 0;
  for (const auto& [p, r] : rows) {
    // A point that did not run has its reason in the status and dashes for numbers.
    const bool ran = std::isfinite(r.iteration_s);
    auto number_or_dash = [&](const std::string& text) { return ran ? text : std::string("-"); };
    table += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
        ++number, html_escape(p.key()), html_escape(r.status),
        number_or_dash(fmt::format("{:.4g} s", r.iteration_s)),
        number_or_dash(fmt::format("{:.0f}", r.tokens_per_s)),
        number_or_dash(fmt::format("{:.1f} %", 100 * r.mfu)),
        number_or_dash(fmt::format("{:.2f}", r.peak_gb)),
        std::isfinite(r.gpu_power_w) ? fmt::format("{:.0f}", r.gpu_power_w) : "-",
        std::isfinite(r.tokens_per_joule) ? fmt::format("{:.2f}", r.tokens_per_joule) : "-",
        html_escape(r.plan));
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

}  // namespace moe::cli
