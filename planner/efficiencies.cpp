#include "planner/efficiencies.h"

#include <fmt/format.h>

#include <cmath>

#include "planner/default_efficiency.h"
#include "planner/errors.h"

namespace moe {

void set_constant(Efficiencies& e, const std::string& name, double value) {
  if (name == "attention_core" || name == "memory_bound") {
    if (!(value > 0 && value <= 1))
      throw ConfigError(fmt::format("{} is a fraction of peak in (0, 1], not {}", name, value));
    (name == "attention_core" ? e.attention_core : e.memory_bound) = value;
  } else if (name == "pipeline_chunk_overhead_us" || name == "dispatch_round_overhead_us") {
    if (!(value >= 0 && std::isfinite(value)))
      throw ConfigError(fmt::format("{} must be a non-negative number of microseconds", name));
    (name == "pipeline_chunk_overhead_us" ? e.pipeline_chunk_overhead : e.dispatch_round_overhead) =
        Seconds(value * 1e-6);
  } else {
    throw ConfigError(fmt::format(
        "unknown constant '{}' (attention_core, memory_bound, pipeline_chunk_overhead_us, "
        "dispatch_round_overhead_us)",
        name));
  }
}

namespace {
// The curves a calibration file names, where each lives in Efficiencies, and its default.
struct NamedCurve {
  const char* name;
  EfficiencyCurve Efficiencies::*member;
  EfficiencyCurve (*fallback)();
};
constexpr NamedCurve kCurves[] = {
    {"gemm", &Efficiencies::gemm, defaults::gemm},
    {"alltoall_intra", &Efficiencies::alltoall_intra, defaults::alltoall_intra_node},
    {"alltoall_inter", &Efficiencies::alltoall_inter, defaults::alltoall_inter_node},
    {"allgather_intra", &Efficiencies::allgather_intra, defaults::allgather_intra_node},
    {"allgather_inter", &Efficiencies::allgather_inter, defaults::allgather_inter_node},
    {"d2d_copy", &Efficiencies::d2d_copy, defaults::d2d_copy},
};
}  // namespace

Efficiencies efficiencies(const std::map<std::string, EfficiencyCurve>& curves,
                          const std::map<std::string, double>& constants) {
  Efficiencies e;
  for (const NamedCurve& c : kCurves) {
    auto it = curves.find(c.name);
    e.*c.member = it == curves.end() ? c.fallback() : it->second;
  }
  for (const auto& [name, value] : constants) set_constant(e, name, value);
  return e;
}

std::map<std::string, EfficiencyCurve> curves_of(const Efficiencies& e) {
  std::map<std::string, EfficiencyCurve> out;
  for (const NamedCurve& c : kCurves) out.emplace(c.name, e.*c.member);
  return out;
}

std::map<std::string, double> constants_of(const Efficiencies& e) {
  return {{"attention_core", e.attention_core},
          {"memory_bound", e.memory_bound},
          {"pipeline_chunk_overhead_us", e.pipeline_chunk_overhead.value() * 1e6},
          {"dispatch_round_overhead_us", e.dispatch_round_overhead.value() * 1e6}};
}

}  // namespace moe
