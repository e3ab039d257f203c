#include "simulator/routing_generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "planner/errors.h"

namespace moe::sim {

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in (0, 1) from a hash of the four keys.
double uniform(uint64_t seed, int64_t layer, int64_t iteration, int64_t expert, int stream) {
  uint64_t h = splitmix(seed);
  for (uint64_t k : {static_cast<uint64_t>(layer), static_cast<uint64_t>(iteration),
                     static_cast<uint64_t>(expert), static_cast<uint64_t>(stream)})
    h = splitmix(h ^ k);
  return (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0;  // 2^53
}

double standard_normal(uint64_t seed, int64_t layer, int64_t iteration, int64_t expert) {
  // Box-Muller on two independent uniforms.
  const double u1 = uniform(seed, layer, iteration, expert, 0);
  const double u2 = uniform(seed, layer, iteration, expert, 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

RoutingGenerator::RoutingGenerator(const ModelSpec& m, RoutingSkew base, RoutingDynamics dynamics,
                                   uint64_t seed)
    : model_(&m), base_(std::move(base)), dynamics_(dynamics), seed_(seed) {}

double RoutingGenerator::weight(int64_t layer, int64_t iteration) const {
  if (dynamics_.drift_iterations <= 0) return 1.0;
  const double depth = static_cast<double>(layer + 1) /
                       static_cast<double>(std::max<int64_t>(model_->num_layers, 1));
  const double settle =
      0.25 + 0.75 * std::exp(-static_cast<double>(iteration) / dynamics_.drift_iterations);
  return depth * settle;
}

std::vector<double> RoutingGenerator::proportions(int64_t layer, int64_t iteration) const {
  const int64_t experts = model_->num_routed_experts;
  if (experts <= 0) return {};
  const double uniform_share = 1.0 / static_cast<double>(experts);
  std::vector<double> p(static_cast<size_t>(experts), uniform_share);
  if (base_.kind == RoutingSkew::Kind::kPopularity) {
    const std::vector<double>& row = base_.layer_row(layer);
    const double w = weight(layer, iteration);
    for (size_t e = 0; e < p.size() && e < row.size(); ++e)
      p[e] = uniform_share + w * (row[e] - uniform_share);
  } else if (base_.kind != RoutingSkew::Kind::kBalanced) {
    return {};
  }
  if (dynamics_.jitter > 0) {
    const double x = dynamics_.jitter;
    double sum = 0;
    for (size_t e = 0; e < p.size(); ++e) {
      p[e] *= std::exp(x * standard_normal(seed_, layer, iteration, static_cast<int64_t>(e)) -
                       0.5 * x * x);
      sum += p[e];
    }
    for (double& v : p) v /= sum;
  }
  return p;
}

std::vector<double> RoutingGenerator::rank_loads(int64_t layer, int64_t iteration,
                                                 int64_t ep) const {
  const ModelSpec& m = *model_;
  if (base_.kind == RoutingSkew::Kind::kCapacity || base_.kind == RoutingSkew::Kind::kWorst) {
    // A load, not a distribution: drift scales its excess over balanced.
    return rank_loads_with_busiest(m, ep,
                                   1.0 + weight(layer, iteration) * (base_.imbalance(m, ep) - 1.0));
  }
  return rank_loads_of(m, ep, proportions(layer, iteration));
}

double RoutingGenerator::busiest_of(const std::vector<double>& rank_loads) {
  double busiest = 1.0;
  for (double load : rank_loads) busiest = std::max(busiest, load);
  return busiest;
}

double RoutingGenerator::busiest_load(int64_t layer, int64_t iteration, int64_t ep) const {
  return busiest_of(rank_loads(layer, iteration, ep));
}

std::string RoutingGenerator::describe() const {
  std::string out = base_.describe();
  if (dynamics_.drift_iterations > 0)
    out += fmt::format(", drift over {} iterations", dynamics_.drift_iterations);
  if (dynamics_.jitter > 0) out += fmt::format(", jitter {}", dynamics_.jitter);
  return out;
}

RoutingSpec parse_routing_spec(const std::string& text, const std::string& option) {
  RoutingSpec spec;
  std::vector<std::string> base;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    const size_t eq = part.find('=');
    const std::string key = part.substr(0, eq);
    if (key != "drift" && key != "jitter") {
      base.push_back(part);
      continue;
    }
    double value = -1;
    try {
      value = std::stod(part.substr(eq == std::string::npos ? part.size() : eq + 1));
    } catch (const std::exception&) {
    }
    if (!(value >= 0) || !std::isfinite(value))
      throw InputError(option, "", fmt::format("'{}' needs a non-negative number", part));
    (key == "drift" ? spec.dynamics.drift_iterations : spec.dynamics.jitter) = value;
  }
  if (base.size() > 1)
    throw InputError(option, "", fmt::format("'{}' names more than one skew", text));
  if (!base.empty()) spec.skew = base[0];
  return spec;
}

}  // namespace moe::sim
