// Routing over a run: how many tokens each EP rank's experts receive, per MoE layer and
// iteration, from the shared RoutingSkew (planner/routing_skew.h) plus two things only a run over
// time has:
//   drift=T   skew that grows with depth and settles over the first iterations, as MemFine
//             Fig. 2 and 5 show: the skew's excess over balanced is scaled by
//             depth(l) = (l + 1) / L and settle(i) = 0.25 + 0.75 exp(-i / T);
//   jitter=x  per-layer, per-iteration noise: each expert's proportion is multiplied by
//             exp(x z - x^2 / 2), z standard normal, then the row is renormalised.
// Experts sit on EP ranks contiguously (expert e on rank e / (E / ep)). G=x lists the hottest
// experts first, so they share a rank as the planner assumes and, without drift or jitter, the
// simulator sees exactly the planner's imbalance. A popularity file keeps its experts where
// their index puts them; the planner sorts them onto one rank (its worst case), so the simulated
// busiest rank can be lighter than the planned one.
//
// Noise comes from a counter-based hash of (seed, layer, iteration, expert): the same seed gives
// the same counts whatever order they are asked for in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/model_spec.h"
#include "planner/routing_skew.h"

namespace moe::sim {

struct RoutingDynamics {
  double drift_iterations = 0;  // T; 0: no drift
  double jitter = 0;            // x; 0: none
};

class RoutingGenerator {
 public:
  RoutingGenerator(const ModelSpec& m, RoutingSkew base, RoutingDynamics dynamics, uint64_t seed);

  // The busiest EP rank's received tokens over its balanced share (>= 1), for model layer
  // `layer` at iteration `iteration` (0-based), with `ep` ranks.
  double busiest_load(int64_t layer, int64_t iteration, int64_t ep) const;
  // Every EP rank's received tokens over its balanced share (their mean is 1). A skew given as a
  // load puts it on rank 0 and spreads the rest evenly.
  std::vector<double> rank_loads(int64_t layer, int64_t iteration, int64_t ep) const;
  // The busiest of rank_loads(): never below balanced.
  static double busiest_of(const std::vector<double>& rank_loads);
  // Per-expert token proportions (sums to 1); empty for skews given as a load (capacity, worst).
  std::vector<double> proportions(int64_t layer, int64_t iteration) const;
  std::string describe() const;

 private:
  double weight(int64_t layer, int64_t iteration) const;  // drift's scale of the excess skew

  const ModelSpec* model_;
  RoutingSkew base_;
  RoutingDynamics dynamics_;
  uint64_t seed_;
};

// Splits "G=0.3,drift=20,jitter=0.1" into the planner's skew spec and the dynamics. Throws
// InputError(option, ...) on a bad key or value.
struct RoutingSpec {
  std::string skew = "balanced";
  RoutingDynamics dynamics;
};
RoutingSpec parse_routing_spec(const std::string& text, const std::string& option = "--skew");

}  // namespace moe::sim
