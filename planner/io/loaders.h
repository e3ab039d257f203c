// Loaders: the only place that turns files into ModelSpec, ClusterSpec, efficiency curves and
// routing popularity. Each throws InputError(file, JSON pointer, problem) on bad input,
// including cross-field checks (validate()) reported against the file.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/cluster_spec.h"
#include "planner/efficiency_curve.h"
#include "planner/model_spec.h"

namespace moe::io {

// Our model format ("format": "moeplan-model/1") or a HuggingFace config.json, told apart by
// the presence of "model_type".
ModelSpec load_model(const std::string& path);
ModelSpec model_from_json(const nlohmann::json& j, const std::string& source);
// The HF model_type values we read.
const std::vector<std::string>& supported_hf_model_types();

ClusterSpec load_cluster(const std::string& path);
ClusterSpec cluster_from_json(const nlohmann::json& j, const std::string& source);

// A calibration file's curves by name ("alltoall_inter", "allgather_intra", "d2d_copy", ...).
struct Calibration {
  std::map<std::string, EfficiencyCurve> curves;
  // The rate a compute curve's efficiencies are relative to, where the file records one
  // (reference_GFLOPS): the cluster file's peak for GEMMs, the best measured rate for the CPU.
  std::map<std::string, FlopsPerSec> reference_flops;
  // Scalars of the time model ("constants"), checked by set_constant (planner/efficiencies.h).
  std::map<std::string, double> constants;
  nlohmann::json provenance;
};
Calibration load_calibration(const std::string& path);
Calibration calibration_from_json(const nlohmann::json& j, const std::string& source);
// The same document back (curves sized in FLOPs for gemm* and cpu_*, else in bytes); what
// calibration_from_json reads as the same Calibration.
nlohmann::json calibration_to_json(const Calibration& cal);

// Per-layer, per-expert token counts (or proportions); rows are normalised to proportions.
std::vector<std::vector<double>> load_popularity(const std::string& path);
std::vector<std::vector<double>> popularity_from_json(const nlohmann::json& j,
                                                      const std::string& source);

}  // namespace moe::io
