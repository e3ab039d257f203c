// What moeplan plan prints: the ranked plans as one JSON document, or as a table followed by
// the best plan's time breakdown, memory by stage, launch arguments and, with --explain, why it
// wins.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/power_budget.h"
#include "planner/routing_skew.h"
#include "planner/search.h"
#include "planner/time_model.h"
#include "tools/moeplan/plan_fallbacks.h"
#include "tools/moeplan/plan_options.h"

namespace moe::cli {

// A ranked plan run through the discrete-event simulator (--verify).
struct Verified {
  Seconds iteration;
  double tokens_per_joule = 0;  // the simulated boards' (0: no power entry)
  int64_t oom_events = 0;
  size_t planner_rank = 0;  // 0-based, before the simulator reordered them
};

struct PlanReport {
  const PlanOptions& options;
  const ModelSpec& model;
  const ClusterSpec& cluster;
  const TimeContext& ctx;
  const RoutingSkew& skew;
  const SearchRequest& request;
  const PlanOutcome& outcome;
  const std::vector<Verified>& verified;  // the first plans, simulated (--verify)
  // With --parallel's sizes fixed: the search's best with them free, and the note saying it fits
  // where the fixed sizes do not (empty otherwise).
  const std::optional<Plan>& free_best;
  const std::string& free_fits;
  size_t gpu_counts = 1;  // cluster sizes the search weighed (the cost objective's)
  // Under --power-budget-kW: each size's cap and best plan.
  const std::vector<BudgetPoint>& budget;
};

void print_plan_json(const PlanReport& report);
void print_plan_text(const PlanReport& report);

}  // namespace moe::cli
