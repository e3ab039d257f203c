// An efficiency curve: achieved / theoretical rate as a function of transfer (or work) size.
//
// Collectives, copies and GEMMs reach their peak only at large sizes; below that a fixed
// latency dominates (MoNTA Fig. 13: near zero at tiny volumes, ~0.75 at hundreds of MiB). A
// curve is a list of (size, efficiency) points, interpolated linearly in log(size), held flat
// above the largest point and latency-bound (constant time) below the smallest; a constant is
// the one-point curve. The reference rate the efficiency is relative to travels with the curve
// when the file gives one, since an efficiency means nothing without it.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/units.h"

namespace moe {

class EfficiencyCurve {
 public:
  struct Point {
    double size;  // bytes, or FLOPs for compute curves
    double efficiency;
  };

  EfficiencyCurve() : EfficiencyCurve(std::vector<Point>{{1.0, 1.0}}) {}
  // Points need not be sorted; sizes must be positive and distinct, efficiencies in (0, 1.5]
  // (NVLink SHARP all-reduce can exceed wire speed). Throws ConfigError otherwise.
  explicit EfficiencyCurve(std::vector<Point> points, std::optional<BytesPerSec> reference = {});
  static EfficiencyCurve constant(double efficiency);

  double at(double size) const;
  double at(Bytes size) const { return at(size.value()); }
  const std::vector<Point>& points() const { return points_; }
  const std::optional<BytesPerSec>& reference() const { return reference_; }
  // The curve's reference rate if it has one, else the fallback (from the cluster file).
  BytesPerSec reference_or(BytesPerSec fallback) const { return reference_.value_or(fallback); }

 private:
  std::vector<Point> points_;
  std::vector<double> log_sizes_;  // log of each point's size: at() takes one log, not three
  std::optional<BytesPerSec> reference_;
};

}  // namespace moe
