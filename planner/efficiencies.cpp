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

Efficiencies efficiencies(const std::map<std::string, EfficiencyCurve>& curves,
                          const std::map<std::string, double>& constants) {
  auto pick = [&](const char* name, EfficiencyCurve fallback) {
    auto it = curves.find(name);
    return it == curves.end() ? fallback : it->second;
  };
  Efficiencies e;
  e.gemm = pick("gemm", defaults::gemm());
  e.alltoall_intra = pick("alltoall_intra", defaults::alltoall_intra_node());
  e.alltoall_inter = pick("alltoall_inter", defaults::alltoall_inter_node());
  e.allgather_intra = pick("allgather_intra", defaults::allgather_intra_node());
  e.allgather_inter = pick("allgather_inter", defaults::allgather_inter_node());
  e.d2d_copy = pick("d2d_copy", defaults::d2d_copy());
  for (const auto& [name, value] : constants) set_constant(e, name, value);
  return e;
}

}  // namespace moe
