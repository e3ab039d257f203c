#include "planner/model_spec.h"

#include <fmt/format.h>

#include <algorithm>

#include "planner/errors.h"

namespace moe {

int64_t ModelSpec::num_moe_layers() const {
  return std::count(moe_layer.begin(), moe_layer.end(), true);
}

std::vector<bool> ModelSpec::layer_map(int64_t num_layers, int64_t first_dense, int64_t freq,
                                       bool has_experts) {
  std::vector<bool> map(static_cast<size_t>(std::max<int64_t>(num_layers, 0)), false);
  if (!has_experts || freq <= 0) return map;
  for (int64_t i = first_dense; i < num_layers; ++i) map[i] = i % freq == 0;
  return map;
}

std::vector<bool> ModelSpec::window_map(int64_t num_layers, int64_t skip_freq) {
  std::vector<bool> map(static_cast<size_t>(std::max<int64_t>(num_layers, 0)), true);
  if (skip_freq <= 0) return map;
  for (int64_t i = 0; i < num_layers; ++i) map[static_cast<size_t>(i)] = (i + 1) % skip_freq != 0;
  return map;
}

int64_t ModelSpec::num_linear_layers() const {
  return std::count(linear_layer.begin(), linear_layer.end(), true);
}

int64_t ModelSpec::num_windowed_layers() const {
  return std::count(windowed_layer.begin(), windowed_layer.end(), true);
}

void validate(const ModelSpec& m) {
  require_field(m.num_layers > 0, "num_layers", "must be positive");
  require_field(m.hidden_size > 0, "hidden_size", "must be positive");
  require_field(m.vocab_size > 0, "vocab_size", "must be positive");
  const AttentionSpec& a = m.attention;
  require_field(a.num_heads > 0, "num_attention_heads", "must be positive");
  require_field(a.num_kv_heads > 0, "num_key_value_heads", "must be positive");
  require_field(
      a.num_heads % a.num_kv_heads == 0, "num_key_value_heads",
      fmt::format("{} query heads are not a multiple of {} KV heads", a.num_heads, a.num_kv_heads));
  if (a.kind == AttentionKind::kLatent) {
    require_field(a.kv_lora_rank > 0, "kv_lora_rank", "must be positive for latent attention");
    require_field(a.qk_nope_head_dim > 0, "qk_nope_head_dim", "must be positive");
    require_field(a.qk_rope_head_dim > 0, "qk_rope_head_dim", "must be positive");
    require_field(a.v_head_dim > 0, "v_head_dim", "must be positive");
    require_field(a.q_lora_rank >= 0, "q_lora_rank", "must not be negative");
  } else {
    require_field(a.head_dim > 0, "head_dim", "must be positive");
  }
  require_field(a.sliding_window >= 0, "sliding_window", "must not be negative");
  if (!m.linear_layer.empty()) {
    const LinearAttentionSpec& l = m.linear_attention;
    require_field(static_cast<int64_t>(m.linear_layer.size()) == m.num_layers, "layer_types",
                  fmt::format("has {} entries for {} layers", m.linear_layer.size(), m.num_layers));
    require_field(l.key_heads > 0, "linear_num_key_heads", "must be positive");
    require_field(l.value_heads > 0, "linear_num_value_heads", "must be positive");
    require_field(l.key_head_dim > 0, "linear_key_head_dim", "must be positive");
    require_field(l.value_head_dim > 0, "linear_value_head_dim", "must be positive");
    require_field(l.conv_kernel > 0, "linear_conv_kernel_dim", "must be positive");
    require_field(l.value_heads % l.key_heads == 0, "linear_num_value_heads",
                  fmt::format("{} value heads are not a multiple of {} key heads", l.value_heads,
                              l.key_heads));
    require_field(l.kind == LinearAttentionKind::kGatedDeltaNet || l.gate_rank > 0,
                  "linear_attn_config", "Kimi Delta Attention needs a positive gate rank");
    require_field(m.num_windowed_layers() == 0 && !a.sparse(), "layer_types",
                  "linear attention beside windowed or sparse attention");
  }
  require_field(a.sparse_topk >= 0, "index_topk", "must not be negative");
  if (a.sparse()) {
    require_field(a.kind == AttentionKind::kLatent, "index_topk",
                  "DeepSeek sparse attention needs latent attention (kv_lora_rank)");
    require_field(a.indexer_heads > 0, "index_n_heads", "must be positive with index_topk");
    require_field(a.indexer_head_dim > 0, "index_head_dim", "must be positive with index_topk");
    require_field(a.sliding_window == 0, "index_topk", "sparse attention with a window");
  }
  if (a.sliding_window > 0) {
    require_field(
        static_cast<int64_t>(m.windowed_layer.size()) == m.num_layers, "layer_types",
        fmt::format("has {} entries for {} layers", m.windowed_layer.size(), m.num_layers));
  } else {
    require_field(m.num_windowed_layers() == 0, "sliding_window",
                  "windowed layers need a positive window");
  }
  require_field(static_cast<int64_t>(m.moe_layer.size()) == m.num_layers, "moe_layer",
                fmt::format("has {} entries for {} layers", m.moe_layer.size(), m.num_layers));
  require_field(m.num_routed_experts >= 0, "num_routed_experts", "must not be negative");
  require_field(m.num_shared_experts >= 0, "num_shared_experts", "must not be negative");
  require_field(m.mtp_layers >= 0, "mtp_layers", "must not be negative");
  if (m.is_moe()) {
    require_field(m.expert_ffn_size > 0, "expert_ffn_size", "must be positive in an MoE model");
    require_field(m.top_k > 0, "top_k", "must be positive in an MoE model");
    require_field(m.top_k <= m.num_routed_experts, "top_k",
                  fmt::format("{} exceeds the {} routed experts", m.top_k, m.num_routed_experts));
    require_field(m.router_groups >= 1, "router_groups", "must be positive");
    require_field(m.num_routed_experts % m.router_groups == 0, "router_groups",
                  fmt::format("{} does not divide the {} routed experts", m.router_groups,
                              m.num_routed_experts));
    require_field(m.router_group_topk >= 1 && m.router_group_topk <= m.router_groups,
                  "router_group_topk",
                  fmt::format("{} is not in [1, {}] (the router groups)", m.router_group_topk,
                              m.router_groups));
    const int64_t reachable = m.router_group_topk * (m.num_routed_experts / m.router_groups);
    require_field(
        m.router_groups == 1 || m.top_k <= reachable, "router_group_topk",
        fmt::format("{} groups of {} experts hold fewer than top_k = {}", m.router_group_topk,
                    m.num_routed_experts / m.router_groups, m.top_k));
    require_field(m.num_moe_layers() > 0, "moe_layer", "no layer carries experts");
  } else {
    require_field(m.num_moe_layers() == 0, "moe_layer", "MoE layers in a model without experts");
  }
  require_field(m.num_dense_layers() == 0 || m.dense_ffn_size > 0, "dense_ffn_size",
                "must be positive when the model has dense layers");
}

}  // namespace moe
