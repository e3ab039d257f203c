#include "simulator/sim_time.h"

#include <algorithm>
#include <cstdint>

namespace moe::sim {

SimTime to_sim_time(Seconds s) {
  if (!(s.value() > 0)) return {0};
  const double ps = s.value() * kPicosecondsPerSecond;
  // Ceiling by truncation (positive, below 2^63): std::ceil is a libm call on baseline x86-64,
  // and this runs for every simulated task.
  if (!(ps < 9.2e18)) return {INT64_MAX};
  int64_t whole = static_cast<int64_t>(ps);
  if (static_cast<double>(whole) < ps) ++whole;
  return {std::max<int64_t>(1, whole)};
}

}  // namespace moe::sim
