#include "planner/power_limit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "planner/errors.h"

namespace moe {

double busy_at_limit(const GpuPower& p) {
  return (p.limit_w - p.idle_w) / (p.busy_w - p.idle_w);
}

double clock_under_power_limit(const GpuPower& p, double busy) {
  if (!(p.limit_w > 0) || !(p.busy_w > p.limit_w) || !(busy > 0)) return 1.0;
  const double dynamic = p.busy_w - p.idle_w;
  const double rated = p.rated_limit_w > 0 ? p.rated_limit_w : p.limit_w;
  const double k = std::log((rated - p.idle_w) / dynamic) / std::log(p.sustained_rate);
  const double room = busy_at_limit(p) / std::min(busy, 1.0);
  return room >= 1 ? 1.0 : std::pow(room, 1.0 / k);
}

void cap_power_limit(GpuSpec& gpu, double watts) {
  GpuPower& p = gpu.power;
  if (!(p.limit_w > 0))
    throw ConfigError(fmt::format("GPU {} has no power entry (node.gpu.power) to cap", gpu.model));
  if (!(watts > p.idle_w))
    throw ConfigError(fmt::format("{} W is not above the GPU's idle {} W", watts, p.idle_w));
  if (!(p.rated_limit_w > 0)) p.rated_limit_w = p.limit_w;
  p.limit_w = watts;
}

double gpu_power_w(const GpuPower& p, double busy, double clock) {
  if (!(p.limit_w > 0)) return 0;
  if (clock < 1) return p.limit_w;
  return std::min(p.limit_w, p.idle_w + (p.busy_w - p.idle_w) * std::clamp(busy, 0.0, 1.0));
}

BoardEnergy board_energy(const GpuPower& p, const Plan& plan) {
  BoardEnergy e;
  e.watts = gpu_power_w(p, compute_busy_share(plan.score.time), plan.choice.compute_clock);
  if (e.watts > 0)
    e.tokens_per_joule =
        plan.score.tokens_per_second / (e.watts * static_cast<double>(plan.choice.gpus()));
  return e;
}

double compute_busy_share(const TimeBreakdown& t) {
  if (!(t.iteration.value() > 0)) return 0;
  return std::min(1.0, (t.compute + t.recompute + t.ep_held_sms) / t.iteration);
}

namespace {
// Sets c's clock from its full-clock time; whether it fell (and c must be priced again).
bool set_clock(const TimeContext& ctx, PlanChoice& c, const TimeBreakdown& full_clock) {
  c.compute_clock =
      c.offload ? 1.0 : clock_under_power_limit(ctx.gpu.power, compute_busy_share(full_clock));
  return c.compute_clock < 1;
}
}  // namespace

std::optional<TimeBreakdown> at_power_limit(const TimeContext& ctx, PlanChoice& c,
                                            const TimeBreakdown& full_clock, TimeContext& scratch,
                                            Seconds bound) {
  if (!set_clock(ctx, c, full_clock)) return full_clock;
  return estimate_time_below(ctx, c, scratch, bound);
}

TimeBreakdown estimate_time_at_power_limit(const TimeContext& ctx, PlanChoice& c) {
  c.compute_clock = 1;
  const TimeBreakdown full_clock = estimate_time(ctx, c);
  if (!set_clock(ctx, c, full_clock)) return full_clock;
  return estimate_time(ctx, c);
}

}  // namespace moe
