// plan --explain: two plans' iteration terms side by side, so a user sees which terms make one
// faster (the best against the runner-up, or their own layout against the search's best).
#pragma once

#include <string>

#include "planner/plan.h"

namespace moe::cli {

// The terms of the two iterations that differ (compute, exposed communication by kind, bubble,
// ...), each plan's column headed by its label, then both peaks.
void print_plan_difference(const Plan& a, const Plan& b, const std::string& label_a,
                           const std::string& label_b);

}  // namespace moe::cli
