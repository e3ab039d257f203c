// Line charts as inline SVG for self-contained HTML reports (no script, no network): numeric x
// axes (log-scaled when they span more than 10x) or categorical ones, one polyline per series, an
// optional horizontal limit line (a GPU's memory capacity).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace moe::cli {

struct Series {
  std::string name;
  std::vector<double> x, y;  // points with a missing y (NaN) are skipped
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  std::optional<double> limit;  // drawn as a dashed line
  std::string limit_label;
  // A categorical x axis: x = i stands for categories[i], spaced evenly and labelled by name.
  std::vector<std::string> categories;
};

std::string svg_line_chart(const Chart& c);

// One stacked bar per category (a sweep point): segment k of bar i is values[k][i].
struct StackedBars {
  std::string title, y_label;
  std::vector<std::string> categories;
  std::vector<std::string> segments;
  std::vector<std::vector<double>> values;  // [segment][category]; NaN counts as 0
};

std::string svg_stacked_bars(const StackedBars& c);

}  // namespace moe::cli
