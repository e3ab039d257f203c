// moeplan whatif's points: the axes a sweep may vary, one point of the sweep (a value per axis),
// and what evaluating it gives (re-planned, or the fixed plan simulated).
#pragma once

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/cluster_spec.h"
#include "planner/efficiencies.h"
#include "planner/model_spec.h"
#include "planner/plan.h"

namespace moe::cli {

// The command's flags.
struct WhatifOptions {
  std::string model, cluster, plan, out, skew = "balanced", calibration;
  std::vector<std::string> sweeps;
  bool search = false, resume = false;
  int64_t global_batch = 0;
  int64_t seq_len = 0;  // 0: the plan's (4096 with --search)
  int threads = 0;
};

struct Axis {
  std::string name;
  std::vector<std::string> values;
};

// One point of the sweep: a value for each axis.
struct Point {
  std::map<std::string, std::string> at;  // axis -> value
  std::string key() const {
    std::string k;
    for (const auto& [a, v] : at) k += (k.empty() ? "" : ";") + a + "=" + v;
    return k;
  }
};

// What a point gives, or why it gives nothing.
struct PointResult {
  static PointResult failed(std::string why) {
    PointResult r;
    r.status = std::move(why);
    return r;
  }
  std::string status = "ok";  // or why there is no number
  double iteration_s = NAN, tokens_per_s = NAN, mfu = NAN, peak_gb = NAN;
  // The iteration split: compute (recompute included), communication left exposed, pipeline
  // bubble, GPUs waiting for the host to issue kernels; the rest (the optimizer step where the
  // planner prices it, offload loading) is iteration minus these.
  double compute_s = NAN, exposed_comm_s = NAN, bubble_s = NAN, host_s = NAN;
  // What a GPU board draws and the tokens trained a joule (planner/power_limit.h); NAN where the
  // point's GPU has no power entry.
  double gpu_power_w = NAN, tokens_per_joule = NAN;
  std::string plan;
};

// The axes, comma-separated, for help and error text.
const std::string& whatif_axis_list();

// "AXIS=V1,V2,..." from --sweep; an unknown axis or no values is an InputError.
Axis parse_axis(const std::string& text);

// GPU models by name, from the cluster files beside --cluster (the `gpu` axis).
using GpuCatalog = std::map<std::string, GpuSpec>;
GpuCatalog gpu_catalog(const std::string& cluster_file);

// One point: the best plan for its inputs (`fixed` empty) or `fixed` simulated with the point's
// fields; a point that cannot run says why in its status rather than throwing.
PointResult evaluate(const WhatifOptions& o, const ModelSpec& base, const ClusterSpec& base_cluster,
                     const GpuCatalog& catalog, const Efficiencies& eff,
                     const std::optional<PlanChoice>& fixed, const Point& p);

}  // namespace moe::cli
