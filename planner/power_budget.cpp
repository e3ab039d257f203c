#include "planner/power_budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "planner/errors.h"
#include "planner/power_limit.h"

namespace moe {

BudgetSearch search_power_budget(const TimeContext& ctx, const SearchRequest& req,
                                 const std::vector<int64_t>& counts, double budget_w) {
  const GpuPower& board = ctx.gpu.power;
  if (!(board.limit_w > 0))
    throw ConfigError(
        fmt::format("GPU {} has no power entry (node.gpu.power) to budget", ctx.gpu.model));
  BudgetSearch out;
  std::vector<Plan> all;
  for (int64_t n : counts) {
    BudgetPoint point;
    point.gpus = n;
    // Whole watts, as nvidia-smi takes them.
    const double each = std::floor(budget_w / static_cast<double>(n));
    if (!(each > board.idle_w)) {
      point.why =
          fmt::format("{:.0f} W a board is not above its idle {:.0f} W", each, board.idle_w);
      out.points.push_back(point);
      continue;
    }
    TimeContext capped = ctx;
    if (each < board.limit_w) {
      point.cap_w = each;
      cap_power_limit(capped.gpu, each);
    }
    SearchRequest one = req;
    one.num_gpus = n;
    SearchResult r;
    try {
      r = search_plans(capped, one);
    } catch (const ConfigError& e) {
      point.why = e.what();
      out.points.push_back(point);
      continue;
    }
    add_search_counts(out.result, r);
    for (Plan& p : r.ranked) p.choice.power_cap_w = point.cap_w;
    if (r.ranked.empty()) {
      point.why = "nothing fits";
    } else {
      const Plan& best = r.ranked.front();
      point.planned = true;
      point.iteration = best.score.time.iteration;
      point.tokens_per_second = best.score.tokens_per_second;
      point.draw_w = board_energy(board, best).watts * static_cast<double>(n);
    }
    for (Plan& p : r.ranked) all.push_back(std::move(p));
    out.points.push_back(point);
  }
  if (all.empty() && !out.result.closest) {
    std::string whys;
    for (const BudgetPoint& p : out.points)
      whys += fmt::format("{}{} GPUs: {}", whys.empty() ? "" : "; ", p.gpus, p.why);
    throw ConfigError(
        fmt::format("no cluster size runs within {:.1f} kW ({})", budget_w / 1e3, whys));
  }
  // The same tokens an iteration at every size: the fastest first.
  std::stable_sort(all.begin(), all.end(), [](const Plan& a, const Plan& b) {
    return a.score.time.iteration < b.score.time.iteration;
  });
  if (static_cast<int>(all.size()) > req.top_k) all.resize(req.top_k);
  out.result.ranked = std::move(all);
  if (!out.result.ranked.empty()) out.result.closest.reset();
  return out;
}

}  // namespace moe
