// A Calibration back to moeplan-calibration/1, as calibration_from_json reads it.
#include <fmt/format.h>

#include "planner/io/loaders.h"

namespace moe::io {

namespace {
// Compute curves are sized in FLOPs (GEMMs, attention, the CPU expert), transfers in bytes.
bool sized_in_flops(const std::string& name) {
  return name.rfind("gemm", 0) == 0 || name.rfind("cpu_", 0) == 0 || name == "attention_core";
}
}  // namespace

nlohmann::json calibration_to_json(const Calibration& cal) {
  nlohmann::json curves = nlohmann::json::object();
  for (const auto& [name, curve] : cal.curves) {
    nlohmann::json points = nlohmann::json::array();
    const char* key = sized_in_flops(name) ? "size_flops" : "size_bytes";
    for (const EfficiencyCurve::Point& p : curve.points())
      points.push_back({{key, p.size}, {"efficiency", p.efficiency}});
    nlohmann::json c = {{"points", points}};
    if (curve.reference())
      c["reference_bandwidth"] = fmt::format("{} B/s", curve.reference()->value());
    if (auto it = cal.reference_flops.find(name); it != cal.reference_flops.end())
      c["reference_GFLOPS"] = it->second.value() / 1e9;
    curves[name] = std::move(c);
  }
  nlohmann::json out = {
      {"format", "moeplan-calibration/1"},
      {"provenance", cal.provenance.is_null() ? nlohmann::json::object() : cal.provenance},
      {"curves", curves}};
  if (!cal.constants.empty()) out["constants"] = cal.constants;
  return out;
}

}  // namespace moe::io
