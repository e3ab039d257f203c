// Simulated time: an integer count of picoseconds.
//
// Integer time keeps runs bit-identical and never loses a tiny task to floating-point
// epsilons (SimGrid issue 71; htsim counts integer picoseconds too). int64 picoseconds reach
// 106 days. The one conversion from the planner's Seconds rounds a positive duration up, so
// nothing that takes time ever takes zero.
#pragma once

#include <compare>
#include <cstdint>

#include "planner/units.h"

namespace moe::sim {

struct SimTime {
  int64_t ps = 0;
  friend constexpr auto operator<=>(SimTime, SimTime) = default;
  friend constexpr SimTime operator+(SimTime a, SimTime b) { return {a.ps + b.ps}; }
  friend constexpr SimTime operator-(SimTime a, SimTime b) { return {a.ps - b.ps}; }
};

constexpr double kPicosecondsPerSecond = 1e12;

// Rounds up; a positive duration becomes at least 1 ps. Negative durations are a bug upstream
// and clamp to zero.
SimTime to_sim_time(Seconds s);
inline Seconds to_seconds(SimTime t) {
  return Seconds(static_cast<double>(t.ps) / kPicosecondsPerSecond);
}

}  // namespace moe::sim
