#include "simulator/board_power.h"

#include "planner/power_limit.h"

namespace moe::sim {

BoardDraw simulated_board_draw(const GpuPower& board, const PlanChoice& c,
                               const TrainingReport& r) {
  BoardDraw d;
  if (c.offload || !(board.limit_w > 0) || r.stages.empty() || r.iteration_times.empty()) return d;
  const GpuPower power = power_under_cap(board, c);
  const Seconds total = r.mean_iteration * static_cast<double>(r.iteration_times.size());
  for (const StageReport& s : r.stages)
    d.watts += stage_power_w(power, s.compute_busy / total, c.compute_clock);
  d.watts /= static_cast<double>(r.stages.size());
  d.tokens_per_joule = r.tokens_per_second / (d.watts * static_cast<double>(c.gpus()));
  return d;
}

}  // namespace moe::sim
