// The Plan file (schema "moeplan-plan/1", README documents every key): what `plan --save`
// writes and `simulate`, `execute` and `whatif` read. It holds the choices, the predicted
// numbers with their breakdown, the Megatron-LM arguments and a DeepSpeed config.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "planner/cluster_spec.h"
#include "planner/model_spec.h"
#include "planner/plan.h"

namespace moe::io {

nlohmann::json plan_to_json(const Plan& p, const ModelSpec& m, const ClusterSpec& c);
// DeepSpeed config: ZeRO stage, micro-batch and accumulation, precision. EP is an argument of
// deepspeed.moe.layer.MoE (ep_size), not a config key, so it travels beside the config.
nlohmann::json deepspeed_config(const Plan& p);
// One pipeline stage's memory as both `moeplan memory --json` and the plan file write it;
// `layer_ids` lists its layers (stage_layer_label).
nlohmann::json stage_memory_json(const StageMemory& s, const std::string& layer_ids);

// Reads the choices back (the predictions are recomputed by whoever needs them).
PlanChoice plan_choice_from_json(const nlohmann::json& j, const std::string& source);
PlanChoice load_plan_choice(const std::string& path);
// The share of GPU memory a plan file was sized to (`plan --alpha`; 1 where absent). Throws
// InputError naming the file and field when it is not in (0, 1].
double planned_alpha(const nlohmann::json& plan, const std::string& source);
// The GPUs' power limit a plan file was priced under (`power_limit_W`: the cluster's, or
// `plan --power-limit`'s cap); nothing where the file gives none. Throws InputError naming the
// file and field when it is not a positive number.
std::optional<double> planned_power_limit(const nlohmann::json& plan, const std::string& source);
// The model a plan file names (its "model", empty where absent): what it was planned for, which
// a reader pricing it for another model says.
std::string planned_model(const nlohmann::json& plan);

// Writes `text` to `path` through a temporary file and a rename, so a reader never sees half a
// file and an interrupted run leaves the previous one intact. Throws InputError on failure.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace moe::io
