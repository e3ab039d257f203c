#include "tools/moeplan/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tools/moeplan/report_format.h"

namespace moe::cli {

namespace {
constexpr double kWidth = 560, kHeight = 300, kLeft = 70, kRight = 150, kTop = 30, kBottom = 45;
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                         "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};

std::string number(double v) {
  const double a = std::abs(v);
  if (a >= 1e9) return fmt::format("{:.3g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.3g}k", v / 1e3);
  if (v == std::round(v)) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}

// Where value y sits on a chart whose axis tops out at y1.
double y_pixel(double y, double y1) {
  return kHeight - kBottom - y / y1 * (kHeight - kTop - kBottom);
}

// The <svg> element, its title, the axes with grid lines at quarters of y1 (the top, already
// padded) and the axis labels: what both chart kinds share.
std::string svg_frame(const std::string& title, const std::string& x_label,
                      const std::string& y_label, double y1) {
  auto py = [&](double y) { return y_pixel(y, y1); };
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" role=\"img\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<title>{}</title>\n"
      "<text x=\"{}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
      kWidth, kHeight, html_escape(title), kLeft, html_escape(title));
  // Axes, y ticks at quarters.
  out += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#333\"/>"
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{3}\" stroke=\"#333\"/>\n",
      kLeft, kHeight - kBottom, kWidth - kRight, kTop);
  for (int k = 0; k <= 4; ++k) {
    const double v = y1 / 1.08 * k / 4;
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, py(v), kWidth - kRight, kLeft - 5, py(v) + 4, number(v));
  }
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{}</text>\n",
      (kLeft + kWidth - kRight) / 2, kHeight - 8, html_escape(x_label), kHeight / 2, kHeight / 2,
      html_escape(y_label));
  return out;
}

std::string legend(size_t k, const std::string& name) {
  return fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", kWidth - kRight + 5,
                     kTop + 14 * (k + 1), kColors[k % std::size(kColors)], html_escape(name));
}
}  // namespace

std::string svg_line_chart(const Chart& c) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y1 = 0;
  for (const Series& s : c.series) {
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y1 = std::max(y1, s.y[i]);
    }
  }
  if (c.limit) y1 = std::max(y1, *c.limit);
  if (!std::isfinite(x0)) x0 = 0, x1 = 1;
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= 0) y1 = 1;
  y1 *= 1.08;
  if (!c.categories.empty()) x0 = -0.5, x1 = static_cast<double>(c.categories.size()) - 0.5;
  const bool log_x = c.categories.empty() && x0 > 0 && x1 / x0 > 10;
  auto px = [&](double x) {
    const double f = log_x ? std::log(x / x0) / std::log(x1 / x0) : (x - x0) / (x1 - x0);
    return kLeft + f * (kWidth - kLeft - kRight);
  };
  auto py = [&](double y) { return y_pixel(y, y1); };
  std::string out = svg_frame(c.title, c.x_label + (log_x ? " (log)" : ""), c.y_label, y1);
  std::vector<double> ticks;
  for (const Series& s : c.series) ticks.insert(ticks.end(), s.x.begin(), s.x.end());
  std::sort(ticks.begin(), ticks.end());
  ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
  if (!c.categories.empty()) {
    ticks.clear();
    for (size_t i = 0; i < c.categories.size(); ++i) ticks.push_back(static_cast<double>(i));
  }
  for (double x : ticks) {
    const std::string label =
        c.categories.empty() ? number(x) : html_escape(c.categories[static_cast<size_t>(x)]);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(x),
                       kHeight - kBottom + 15, label);
  }
  if (c.limit) {
    // Labelled inside the plot, above the line's right end: the legend owns the right margin.
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#000\" "
        "stroke-dasharray=\"5,4\"/><text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, py(*c.limit), kWidth - kRight, kWidth - kRight - 4, py(*c.limit) - 4,
        html_escape(c.limit_label));
  }
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series& s = c.series[k];
    const char* color = kColors[k % std::size(kColors)];
    std::string points;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      points += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.y[i]));
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>", px(s.x[i]),
                         py(s.y[i]), color);
    }
    out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n",
                       color, points);
    out += legend(k, s.name);
  }
  return out + "</svg>\n";
}

std::string svg_stacked_bars(const StackedBars& c) {
  const size_t n = c.categories.size();
  auto value = [&](size_t k, size_t i) {
    const double v = i < c.values[k].size() ? c.values[k][i] : 0.0;
    return std::isfinite(v) && v > 0 ? v : 0.0;
  };
  double y1 = 0;
  for (size_t i = 0; i < n; ++i) {
    double total = 0;
    for (size_t k = 0; k < c.values.size(); ++k) total += value(k, i);
    y1 = std::max(y1, total);
  }
  if (y1 <= 0) y1 = 1;
  y1 *= 1.08;
  auto py = [&](double y) { return y_pixel(y, y1); };
  std::string out = svg_frame(c.title, "point (numbered as in the table)", c.y_label, y1);
  const double slot = (kWidth - kLeft - kRight) / static_cast<double>(std::max<size_t>(n, 1));
  for (size_t i = 0; i < n; ++i) {
    const double x = kLeft + slot * (static_cast<double>(i) + 0.15);
    double base = 0;
    for (size_t k = 0; k < c.values.size(); ++k) {
      const double v = value(k, i);
      out += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
          "<title>{}: {}</title></rect>",
          x, py(base + v), slot * 0.7, py(base) - py(base + v), kColors[k % std::size(kColors)],
          html_escape(c.categories[i]), number(v));
      base += v;
    }
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       x + slot * 0.35, kHeight - kBottom + 15, i + 1);
  }
  for (size_t k = 0; k < c.segments.size(); ++k) out += legend(k, c.segments[k]);
  return out + "</svg>\n";
}

}  // namespace moe::cli
