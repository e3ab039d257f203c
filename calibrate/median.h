// The median every timing here reports: the upper middle of the repeats (the middle for an odd
// count), which a single slow outlier cannot move.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace moe::calibrate {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace moe::calibrate
