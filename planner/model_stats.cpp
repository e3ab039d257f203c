#include "planner/model_stats.h"

namespace moe {

double ffn_params(const ModelSpec& m, int64_t width) {
  const double h = static_cast<double>(m.hidden_size);
  return (m.gated_ffn ? 3.0 : 2.0) * h * static_cast<double>(width);
}

double attention_params(const ModelSpec& m) {
  const AttentionSpec& a = m.attention;
  const double h = static_cast<double>(m.hidden_size);
  const double heads = static_cast<double>(a.num_heads);
  if (a.kind == AttentionKind::kLatent) {
    // DeepSeek-V2 MLA: q = W_uq(norm(W_dq x)), [c_kv, k_rope] = W_dkv x, [k_nope, v] = W_ukv
    // norm(c_kv), out = W_o attn. The two low-rank norms carry weights too.
    const double qk = static_cast<double>(a.qk_nope_head_dim + a.qk_rope_head_dim);
    double q = 0;
    if (a.q_lora_rank > 0) {
      const double r = static_cast<double>(a.q_lora_rank);
      q = h * r + r + r * heads * qk;
    } else {
      q = h * heads * qk;
    }
    const double r_kv = static_cast<double>(a.kv_lora_rank);
    const double kv = h * (r_kv + a.qk_rope_head_dim) + r_kv +
                      r_kv * heads * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim);
    const double o = heads * static_cast<double>(a.v_head_dim) * h;
    return q + kv + o;
  }
  const double d = static_cast<double>(a.head_dim);
  const double q_width = heads * d;
  const double kv_width = static_cast<double>(a.num_kv_heads) * d;
  double p = h * q_width + 2.0 * h * kv_width + q_width * h;
  if (a.bias == AttentionBias::kQkv || a.bias == AttentionBias::kAll) p += q_width + 2.0 * kv_width;
  if (a.bias == AttentionBias::kAll) p += h;
  return p;
}

LayerParams layer_params(const ModelSpec& m, bool moe_layer) {
  const double h = static_cast<double>(m.hidden_size);
  LayerParams p;
  p.attention = attention_params(m);
  p.norms = 2.0 * h;
  if (moe_layer) {
    p.router = h * static_cast<double>(m.num_routed_experts) + (m.shared_expert_gate ? h : 0.0);
    p.one_routed_expert = ffn_params(m, m.expert_ffn_size);
    p.routed_experts = p.one_routed_expert * static_cast<double>(m.num_routed_experts);
    p.shared_experts = ffn_params(m, m.num_shared_experts * m.expert_ffn_size) +
                       ffn_params(m, m.shared_expert_ffn_size);
  } else {
    p.dense_ffn = ffn_params(m, m.dense_ffn_size);
  }
  return p;
}

ModelParams count_params(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double v = static_cast<double>(m.vocab_size);
  ModelParams out;
  out.layers.reserve(m.moe_layer.size());
  for (bool moe_layer : m.moe_layer) out.layers.push_back(layer_params(m, moe_layer));
  out.embedding = v * h;
  out.output_head = m.tied_embeddings ? 0.0 : v * h;
  out.final_norm = h;
  if (m.mtp_layers > 0) {
    // DeepSeek-V3 MTP module: enorm + hnorm, eh_proj [2h -> h], one MoE block, a final norm;
    // the checkpoint also stores its own copy of embedding and head, which the published
    // 671 B + 14 B split counts on the MTP side.
    const LayerParams block = layer_params(m, m.is_moe());
    const double module = 2.0 * h + 2.0 * h * h + block.total() + h + out.embedding +
                          (m.tied_embeddings ? 0.0 : v * h);
    out.mtp = module * static_cast<double>(m.mtp_layers);
  }
  return out;
}

double ModelParams::total() const {
  double t = embedding + output_head + final_norm;
  for (const LayerParams& l : layers) t += l.total();
  return t;
}

double last_stage_head_params(const ModelParams& all, bool also_first) {
  if (all.output_head > 0) return all.output_head;
  return also_first ? 0.0 : all.embedding;
}

double ModelParams::attention() const {
  double t = 0;
  for (const LayerParams& l : layers) t += l.attention;
  return t;
}

double ModelParams::routed_experts() const {
  double t = 0;
  for (const LayerParams& l : layers) t += l.routed_experts;
  return t;
}

double ModelParams::active(const ModelSpec& m) const {
  double t = embedding + output_head + final_norm;
  for (const LayerParams& l : layers) {
    t += l.total() - l.routed_experts + l.one_routed_expert * static_cast<double>(m.top_k);
  }
  return t;
}

double attended_keys(int64_t seq_len, int64_t window, bool chunked) {
  const double s = static_cast<double>(seq_len);
  const double w = static_cast<double>(window);
  if (window <= 0 || seq_len <= window) return s / 2.0;
  if (!chunked) return w - w * w / (2.0 * s);
  const double whole = static_cast<double>(seq_len / window);
  const double rest = static_cast<double>(seq_len % window);
  return (whole * w * w + rest * rest) / (2.0 * s);
}

TokenFlops flops_per_token(const ModelSpec& m, int64_t seq_len) {
  const ModelParams p = count_params(m);
  // Matrices only: norms are element-wise, the embedding is a lookup.
  double matmul = p.output_head > 0 ? p.output_head : p.embedding;  // tied: the head reuses it
  for (const LayerParams& l : p.layers) {
    matmul += l.attention + l.router + l.shared_experts + l.dense_ffn +
              l.one_routed_expert * static_cast<double>(m.top_k);
  }
  // Per token: QK^T is 2 a d_qk FLOPs per attended key and AV 2 a d_v; causal masking halves
  // the keys, a window caps them.
  const AttentionSpec& a = m.attention;
  const double per_key = 2.0 * static_cast<double>(a.num_heads) *
                         static_cast<double>(a.qk_head_dim() + a.value_head_dim());
  const double windowed = static_cast<double>(m.num_windowed_layers());
  const double keys = (static_cast<double>(m.num_layers) - windowed) * attended_keys(seq_len, 0) +
                      windowed * attended_keys(seq_len, a.sliding_window, a.chunked_window);
  TokenFlops f;
  f.forward_matmul = Flops(2.0 * matmul);
  f.forward_attention = Flops(per_key * keys);
  return f;
}

}  // namespace moe
