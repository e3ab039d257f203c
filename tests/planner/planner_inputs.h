// The shipped model and cluster files the planner tests price layouts against, and the time
// model's context over them.
#pragma once

#include <string>

#include "planner/io/loaders.h"
#include "planner/parallel.h"
#include "planner/plan.h"
#include "planner/time_model.h"
#include "test_paths.h"

namespace moe {

// A path below the source tree.
inline std::string root(const std::string& rel) {
  return std::string(MOEPLAN_SOURCE_DIR) + "/" + rel;
}

// A plan of `layout`, resolved, every switch at its default.
inline PlanChoice plan_of(const std::string& layout) {
  PlanChoice c;
  c.parallel = resolve(parse_parallel(layout));
  return c;
}

// models/`m` on topologies/`c` at `seq` tokens under `skew`, default efficiencies.
struct Inputs {
  ModelSpec model;
  ClusterSpec cluster;
  TimeContext ctx;
  Inputs(const std::string& m, const std::string& c, int64_t seq = 4096,
         const RoutingSkew& skew = {})
      : model(io::load_model(root("models/" + m))),
        cluster(io::load_cluster(root("topologies/" + c))) {
    ctx = make_time_context(model, cluster, efficiencies(), skew, seq);
  }
};

}  // namespace moe
