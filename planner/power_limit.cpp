#include "planner/power_limit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "planner/errors.h"

namespace moe {

GpuPower power_under_cap(const GpuPower& board, const PlanChoice& c) {
  GpuPower p = board;
  if (c.power_cap_w > 0 && c.power_cap_w < board.limit_w) {
    if (!(p.rated_limit_w > 0)) p.rated_limit_w = board.limit_w;
    p.limit_w = c.power_cap_w;
  }
  return p;
}

double busy_at_limit(const GpuPower& p) {
  return (p.limit_w - p.idle_w) / (p.busy_w - p.idle_w);
}

namespace {
// k: the dynamic power goes as the compute rate to this power.
double dynamic_exponent(const GpuPower& p) {
  const double rated = p.rated_limit_w > 0 ? p.rated_limit_w : p.limit_w;
  return std::log((rated - p.idle_w) / (p.busy_w - p.idle_w)) / std::log(p.sustained_rate);
}
}  // namespace

double clock_under_power_limit(const GpuPower& p, double busy) {
  if (!(p.limit_w > 0) || !(p.busy_w > p.limit_w) || !(busy > 0)) return 1.0;
  const double room = busy_at_limit(p) / std::min(busy, 1.0);
  return room >= 1 ? 1.0 : std::pow(room, 1.0 / dynamic_exponent(p));
}

double stage_power_w(const GpuPower& p, double busy_at_clock, double clock) {
  if (!(p.limit_w > 0)) return 0;
  const double busy = std::clamp(busy_at_clock, 0.0, 1.0);
  const double rate = clock < 1 && p.busy_w > p.limit_w ? std::pow(clock, dynamic_exponent(p)) : 1;
  return std::min(p.limit_w, p.idle_w + (p.busy_w - p.idle_w) * busy * rate);
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
  e.watts = gpu_power_w(power_under_cap(p, plan.choice), compute_busy_share(plan.score.time),
                        plan.choice.compute_clock);
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
  c.compute_clock = c.offload ? 1.0
                              : clock_under_power_limit(power_under_cap(ctx.gpu.power, c),
                                                        compute_busy_share(full_clock));
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

std::vector<double> energy_power_caps(const GpuPower& board) {
  std::vector<double> caps;
  if (!(board.limit_w > 0)) return caps;
  for (int percent = 95; percent >= 50; percent -= 5) {
    const double watts = std::round(board.limit_w * percent / 100.0);
    if (watts > board.idle_w) caps.push_back(watts);
  }
  return caps;
}

std::optional<TimeBreakdown> at_energy_power_cap(const TimeContext& ctx, PlanChoice& c,
                                                 const TimeBreakdown& full_clock, double joules,
                                                 double tokens, const std::vector<double>& caps,
                                                 Seconds time_limit, TimeContext& scratch) {
  const double world = static_cast<double>(c.gpus());
  const double busy = compute_busy_share(full_clock);
  std::optional<TimeBreakdown> best;
  PlanChoice best_choice = c;
  PlanChoice capped = c;
  for (double cap : caps) {
    capped.power_cap_w = cap;
    capped.compute_clock = clock_under_power_limit(power_under_cap(ctx.gpu.power, capped), busy);
    // A cap above what the plan draws at full clock leaves it as the board's limit does.
    if (!(capped.compute_clock < 1)) continue;
    // Under a cap that slows the clock the boards draw the cap: joules = cap x GPUs x time. A
    // cap no better than the best so far is past the one minimum: lower ones are worse still.
    Seconds bound(joules * tokens / (cap * world));
    if (time_limit.value() > 0)
      bound = std::min(bound, Seconds(std::nextafter(time_limit.value(), 1e300)));
    const std::optional<TimeBreakdown> t = estimate_time_below(ctx, capped, scratch, bound);
    if (!t || !(t->iteration < bound)) break;
    const double at_cap = cap * world * t->iteration.value() / tokens;
    if (!(at_cap < joules)) break;
    joules = at_cap;
    best = t;
    best_choice = capped;
  }
  if (best) c = best_choice;
  return best;
}

std::vector<CapPoint> energy_by_cap(const TimeContext& ctx, const PlanChoice& c, double tokens,
                                    const std::vector<double>& caps) {
  std::vector<CapPoint> out;
  std::vector<double> all = {0};
  all.insert(all.end(), caps.begin(), caps.end());
  for (double cap : all) {
    PlanChoice x = c;
    x.power_cap_w = cap;
    Plan p;
    p.score.time = estimate_time_at_power_limit(ctx, x);
    p.score.tokens_per_second = tokens / p.score.time.iteration.value();
    p.choice = x;
    const BoardEnergy e = board_energy(ctx.gpu.power, p);
    CapPoint point;
    point.cap_w = power_under_cap(ctx.gpu.power, x).limit_w;
    point.compute_clock = x.compute_clock;
    point.iteration = p.score.time.iteration;
    point.tokens_per_second = p.score.tokens_per_second;
    point.watts = e.watts;
    point.tokens_per_joule = e.tokens_per_joule;
    out.push_back(point);
  }
  return out;
}

}  // namespace moe
