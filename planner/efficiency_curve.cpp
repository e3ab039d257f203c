#include "planner/efficiency_curve.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "planner/errors.h"

namespace moe {

EfficiencyCurve::EfficiencyCurve(std::vector<Point> points, std::optional<BytesPerSec> reference)
    : points_(std::move(points)), reference_(reference) {
  if (points_.empty()) throw ConfigError("efficiency curve has no points");
  std::sort(points_.begin(), points_.end(),
            [](const Point& a, const Point& b) { return a.size < b.size; });
  for (size_t i = 0; i < points_.size(); ++i) {
    const Point& p = points_[i];
    if (!(p.size > 0))
      throw ConfigError(fmt::format("efficiency curve: size {} must be positive", p.size));
    if (!(p.efficiency > 0 && p.efficiency <= 1.5)) {
      throw ConfigError(fmt::format(
          "efficiency curve: efficiency {} at size {} is outside (0, 1.5]", p.efficiency, p.size));
    }
    if (i > 0 && points_[i - 1].size == p.size) {
      throw ConfigError(fmt::format("efficiency curve: size {} appears twice", p.size));
    }
  }
  if (reference_ && !(reference_->value() > 0)) {
    throw ConfigError("efficiency curve: reference bandwidth must be positive");
  }
  for (const Point& p : points_) log_sizes_.push_back(std::log(p.size));
}

EfficiencyCurve EfficiencyCurve::constant(double efficiency) {
  return EfficiencyCurve(std::vector<Point>{{1.0, efficiency}});
}

double EfficiencyCurve::at(double size) const {
  // Below the smallest point a transfer is taken as latency-bound: its time stays that of the
  // smallest point, so efficiency falls in proportion to size. Holding efficiency flat instead
  // would predict ever smaller chunks to be free.
  if (size < points_.front().size) return points_.front().efficiency * size / points_.front().size;
  if (size >= points_.back().size) return points_.back().efficiency;
  const auto hi = std::upper_bound(points_.begin(), points_.end(), size,
                                   [](double s, const Point& p) { return s < p.size; });
  const auto lo = hi - 1;
  const size_t i = static_cast<size_t>(lo - points_.begin());
  const double f = (std::log(size) - log_sizes_[i]) / (log_sizes_[i + 1] - log_sizes_[i]);
  return lo->efficiency + f * (hi->efficiency - lo->efficiency);
}

}  // namespace moe
