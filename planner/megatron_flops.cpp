#include "planner/megatron_flops.h"

namespace moe {

int64_t megatron_padded_vocab(int64_t vocab, int64_t tp) {
  const int64_t multiple = 128 * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

Flops megatron_iteration_flops(const ModelSpec& m, int64_t seq_len, int64_t global_batch,
                               int64_t tp) {
  const double h = static_cast<double>(m.hidden_size);
  const double s = static_cast<double>(seq_len);
  const double heads = static_cast<double>(m.attention.num_heads);
  // The MTP modules repeat the last layer: MoE if it is.
  const double mtp = static_cast<double>(m.mtp_layers);
  const bool last_moe = !m.moe_layer.empty() && m.moe_layer.back();
  const double moe_layers = static_cast<double>(m.num_moe_layers()) + (last_moe ? mtp : 0.0);
  const double dense_layers = static_cast<double>(m.num_dense_layers()) + (last_moe ? 0.0 : mtp);
  const double layers = static_cast<double>(m.num_layers) + mtp;
  // 3 (forward, wgrad, dgrad) x 2 (FLOPs per multiply-add).
  constexpr double k = 6.0;
  const double ffn_matrices = m.gated_ffn ? 3.0 : 2.0;

  const double mlp = k * h * ffn_matrices *
                     (static_cast<double>(m.dense_ffn_size) * dense_layers +
                      static_cast<double>(m.expert_ffn_size * m.top_k) * moe_layers +
                      static_cast<double>(m.shared_ffn_total()) * moe_layers);

  const AttentionSpec& a = m.attention;
  double attention = 0;
  if (a.kind == AttentionKind::kLatent) {
    const double nope = static_cast<double>(a.qk_nope_head_dim);
    const double rope = static_cast<double>(a.qk_rope_head_dim);
    const double v = static_cast<double>(a.v_head_dim);
    const double q_lora = static_cast<double>(a.q_lora_rank);
    const double kv_lora = static_cast<double>(a.kv_lora_rank);
    const double q_term =
        a.q_lora_rank == 0 ? h * heads * (nope + rope) : q_lora * (h + heads * (nope + rope) + 1.0);
    attention = k * (q_term + kv_lora * (h + heads * (nope + v) + 1.0) + h * rope + heads * v * h +
                     s * heads * (nope + rope) / 2.0 + s * heads * v / 2.0);
  } else {
    const double q = static_cast<double>(a.head_dim) * heads;
    const double kv = static_cast<double>(a.head_dim * a.num_kv_heads);
    const double gate = a.output_gate ? q : 0.0;  // gate_projection_size
    attention = k * (h * (q + 2.0 * kv + gate) + q * s / 2.0 * 2.0 + q * h);
  }
  // Gated DeltaNet layers as Megatron-Core counts them (linear_self_attn_term): in_proj, the
  // conv, 4 n_v d_v^2 for the delta rule (KK^T, VK^T, S(a(I - bKK^T)) and SQ) and out_proj.
  // Megatron-Core has no Kimi Delta Attention: its layers count the same way with KDA's own
  // projections (q, k, v, beta and the low-rank decay and output gates) as in_proj.
  const LinearAttentionSpec& l = m.linear_attention;
  const double linear_layers = static_cast<double>(m.num_linear_layers());
  const double qk = static_cast<double>(l.key_width()), vw = static_cast<double>(l.value_width());
  const double nv = static_cast<double>(l.value_heads), dv = static_cast<double>(l.value_head_dim);
  double in_proj = h * (2.0 * qk + 2.0 * vw + 2.0 * nv);
  if (l.kind == LinearAttentionKind::kKimiDelta) {
    const double r = static_cast<double>(l.gate_rank);
    in_proj =
        h * (2.0 * qk + vw + nv) + r * (h + qk) + (l.full_rank_output_gate ? h * vw : r * (h + vw));
  }
  const double linear = k * (in_proj + static_cast<double>(l.conv_kernel) * (2.0 * qk + vw) +
                             nv * dv * dv * 4.0 + h * vw);

  const double mtp_extra = k * mtp * (3.0 * h + 2.0 * h * h);
  const double logits =
      k * h * static_cast<double>(megatron_padded_vocab(m.vocab_size, tp)) * (mtp + 1.0);
  const double per_token =
      mlp + attention * (layers - linear_layers) + linear * linear_layers + mtp_extra + logits;
  return Flops(per_token * s * static_cast<double>(global_batch));
}

double megatron_logged_tflops(const ModelSpec& m, int64_t seq_len, int64_t global_batch, int64_t tp,
                              int64_t gpus, Seconds iteration) {
  if (gpus <= 0 || !(iteration.value() > 0)) return 0.0;
  return megatron_iteration_flops(m, seq_len, global_batch, tp).value() /
         (iteration.value() * 1e12 * static_cast<double>(gpus));
}

}  // namespace moe
