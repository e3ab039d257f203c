#include "planner/efficiencies.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <vector>

#include "planner/default_efficiency.h"
#include "planner/errors.h"

namespace moe {

namespace {
// The constants in microseconds, by the name a calibration file gives them.
struct NamedDuration {
  const char* name;
  Seconds& (*of)(Efficiencies&);
};
constexpr NamedDuration kDurations[] = {
    {"pipeline_chunk_overhead_us",
     [](Efficiencies& e) -> Seconds& { return e.pipeline_chunk_overhead; }},
    {"dispatch_round_overhead_us",
     [](Efficiencies& e) -> Seconds& { return e.dispatch_round_overhead; }},
    {"allocator_retry_us", [](Efficiencies& e) -> Seconds& { return e.allocator_retry; }},
    {"host_attention_us", [](Efficiencies& e) -> Seconds& { return e.host.attention; }},
    {"host_router_us", [](Efficiencies& e) -> Seconds& { return e.host.router; }},
    {"host_dense_ffn_us", [](Efficiencies& e) -> Seconds& { return e.host.dense_ffn; }},
    {"host_experts_alltoall_us",
     [](Efficiencies& e) -> Seconds& { return e.host.experts_alltoall; }},
    {"host_experts_flex_us", [](Efficiencies& e) -> Seconds& { return e.host.experts_flex; }},
    {"host_experts_allgather_us",
     [](Efficiencies& e) -> Seconds& { return e.host.experts_allgather; }},
};
// The SM counts, by the name a calibration file gives them.
struct NamedCount {
  const char* name;
  double Efficiencies::*member;
};
constexpr NamedCount kCounts[] = {
    {"ep_comm_sms_deepep", &Efficiencies::ep_comm_sms_deepep},
    {"ep_comm_sms_nccl", &Efficiencies::ep_comm_sms_nccl},
};
}  // namespace

void set_constant(Efficiencies& e, const std::string& name, double value) {
  if (name == "attention_core" || name == "attention_latent" || name == "memory_bound") {
    if (!(value > 0 && value <= 1))
      throw ConfigError(fmt::format("{} is a fraction {}in (0, 1], not {}", name,
                                    name == "attention_latent" ? "" : "of peak ", value));
    if (name == "attention_core")
      e.attention_core = EfficiencyCurve::constant(value);
    else
      (name == "memory_bound" ? e.memory_bound : e.attention_latent) = value;
    return;
  }
  for (const NamedDuration& d : kDurations) {
    if (name != d.name) continue;
    if (!(value >= 0 && std::isfinite(value)))
      throw ConfigError(fmt::format("{} must be a non-negative number of microseconds", name));
    d.of(e) = Seconds(value * 1e-6);
    return;
  }
  for (const NamedCount& c : kCounts) {
    if (name != c.name) continue;
    if (!(value >= 0 && value <= 1024))
      throw ConfigError(fmt::format("{} must be a count of SMs in [0, 1024]", name));
    e.*c.member = value;
    return;
  }
  std::vector<std::string> known{"attention_core", "attention_latent", "memory_bound"};
  for (const NamedCount& c : kCounts) known.emplace_back(c.name);
  for (const NamedDuration& d : kDurations) known.emplace_back(d.name);
  throw ConfigError(fmt::format("unknown constant '{}' ({})", name, fmt::join(known, ", ")));
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
    {"gemm_fp8", &Efficiencies::gemm_fp8, defaults::gemm_fp8},
    {"gemm_fp8_block", &Efficiencies::gemm_fp8_block, defaults::gemm_fp8_block},
    {"gemm_mxfp8", &Efficiencies::gemm_mxfp8, defaults::gemm_mxfp8},
    {"attention_core", &Efficiencies::attention_core, defaults::attention_core},
    {"alltoall_intra", &Efficiencies::alltoall_intra, defaults::alltoall_intra_node},
    {"alltoall_inter", &Efficiencies::alltoall_inter, defaults::alltoall_inter_node},
    {"allgather_intra", &Efficiencies::allgather_intra, defaults::allgather_intra_node},
    {"allgather_inter", &Efficiencies::allgather_inter, defaults::allgather_inter_node},
    {"d2d_copy", &Efficiencies::d2d_copy, defaults::d2d_copy},
    {"pcie_h2d", &Efficiencies::pcie_h2d, defaults::pcie_h2d},
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

Efficiencies without_host_time(Efficiencies e) {
  for (Seconds* s : e.host.all()) *s = Seconds(0);
  return e;
}

Efficiencies paper_era_efficiencies(const std::map<std::string, EfficiencyCurve>& curves,
                                    const std::map<std::string, double>& constants) {
  Efficiencies e = without_host_time(efficiencies(curves));
  if (!curves.count("attention_core")) {
    e.attention_core = EfficiencyCurve::constant(0.5);
    e.attention_latent = 1.0;
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
  std::map<std::string, double> out{{"attention_latent", e.attention_latent},
                                    {"memory_bound", e.memory_bound}};
  Efficiencies copy = e;
  for (const NamedDuration& d : kDurations) out.emplace(d.name, d.of(copy).value() * 1e6);
  for (const NamedCount& c : kCounts) out.emplace(c.name, e.*c.member);
  return out;
}

}  // namespace moe
