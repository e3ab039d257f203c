// ModelSpec: the architecture of a (MoE) transformer, built once by a loader.
//
// One struct covers dense models (no routed experts), classic MoE (Mixtral), fine-grained MoE
// with shared experts (DeepSeek, Qwen) and multi-head latent attention (DeepSeek-V2/V3). Nothing
// downstream reads JSON: the loaders in planner/io fill this in and call validate().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe {

enum class AttentionKind { kMultiHead, kLatent };  // MHA/GQA/MQA, or MLA (DeepSeek-V2/V3)
enum class AttentionBias { kNone, kQkv, kAll };    // Qwen2: qkv only; Phi-3.5-MoE: all four

struct AttentionSpec {
  AttentionKind kind = AttentionKind::kMultiHead;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // GQA groups; equals num_heads for MHA
  int64_t head_dim = 0;      // per-head width of q, k and v for MHA/GQA
  AttentionBias bias = AttentionBias::kNone;
  // MLA only (DeepSeek-V2 eq. 9-11): low-rank q and kv projections.
  int64_t q_lora_rank = 0;  // 0 means q is projected directly from the hidden state
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // Sliding-window attention (Mistral, gpt-oss): a windowed layer's query sees at most this many
  // keys, itself included (Megatron's --window-size W,0); 0: every layer attends causally to all.
  int64_t sliding_window = 0;
  // Llama 4's chunked attention: a windowed layer's query sees the keys of its own block of
  // sliding_window tokens (block-diagonal causal), not the last sliding_window ones.
  bool chunked_window = false;
  // DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5; MLA only): a lightning indexer of
  // indexer_heads heads of indexer_head_dim scores every earlier key, and each query attends to
  // the sparse_topk best (Megatron's --dsa-indexer-topk); 0: dense attention.
  int64_t sparse_topk = 0;
  int64_t indexer_heads = 0;
  int64_t indexer_head_dim = 0;
  bool sparse() const { return sparse_topk > 0; }
  // Qwen3-Next's gated attention: q_proj also yields a sigmoid gate on the attention output
  // (Megatron's --attention-output-gate), doubling the query projection.
  bool output_gate = false;

  // Width of one query/key head (the h_d of MemFine Table 2) and of one value head.
  int64_t qk_head_dim() const {
    return kind == AttentionKind::kLatent ? qk_nope_head_dim + qk_rope_head_dim : head_dim;
  }
  int64_t value_head_dim() const { return kind == AttentionKind::kLatent ? v_head_dim : head_dim; }
};

// Linear attention: a layer replaces softmax attention with a gated delta-rule recurrence over
// key_heads x key_head_dim keys and value_heads x value_head_dim values (q and k repeated up to
// the value heads), after a depthwise causal convolution of conv_kernel taps over q, k and v.
//   Gated DeltaNet (Qwen3-Next, Qwen3.5): one scalar decay and beta a value head, a full-rank
//     output gate z.
//   Kimi Delta Attention (Kimi Linear): as many key as value heads, a decay per key channel
//     (f_a [h -> gate_rank] then f_b [gate_rank -> K]), a beta a head, and an output gate that
//     is low-rank too (g_a, g_b) unless full_rank_output_gate.
enum class LinearAttentionKind { kGatedDeltaNet, kKimiDelta };

struct LinearAttentionSpec {
  int64_t key_heads = 0;
  int64_t value_heads = 0;
  int64_t key_head_dim = 0;
  int64_t value_head_dim = 0;
  int64_t conv_kernel = 0;
  LinearAttentionKind kind = LinearAttentionKind::kGatedDeltaNet;
  int64_t gate_rank = 0;  // Kimi Delta Attention only
  bool full_rank_output_gate = false;
  int64_t key_width() const { return key_heads * key_head_dim; }
  int64_t value_width() const { return value_heads * value_head_dim; }
  const char* name() const {
    return kind == LinearAttentionKind::kKimiDelta ? "Kimi Delta Attention" : "Gated DeltaNet";
  }
};

struct ModelSpec {
  std::string name;
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  AttentionSpec attention;
  int64_t dense_ffn_size = 0;      // FFN width of dense layers
  int64_t num_routed_experts = 0;  // 0: a dense model
  int64_t num_shared_experts = 0;  // DeepSeek style: each of expert_ffn_size
  int64_t expert_ffn_size = 0;
  int64_t shared_expert_ffn_size = 0;  // Qwen2-MoE style: one shared FFN of this width (0: none)
  bool shared_expert_gate = false;     // Qwen2-MoE scales the shared expert by a sigmoid gate
  int64_t top_k = 0;
  // Group-limited routing (DeepSeek-V2/V3, Megatron --moe-router-num-groups and
  // --moe-router-group-topk): the experts form router_groups contiguous groups and a token's
  // top_k come from its best router_group_topk groups. 1 and 1: routing over all experts.
  int64_t router_groups = 1;
  int64_t router_group_topk = 1;
  int64_t vocab_size = 0;
  bool gated_ffn = true;  // SwiGLU (three matrices) or a plain two-matrix FFN
  bool tied_embeddings = false;
  int64_t mtp_layers = 0;  // DeepSeek-V3 multi-token-prediction modules
  // moe_layer[i]: layer i carries routed experts; otherwise it has a dense FFN.
  std::vector<bool> moe_layer;
  // windowed_layer[i]: layer i's attention is windowed (attention.sliding_window keys); empty
  // when the model has no window.
  std::vector<bool> windowed_layer;
  // linear_layer[i]: layer i is linear attention (linear_attention); empty when
  // every layer runs softmax attention.
  LinearAttentionSpec linear_attention;
  std::vector<bool> linear_layer;

  bool is_moe() const { return num_routed_experts > 0; }
  int64_t num_moe_layers() const;
  int64_t num_dense_layers() const { return num_layers - num_moe_layers(); }
  // FFN width that a routed token sees in total (shared part included), for compute.
  int64_t shared_ffn_total() const {
    return num_shared_experts * expert_ffn_size + shared_expert_ffn_size;
  }

  // Builds moe_layer from the usual knobs: the first `first_dense` layers are dense, then every
  // `freq`-th layer (counted from layer 0, as HF DeepSeek does) is MoE.
  static std::vector<bool> layer_map(int64_t num_layers, int64_t first_dense, int64_t freq,
                                     bool has_experts);
  // Megatron's --window-attn-skip-freq N: every N-th layer (1-based) attends fully, the rest are
  // windowed; N = 0 windows every layer.
  static std::vector<bool> window_map(int64_t num_layers, int64_t skip_freq);
  int64_t num_windowed_layers() const;
  int64_t num_linear_layers() const;
};

// Throws ConfigError naming the first inconsistent field (heads not divisible by KV heads, a
// top-k above the expert count, a layer map of the wrong length, ...).
void validate(const ModelSpec& m);

}  // namespace moe
