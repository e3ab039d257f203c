#include "planner/aptmoe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "planner/errors.h"

namespace moe::aptmoe {

double popularity_metric(const std::vector<std::vector<double>>& proportions) {
  if (proportions.empty()) throw ConfigError("popularity: no layers");
  double sum = 0;
  for (const auto& layer : proportions) {
    for (double p : layer) sum += p * p;
  }
  return sum / static_cast<double>(proportions.size());
}

namespace {
std::vector<double> zipf(int64_t experts, double z) {
  std::vector<double> p(static_cast<size_t>(experts));
  double total = 0;
  for (int64_t e = 0; e < experts; ++e) {
    p[e] = std::pow(static_cast<double>(e + 1), -z);
    total += p[e];
  }
  for (double& x : p) x /= total;
  return p;
}
double g_of(const std::vector<double>& p) {
  double g = 0;
  for (double x : p) g += x * x;
  return g;
}
}  // namespace

std::vector<double> proportions_for_g(int64_t experts, double target) {
  const double uniform = 1.0 / static_cast<double>(experts);
  if (experts <= 0 || target < uniform - 1e-12 || target > 1.0) {
    throw ConfigError(fmt::format("G = {} is outside [1/E, 1] = [{:.4f}, 1] for {} experts", target,
                                  uniform, experts));
  }
  if (target <= uniform + 1e-12) return zipf(experts, 0.0);
  // G grows monotonically with z, from 1/E at z = 0 towards 1.
  double lo = 0.0, hi = 1.0;
  while (g_of(zipf(experts, hi)) < target && hi < 1e3) hi *= 2.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (g_of(zipf(experts, mid)) < target ? lo : hi) = mid;
  }
  return zipf(experts, 0.5 * (lo + hi));
}

ExpertCost expert_cost(int expert, double tokens, double expert_params, double bytes_per_param,
                       const Rates& rates, Pass pass) {
  const double passes = pass == Pass::kForward ? 1.0 : 2.0;
  const Flops work(2.0 * expert_params * tokens * passes);
  ExpertCost c;
  c.expert = expert;
  c.tokens = tokens;
  const Bytes weights(expert_params * bytes_per_param);
  auto eff = [](const EfficiencyCurve* curve, double size) {
    return curve ? curve->at(size) : 1.0;
  };
  const double call = 2.0 * expert_params * tokens / std::max(rates.calls, 1.0);
  c.cpu = work / (rates.cpu * eff(rates.cpu_efficiency, call));
  if (!rates.cpu_efficiency && rates.cpu_memory.value() > 0 && tokens > 0) {
    const double streams = (pass == Pass::kForward ? 1.0 : 3.0) * std::min(rates.calls, tokens);
    c.cpu = std::max(c.cpu, weights * streams / rates.cpu_memory);
  }
  c.gpu = work / (rates.gpu * eff(rates.gpu_efficiency, call * rates.gpu_curve_scale));
  c.load = rates.load_time(weights);
  return c;
}

Allocation allocate(std::vector<ExpertCost> experts, const Fixed& fixed) {
  std::stable_sort(experts.begin(), experts.end(),
                   [](const ExpertCost& a, const ExpertCost& b) { return a.tokens > b.tokens; });
  Allocation out;
  out.on_gpu.assign(experts.size(), false);
  Seconds cpu;
  for (const ExpertCost& e : experts) cpu += e.cpu;
  Seconds load = fixed.load_mha + fixed.load_gate;
  auto ratio = [&] { return load.value() > 0 ? cpu / load : HUGE_VAL; };
  out.r_trace.push_back(ratio());
  for (size_t i = 0; i < experts.size() && ratio() > 1.0; ++i) {
    out.on_gpu[i] = true;
    cpu -= experts[i].cpu;
    load += experts[i].load;
    out.r_trace.push_back(ratio());
  }
  out.experts = std::move(experts);
  out.cpu_time = cpu;
  out.load_time = load;
  out.final_r = ratio();
  return out;
}

}  // namespace moe::aptmoe
