// Routing skew: how unevenly the router spreads tokens over experts. One type serves the
// planner (the worst GPU's received tokens for memory, its extra expert work for time), and
// later the simulator (token counts per expert) and calibration (all-to-all-v matrices).
//
// Specs, as users write them (`--skew`): `balanced`; `capacity=F` (a capacity factor caps any
// GPU at F times its balanced share); `G=x` (APTMoE eq. 2 popularity, Zipf-shaped, the most
// popular experts placed together on one EP rank); `worst` (every token of the EP group routed
// to one rank's experts); or a popularity file of observed per-expert counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/model_spec.h"

namespace moe {

struct RoutingSkew {
  enum class Kind { kBalanced, kCapacity, kPopularity, kWorst };
  Kind kind = Kind::kBalanced;
  double capacity_factor = 1.0;
  // Per layer, per expert token proportions (kPopularity); one row applies to every layer.
  std::vector<std::vector<double>> proportions;

  // The proportions row of a model layer (kPopularity): rows repeat over layers when the file
  // or spec has fewer (G=x has one for all).
  const std::vector<double>& layer_row(int64_t layer) const {
    return proportions[static_cast<size_t>(layer) % proportions.size()];
  }
  // Max over EP ranks of received tokens over the balanced share (>= 1).
  double imbalance(const ModelSpec& m, int64_t ep) const;
  // s'': tokens the busiest GPU's MoE layer receives for one micro-batch of `tokens` tokens
  // (per attention rank) from each of ep ranks.
  double received_tokens(const ModelSpec& m, int64_t ep, double tokens) const;
  // Each EP rank's received tokens over its balanced share for `layer` (mean 1): rank 0 the
  // busiest for capacity and worst, by expert placement for popularity. What calibration's
  // all-to-all-v sends; the simulator's routing drifts the same forms.
  std::vector<double> rank_loads(const ModelSpec& m, int64_t ep, int64_t layer = 0) const;
  std::string describe() const;
};

// Rank loads from per-expert proportions, rank r holding experts [r E/ep, (r+1) E/ep), each
// capped at what a rank can take (top-k copies of every token of the group).
std::vector<double> rank_loads_of(const ModelSpec& m, int64_t ep,
                                  const std::vector<double>& proportions);
// Rank 0 at `busiest` (capped likewise), the others sharing the rest evenly.
std::vector<double> rank_loads_with_busiest(const ModelSpec& m, int64_t ep, double busiest);

// Parses balanced | worst | capacity=F | G=x (x in [1/E, 1]). Throws InputError(option, ...).
RoutingSkew parse_skew(const std::string& text, const ModelSpec& m,
                       const std::string& option = "--skew");

}  // namespace moe
