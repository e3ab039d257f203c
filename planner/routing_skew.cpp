#include "planner/routing_skew.h"

#include <fmt/format.h>

#include <algorithm>

#include "planner/aptmoe.h"
#include "planner/errors.h"

namespace moe {

namespace {
// A rank cannot receive more than top-k copies of every token in the group: the worst case.
double rank_cap(const ModelSpec& m, int64_t ep) {
  const int64_t local = m.num_routed_experts / ep;
  return static_cast<double>(ep) * static_cast<double>(std::min(m.top_k, local)) /
         static_cast<double>(m.top_k);
}
}  // namespace

double RoutingSkew::imbalance(const ModelSpec& m, int64_t ep) const {
  if (!m.is_moe() || ep <= 1) return 1.0;
  const int64_t local = m.num_routed_experts / ep;
  switch (kind) {
    case Kind::kBalanced:
      return 1.0;
    case Kind::kCapacity:
      return std::max(1.0, capacity_factor);
    case Kind::kWorst:
      // Every rank's tokens go to one rank, each token to as many local experts as top-k allows.
      return rank_cap(m, ep);
    case Kind::kPopularity: {
      // Experts sorted by popularity and placed contiguously: rank 0 holds the hottest ones.
      double worst = 1.0;
      for (std::vector<double> layer : proportions) {
        std::sort(layer.rbegin(), layer.rend());
        double top = 0;
        for (int64_t e = 0; e < local && e < static_cast<int64_t>(layer.size()); ++e)
          top += layer[e];
        worst = std::max(worst, top * static_cast<double>(ep));
      }
      // A rank takes at most top-k copies of every token, however popular its experts.
      return std::min(worst, rank_cap(m, ep));
    }
  }
  return 1.0;
}

double RoutingSkew::received_tokens(const ModelSpec& m, int64_t ep, double tokens) const {
  return tokens * static_cast<double>(std::max<int64_t>(m.top_k, 1)) * imbalance(m, ep);
}

std::vector<double> rank_loads_of(const ModelSpec& m, int64_t ep, const std::vector<double>& p) {
  if (!m.is_moe() || ep <= 1)
    return std::vector<double>(static_cast<size_t>(std::max<int64_t>(ep, 1)), 1.0);
  const int64_t local = m.num_routed_experts / ep;
  std::vector<double> loads(static_cast<size_t>(ep), 1.0);
  for (int64_t r = 0; r < ep; ++r) {
    double share = 0;
    for (int64_t e = r * local; e < (r + 1) * local && e < static_cast<int64_t>(p.size()); ++e)
      share += p[static_cast<size_t>(e)];
    loads[static_cast<size_t>(r)] = std::min(share * static_cast<double>(ep), rank_cap(m, ep));
  }
  return loads;
}

std::vector<double> rank_loads_with_busiest(const ModelSpec& m, int64_t ep, double busiest) {
  if (!m.is_moe() || ep <= 1)
    return std::vector<double>(static_cast<size_t>(std::max<int64_t>(ep, 1)), 1.0);
  busiest = std::min(busiest, rank_cap(m, ep));
  std::vector<double> loads(
      static_cast<size_t>(ep),
      std::max(0.0, (static_cast<double>(ep) - busiest) / static_cast<double>(ep - 1)));
  loads[0] = busiest;
  return loads;
}

std::vector<double> RoutingSkew::rank_loads(const ModelSpec& m, int64_t ep, int64_t layer) const {
  switch (kind) {
    case Kind::kBalanced:
      return rank_loads_with_busiest(m, ep, 1.0);
    case Kind::kCapacity:
    case Kind::kWorst:
      return rank_loads_with_busiest(m, ep, imbalance(m, ep));
    case Kind::kPopularity:
      return rank_loads_of(m, ep, layer_row(layer));
  }
  return {};
}

std::string RoutingSkew::describe() const {
  switch (kind) {
    case Kind::kBalanced:
      return "balanced";
    case Kind::kCapacity:
      return fmt::format("capacity={}", capacity_factor);
    case Kind::kWorst:
      return "worst";
    case Kind::kPopularity:
      return fmt::format("popularity (G = {:.4f})", aptmoe::popularity_metric(proportions));
  }
  return "?";
}

RoutingSkew parse_skew(const std::string& text, const ModelSpec& m, const std::string& option) {
  RoutingSkew s;
  if (text == "balanced") return s;
  if (text == "worst") {
    s.kind = RoutingSkew::Kind::kWorst;
    return s;
  }
  const size_t eq = text.find('=');
  const std::string key = text.substr(0, eq);
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(eq == std::string::npos ? text.size() : eq + 1), &used);
  } catch (const std::exception&) {
    throw InputError(option, "",
                     fmt::format("'{}' is not one of balanced, worst, capacity=F, G=x", text));
  }
  if (key == "capacity") {
    if (!(value >= 1.0))
      throw InputError(option, "", fmt::format("capacity factor {} must be at least 1", value));
    s.kind = RoutingSkew::Kind::kCapacity;
    s.capacity_factor = value;
    return s;
  }
  if (key == "G") {
    if (!m.is_moe()) throw InputError(option, "", "G needs a model with routed experts");
    try {
      s.proportions = {aptmoe::proportions_for_g(m.num_routed_experts, value)};
    } catch (const ConfigError& e) {
      throw InputError(option, "", e.what());
    }
    s.kind = RoutingSkew::Kind::kPopularity;
    return s;
  }
  throw InputError(option, "",
                   fmt::format("'{}' is not one of balanced, worst, capacity=F, G=x", text));
}

}  // namespace moe
