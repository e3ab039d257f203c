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
  const bool log_x = x0 > 0 && x1 / x0 > 10;
  auto px = [&](double x) {
    const double f = log_x ? std::log(x / x0) / std::log(x1 / x0) : (x - x0) / (x1 - x0);
    return kLeft + f * (kWidth - kLeft - kRight);
  };
  auto py = [&](double y) { return kHeight - kBottom - y / y1 * (kHeight - kTop - kBottom); };
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" role=\"img\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<title>{}</title>\n"
      "<text x=\"{}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
      kWidth, kHeight, html_escape(c.title), kLeft, html_escape(c.title));
  // Axes, y ticks at quarters, x ticks at the data's x values.
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
  std::vector<double> ticks;
  for (const Series& s : c.series) ticks.insert(ticks.end(), s.x.begin(), s.x.end());
  std::sort(ticks.begin(), ticks.end());
  ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
  for (double x : ticks) {
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(x),
                       kHeight - kBottom + 15, number(x));
  }
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{}</text>\n",
      (kLeft + kWidth - kRight) / 2, kHeight - 8, html_escape(c.x_label + (log_x ? " (log)" : "")),
      kHeight / 2, kHeight / 2, html_escape(c.y_label));
  if (c.limit) {
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#000\" "
        "stroke-dasharray=\"5,4\"/><text x=\"{3}\" y=\"{4:.1f}\">{5}</text>\n",
        kLeft, py(*c.limit), kWidth - kRight, kWidth - kRight + 5, py(*c.limit) + 4,
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
    out += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", kWidth - kRight + 5,
                       kTop + 14 * (k + 1), color, html_escape(s.name));
  }
  return out + "</svg>\n";
}

}  // namespace moe::cli
