// Models built in code for unit tests that should not depend on files.
#pragma once

#include "planner/model_spec.h"

namespace moe::testing_models {

inline ModelSpec mixtral_8x7b() {
  ModelSpec m;
  m.name = "Mixtral-8x7B";
  m.num_layers = 32;
  m.hidden_size = 4096;
  m.attention.num_heads = 32;
  m.attention.num_kv_heads = 8;
  m.attention.head_dim = 128;
  m.num_routed_experts = 8;
  m.expert_ffn_size = 14336;
  m.top_k = 2;
  m.vocab_size = 32000;
  m.moe_layer = ModelSpec::layer_map(32, 0, 1, true);
  return m;
}

// Mixtral-8x7B's shape with a dense FFN of its experts' width in every layer.
inline ModelSpec dense_mixtral() {
  ModelSpec m = mixtral_8x7b();
  m.name = "Mixtral-8x7B dense";
  m.num_routed_experts = 0;
  m.top_k = 0;
  m.expert_ffn_size = 0;
  m.dense_ffn_size = 14336;
  m.moe_layer = ModelSpec::layer_map(32, 0, 1, false);
  return m;
}

// MemFine Table 3, model I (L = 16) or II (L = 8): DeepSeek-V3 with fewer layers.
inline ModelSpec memfine_model(int64_t layers) {
  ModelSpec m;
  m.name = "MemFine";
  m.num_layers = layers;
  m.hidden_size = 7168;
  m.attention.kind = AttentionKind::kLatent;
  m.attention.num_heads = 128;
  m.attention.num_kv_heads = 128;
  m.attention.q_lora_rank = 1536;
  m.attention.kv_lora_rank = 512;
  m.attention.qk_nope_head_dim = 128;
  m.attention.qk_rope_head_dim = 64;
  m.attention.v_head_dim = 128;
  m.dense_ffn_size = 18432;
  m.num_routed_experts = 256;
  m.num_shared_experts = 1;
  m.expert_ffn_size = 2048;
  m.top_k = 8;
  m.vocab_size = 129280;
  m.moe_layer = ModelSpec::layer_map(layers, 3, 1, true);
  return m;
}

}  // namespace moe::testing_models
