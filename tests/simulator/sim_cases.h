// Plans, models and clusters the simulator tests share, and the simulated iteration against the
// planner's for them.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "planner/io/loaders.h"
#include "planner/search.h"
#include "simulator/training_sim.h"
#include "test_paths.h"

namespace moe::sim {

inline ClusterSpec cluster(const std::string& name) {
  return io::load_cluster(std::string(MOEPLAN_SOURCE_DIR) + "/topologies/" + name + ".json");
}

inline PlanChoice choice(const ModelSpec& m, const std::string& layout) {
  PlanChoice c;
  c.parallel = resolve(parse_parallel(layout));
  check(c.parallel, m);
  c.seq_len = 4096;
  return c;
}

// A model file of the given sizes (GQA attention), for shapes no shipped model has.
inline ModelSpec sized_model(const std::string& name, int64_t layers, int64_t hidden, int64_t vocab,
                             int64_t heads, int64_t kv_heads, int64_t head_dim,
                             const nlohmann::json& ffn, const nlohmann::json& moe,
                             const nlohmann::json& more = nullptr) {
  nlohmann::json file = {
      {"format", "moeplan-model/1"},
      {"name", name},
      {"num_layers", layers},
      {"hidden_size", hidden},
      {"vocab_size", vocab},
      {"attention",
       {{"type", "gqa"}, {"num_heads", heads}, {"num_kv_heads", kv_heads}, {"head_dim", head_dim}}},
      {"ffn", ffn}};
  if (!moe.is_null()) file["moe"] = moe;
  if (!more.is_null()) file.update(more);
  return io::model_from_json(file, name + ".json");
}

inline double relative(const TimeContext& ctx, const ClusterSpec& cl, const PlanChoice& c,
                       bool every_gpu = false) {
  TrainingOptions o;
  o.every_gpu = every_gpu;
  const TrainingReport r = simulate_training(ctx, cl, c, o);
  return r.mean_iteration / estimate_time(ctx, c).iteration - 1.0;
}

// relative() for `layout` of `m` on topologies/`cluster_name` at `seq` tokens, with the plan's
// switches set by `set`.
inline double relative_at(const ModelSpec& m, const std::string& cluster_name, int64_t seq,
                          const std::string& layout, const std::function<void(PlanChoice&)>& set) {
  const ClusterSpec cl = cluster(cluster_name);
  const TimeContext ctx = make_time_context(m, cl, efficiencies(), RoutingSkew{}, seq);
  PlanChoice c = choice(m, layout);
  c.seq_len = seq;
  set(c);
  return relative(ctx, cl, c);
}

inline ModelSpec shipped_model(const std::string& file) {
  return io::load_model(std::string(MOEPLAN_SOURCE_DIR) + "/models/" + file);
}

// DeepSeekMoE-16B cut to 4 layers (its dense first layer and three MoE layers).
inline ModelSpec deepseekmoe_four_layers() {
  ModelSpec m = shipped_model("deepseekmoe-16b.json");
  m.num_layers = 4;
  m.moe_layer.resize(4);
  return m;
}

// The simulated iteration over the planner's, less one, one GPU per stage.
inline double gap_on(const ModelSpec& m, const char* cluster_name, const PlanChoice& c) {
  const ClusterSpec cl = cluster(cluster_name);
  return relative(make_time_context(m, cl, efficiencies(), RoutingSkew{}, 4096), cl, c);
}

// The same on APTMoE's four 8 x A800-40GB nodes, PCIe only (C1+G4).
inline double a800_gap(const ModelSpec& m, const PlanChoice& c) {
  return gap_on(m, "aptmoe-4x-a800-40gb-c1g4", c);
}

// A shipped model's layout on 240 H800 with the switches the planner picks there: the
// all-gather dispatcher and BF16 DP gradients.
inline double megascale_gap(const char* model_file, const char* layout) {
  const ModelSpec m = shipped_model(model_file);
  PlanChoice c = choice(m, layout);
  c.dispatcher = megascale::Dispatcher::kAllGather;
  c.dp_bf16_compression = true;
  return gap_on(m, "megascale-h800-240", c);
}

// MemFine Model II on the A800 cluster with TP = 8 over the node's PCIe and EP = 32 over the
// NICs, selective recompute, the planner's switches there.
inline PlanChoice memfine_model_2_on_pcie(const ModelSpec& m, const char* layout, int zero_stage,
                                          int64_t chunks) {
  PlanChoice c = choice(m, layout);
  c.recompute = Recompute::kSelective;
  c.mact = true;
  c.fcda_chunks = chunks;
  c.dp_bf16_compression = true;
  c.zero_stage = zero_stage;
  return c;
}

}  // namespace moe::sim
