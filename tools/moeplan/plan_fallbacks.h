// moeplan plan when nothing fits in GPU memory as it is: Megatron's activation offloading, then
// the faster of Megatron's optimizer CPU offload and APTMoE's offload plans; and the no-fit line
// when none of those fits either.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "planner/cluster_spec.h"
#include "planner/search.h"
#include "planner/time_model.h"

namespace moe::cli {

// The ranked plans and how they fit.
struct PlanOutcome {
  SearchResult result;
  bool tried_activations = false;      // activation offloading was searched for a fit
  bool activations_offloaded = false;  // the plans offload activations
  bool optimizer_offloaded = false;    // the plans step the optimizer on the CPU
  bool aptmoe_offloaded = false;       // the plans are APTMoE's, weights in host memory
  // The slower of the two last resorts, for a line below the plans.
  std::optional<Plan> megatron_alternative, aptmoe_alternative;
  bool fits_as_is() const {
    return !result.ranked.empty() && !activations_offloaded && !optimizer_offloaded &&
           !aptmoe_offloaded;
  }
};

using PlanSearch = std::function<SearchResult(const SearchRequest&)>;

// `first`, the search of `req` as asked, or what the fallbacks find when it ranked nothing.
PlanOutcome search_with_fallbacks(const TimeContext& ctx, const ClusterSpec& c,
                                  const SearchRequest& req, const PlanSearch& search,
                                  SearchResult first);

// Exit 3's line for an outcome with no plan: the closest candidate and what binds it, how many
// such GPUs the model's states alone would fill, and `free_fits` (what fits with --parallel's
// sizes free) where not empty.
[[noreturn]] void throw_no_fit(const TimeContext& ctx, const ClusterSpec& c,
                               const SearchRequest& req, const PlanOutcome& outcome,
                               const std::string& free_fits);

}  // namespace moe::cli
