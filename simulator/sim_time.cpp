#include "simulator/sim_time.h"

#include <cmath>

namespace moe::sim {

SimTime to_sim_time(Seconds s) {
  if (!(s.value() > 0)) return {0};
  const double ps = std::ceil(s.value() * kPicosecondsPerSecond);
  return {std::max<int64_t>(1, static_cast<int64_t>(ps))};
}

}  // namespace moe::sim
