// The throughput a power budget buys: a job whose GPU boards may draw `budget` watts in all runs
// on fewer GPUs at their full limit or on more at a lower cap (nvidia-smi -pl). For each cluster
// size N the boards may draw budget / N each: that is their cap (where it is below their limit),
// and the search finds the fastest plan under it (planner/power_limit.h). Under a binding budget
// tokens/s = tokens per joule x budget, so more GPUs at lower caps win until their scaling
// costs more than the clock they gain.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/search.h"

namespace moe {

// One cluster size under the budget.
struct BudgetPoint {
  int64_t gpus = 0;
  double cap_w = 0;  // each board's cap (0: its own limit fits the budget)
  bool planned = false;
  Seconds iteration;  // of the size's best plan
  double tokens_per_second = 0;
  double draw_w = 0;  // what all its boards draw over the best plan's iteration
  std::string why;    // where there is no plan: why
};

struct BudgetSearch {
  SearchResult result;  // every size's plans, fastest first, each with its cap
  std::vector<BudgetPoint> points;
};

// Searches each of `counts` GPUs with its boards capped at budget / N (ConfigError for a GPU
// without a power entry, or when no size can run: the budget leaves each board its idle draw or
// less, or no layout fits).
BudgetSearch search_power_budget(const TimeContext& ctx, const SearchRequest& req,
                                 const std::vector<int64_t>& counts, double budget_w);

}  // namespace moe
