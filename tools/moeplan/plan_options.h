// moeplan plan's options, and the search request they make.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "planner/cluster_spec.h"
#include "planner/io/megatron_args.h"
#include "planner/model_spec.h"
#include "planner/search.h"

namespace moe::cli {

// What --megatron-args read: the sizes and switches it fixed, as --parallel and plan's options
// spell them, and how it took what moeplan prices approximately (notes) or not at all (ignored).
struct MegatronReading {
  std::string source, fixed;
  std::vector<std::string> notes, ignored;
  // From a training log: its typical iteration and how many it logged.
  std::optional<double> measured_iteration_ms;
  size_t logged_iterations = 0;
  std::vector<io::LoggedMemory> memory;  // its memory reports, a rank each
};

struct PlanOptions {
  std::string model, cluster, parallel, calibration, skew = "balanced", objective = "throughput",
                                                     save;
  std::vector<std::string> recompute_modules;
  std::vector<std::string> offload_modules;
  std::optional<double> optimizer_offload;
  std::optional<double> power_limit_w;  // a power cap on the cluster's GPUs (power_limit.h)
  // The energy objective's time budget: at most this many percent slower than the fastest plan.
  std::optional<double> max_slowdown_percent;
  // What all the job's GPU boards may draw, in kW: each size's boards capped at their share
  // (planner/power_budget.h).
  std::optional<double> power_budget_kw;
  std::string recompute, precision = "bf16", overlap = "search", attention = "search",
                         intra_overlap = "off", schedule = "1f1b", permute_fusion = "on",
                         attention_kernel = "fused", dispatcher = "search", cuda_graph = "none",
                         grad_reduce = "search", cross_entropy = "te";
  std::optional<std::string> fp8_recipe;
  // --adam-moments: the Adam moments' type (empty: not given); a launch's Adam states, as read.
  std::string adam_moments;
  std::optional<AdamStates> adam;
  int64_t global_batch = 0, seq_len = 4096;
  std::optional<int64_t> gpus;
  int top = 5, threads = 2, verify = 0;
  double alpha = 1.0;
  std::optional<double> static_override_gb;
  std::optional<int> zero;
  bool json = false, explain = false, megatron_only = false;
  std::string megatron_args;  // a Megatron-LM launch's arguments (a file, or - for stdin)
  std::optional<MegatronReading> megatron;  // what apply_megatron_arguments read from it
  std::set<std::string> given;              // the options set on the command line
};

// Fixes the sizes and switches a Megatron-LM launch sets (planner/io/megatron_args.h), where
// the command line leaves them open: --parallel's sizes and the options given override the
// launch's. Records what it read in `o.megatron`.
void apply_megatron_arguments(PlanOptions& o, const ModelSpec& m);

// The search the options ask for, checked against the model and cluster: an InputError naming
// the option (and field) for anything out of range or contradictory.
SearchRequest search_request(const PlanOptions& o, const ModelSpec& m, const ClusterSpec& c);

}  // namespace moe::cli
