#include "planner/model_stats.h"

#include <algorithm>

namespace moe {

namespace {
// flash-linear-attention's chunk length for the chunkwise gated delta rule.
constexpr double kLinearChunk = 64;
}  // namespace

double ffn_params(const ModelSpec& m, int64_t width) {
  const double h = static_cast<double>(m.hidden_size);
  return (m.gated_ffn ? 3.0 : 2.0) * h * static_cast<double>(width);
}

double indexer_params(const ModelSpec& m) {
  const AttentionSpec& a = m.attention;
  if (!a.sparse()) return 0.0;
  // DeepSeek-V3.2's Indexer: wq_b from the query's low-rank latent (or the hidden state) to
  // heads x dim, wk from the hidden state to one key of dim, its LayerNorm (weight and bias), and
  // weights_proj to one weight a head.
  const double h = static_cast<double>(m.hidden_size);
  const double heads = static_cast<double>(a.indexer_heads);
  const double dim = static_cast<double>(a.indexer_head_dim);
  const double q_in = a.q_lora_rank > 0 ? static_cast<double>(a.q_lora_rank) : h;
  return q_in * heads * dim + h * dim + 2.0 * dim + h * heads;
}

double latent_duplicated_params(const ModelSpec& m) {
  const AttentionSpec& a = m.attention;
  if (a.kind != AttentionKind::kLatent) return 0.0;
  const double h = static_cast<double>(m.hidden_size);
  const double r = static_cast<double>(a.q_lora_rank), r_kv = static_cast<double>(a.kv_lora_rank);
  return (a.q_lora_rank > 0 ? h * r + r : 0.0) +
         h * (r_kv + static_cast<double>(a.qk_rope_head_dim)) + r_kv + indexer_params(m);
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
    return q + kv + o + indexer_params(m);
  }
  const double d = static_cast<double>(a.head_dim);
  const double q_width = heads * d;
  const double kv_width = static_cast<double>(a.num_kv_heads) * d;
  double p = h * q_width + 2.0 * h * kv_width + q_width * h;
  if (a.output_gate) p += h * q_width;  // the gate half of q_proj
  if (a.bias == AttentionBias::kQkv || a.bias == AttentionBias::kAll) p += q_width + 2.0 * kv_width;
  if (a.bias == AttentionBias::kAll) p += h;
  return p;
}

double linear_attention_params(const ModelSpec& m) {
  const LinearAttentionSpec& l = m.linear_attention;
  const double h = static_cast<double>(m.hidden_size);
  const double k = static_cast<double>(l.key_width()), v = static_cast<double>(l.value_width());
  const double nv = static_cast<double>(l.value_heads);
  const double conv = (2.0 * k + v) * static_cast<double>(l.conv_kernel);
  const double norm = static_cast<double>(l.value_head_dim);
  if (l.kind == LinearAttentionKind::kKimiDelta) {
    // Kimi Linear's KimiDeltaAttention: q_proj, k_proj, v_proj [h -> K, K, V], a depthwise conv
    // each, the per-channel decay f_a [h -> r], f_b [r -> K] with dt_bias (K) and A_log (a head),
    // b_proj [h -> n_v] for beta, the output gate g_a [h -> r], g_b [r -> V] (or one g_proj
    // [h -> V] at full rank), o_norm over d_v and o_proj [V -> h].
    const double r = static_cast<double>(l.gate_rank);
    const double output_gate = l.full_rank_output_gate ? h * v : h * r + r * v;
    return h * (2.0 * k + v) + conv + h * r + r * k + k + nv + h * nv + output_gate + norm + v * h;
  }
  // Qwen3-Next's GatedDeltaNet: in_proj_qkvz [h -> 2K + 2V] (q, k, v and the output gate z),
  // in_proj_ba [h -> 2 n_v] (beta and the decay's input), the depthwise conv over q, k and v
  // ((2K + V) x taps), dt_bias and A_log (n_v each), the gated RMSNorm over d_v, and
  // out_proj [V -> h]. Qwen3.5 splits the projections; the count is the same.
  return h * (2.0 * k + 2.0 * v) + h * 2.0 * nv + conv + 2.0 * nv + norm + v * h;
}

namespace {
// Multiply-adds a token and value head of the chunkwise gated delta rule (below).
double delta_rule_macs(const LinearAttentionSpec& l) {
  const double dk = static_cast<double>(l.key_head_dim), dv = static_cast<double>(l.value_head_dim);
  return 3.0 * dk * dv + kLinearChunk * (3.0 * dk + 2.0 * dv) + kLinearChunk * kLinearChunk / 3.0;
}
}  // namespace

double linear_attention_flops_per_token(const ModelSpec& m) {
  // The chunkwise gated delta rule (Yang et al., Gated Delta Networks, Sec. 3.3) per value head
  // and chunk of C tokens: K K^T, W = T K, U = T V and the masked Q K^T (3 C^2 d_k + C^2 d_v
  // multiply-adds with (Q K^T)(U - W S)), W S^T, Q S^T and the state update K^T(U - W S)
  // (3 C d_k d_v), and the triangular solve behind T (C^3 / 3). Per token, times 2 FLOPs:
  // 2 (3 d_k d_v + C (3 d_k + 2 d_v) + C^2 / 3), at flash-linear-attention's C = 64. Linear in
  // the sequence: 5.9 MFLOP a token for Qwen3-Next's 32 heads of 128, at any length.
  // Decision: Kimi Delta Attention runs the same chunkwise products (its per-channel decay
  // scales K and Q element-wise before them, which we leave out), so it costs the same here.
  const LinearAttentionSpec& l = m.linear_attention;
  return static_cast<double>(l.value_heads) * 2.0 * delta_rule_macs(l);
}

double linear_attention_scan_share(const ModelSpec& m) {
  const LinearAttentionSpec& l = m.linear_attention;
  const double total = delta_rule_macs(l);
  return total > 0 ? 2.0 * static_cast<double>(l.key_head_dim * l.value_head_dim) / total : 0.0;
}

LayerParams layer_params(const ModelSpec& m, bool moe_layer, bool linear) {
  const double h = static_cast<double>(m.hidden_size);
  LayerParams p;
  p.attention = linear ? linear_attention_params(m) : attention_params(m);
  p.linear = linear;
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
  for (size_t i = 0; i < m.moe_layer.size(); ++i) {
    out.layers.push_back(
        layer_params(m, m.moe_layer[i], !m.linear_layer.empty() && m.linear_layer[i]));
  }
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
  const double heads = static_cast<double>(a.num_heads);
  const double per_key = 2.0 * heads * static_cast<double>(a.qk_head_dim() + a.value_head_dim());
  const double windowed = static_cast<double>(m.num_windowed_layers());
  const double linear = static_cast<double>(m.num_linear_layers());
  const double layers = static_cast<double>(m.num_layers);
  const double keys = (layers - windowed - linear) * attended_keys(seq_len, 0) +
                      windowed * attended_keys(seq_len, a.sliding_window, a.chunked_window);
  TokenFlops f;
  f.forward_matmul = Flops(2.0 * matmul);
  f.forward_linear = Flops(linear * linear_attention_flops_per_token(m));
  f.forward_attention = Flops(per_key * keys) + f.forward_linear;
  if (a.sparse()) {
    // DSA runs MLA in MQA mode: a selected latent entry (kv_lora + rope) serves every head, 2 a
    // (r_kv + d_rope) FLOPs for the score and 2 a r_kv for the value (the up-projections fold into
    // q and the output, as many FLOPs as MHA mode's k/v up-projection, which the matmul count
    // already holds). That pair costs 3.4x an MHA-mode pair for DeepSeek-V3.2, so below about
    // 14K tokens DeepSeek runs a masked MHA mode instead: we price the cheaper of the two. The
    // indexer scores every earlier key, 2 heads x dim a pair, at the attention kernels' rate
    // (DeepSeek runs it in FP8; we keep BF16's peak); fused kernels keep no s x s score matrix.
    const double r_kv = static_cast<double>(a.kv_lora_rank);
    const double sparse_per_key =
        2.0 * heads * (2.0 * r_kv + static_cast<double>(a.qk_rope_head_dim));
    const double dense = per_key * attended_keys(seq_len, 0);
    const double sparse = sparse_per_key * attended_keys(seq_len, a.sparse_topk);
    f.forward_indexer =
        Flops(layers * 2.0 * static_cast<double>(a.indexer_heads * a.indexer_head_dim) *
              attended_keys(seq_len, 0));
    f.forward_attention = Flops(layers * std::min(dense, sparse)) + f.forward_indexer;
  }
  return f;
}

}  // namespace moe
