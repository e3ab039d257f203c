#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/io/loaders.h"

namespace moe::io {

namespace {

constexpr const char* kModelFormat = "moeplan-model/1";

AttentionBias parse_bias(ObjectReader& r, const std::string& key) {
  const std::string b = r.string_or(key, "none");
  if (b == "none") return AttentionBias::kNone;
  if (b == "qkv") return AttentionBias::kQkv;
  if (b == "all") return AttentionBias::kAll;
  r.fail(key, fmt::format("'{}' is not one of none, qkv, all", b));
}

// Layer counts size per-layer tables; no model comes near the bound, a corrupt file may.
int64_t layer_count(ObjectReader& r, const std::string& key) {
  constexpr int64_t kMaxLayers = 100000;
  const int64_t n = positive(r, key);
  if (n > kMaxLayers) r.fail(key, fmt::format("{} layers is more than {}", n, kMaxLayers));
  return n;
}

ModelSpec from_ours(ObjectReader& r) {
  ModelSpec m;
  const std::string format = r.string("format");
  if (format != kModelFormat) r.fail("format", fmt::format("'{}' is not {}", format, kModelFormat));
  m.name = r.string("name");
  m.num_layers = layer_count(r, "num_layers");
  m.hidden_size = positive(r, "hidden_size");
  m.vocab_size = positive(r, "vocab_size");
  m.tied_embeddings = r.boolean_or("tied_embeddings", false);
  m.mtp_layers = r.integer_or("mtp_layers", 0);
  r.ignore("description");

  ObjectReader a = r.object("attention");
  const std::string type = a.string("type");
  m.attention.num_heads = positive(a, "num_heads");
  if (type == "mha" || type == "gqa") {
    m.attention.kind = AttentionKind::kMultiHead;
    m.attention.num_kv_heads = a.integer_or("num_kv_heads", m.attention.num_heads);
    m.attention.head_dim = a.integer_or("head_dim", m.hidden_size / m.attention.num_heads);
    m.attention.bias = parse_bias(a, "bias");
  } else if (type == "mla") {
    m.attention.kind = AttentionKind::kLatent;
    m.attention.num_kv_heads = m.attention.num_heads;  // k and v are per head after up-projection
    m.attention.q_lora_rank = a.integer_or("q_lora_rank", 0);
    m.attention.kv_lora_rank = positive(a, "kv_lora_rank");
    m.attention.qk_nope_head_dim = positive(a, "qk_nope_head_dim");
    m.attention.qk_rope_head_dim = positive(a, "qk_rope_head_dim");
    m.attention.v_head_dim = positive(a, "v_head_dim");
    // DeepSeek Sparse Attention, under Megatron's --dsa-indexer-* names.
    if (a.has("dsa_indexer_topk")) {
      m.attention.sparse_topk = positive(a, "dsa_indexer_topk");
      m.attention.indexer_heads = positive(a, "dsa_indexer_n_heads");
      m.attention.indexer_head_dim = positive(a, "dsa_indexer_head_dim");
    }
  } else {
    a.fail("type", fmt::format("'{}' is not one of mha, gqa, mla", type));
  }
  // Megatron's names: --window-size W,0 and --window-attn-skip-freq N.
  m.attention.sliding_window = a.integer_or("window_size", 0);
  const int64_t skip_freq = a.integer_or("window_attn_skip_freq", 0);
  if (m.attention.sliding_window < 0) a.fail("window_size", "must not be negative");
  if (skip_freq < 0) a.fail("window_attn_skip_freq", "must not be negative");
  if (m.attention.sliding_window > 0)
    m.windowed_layer = ModelSpec::window_map(m.num_layers, skip_freq);
  a.finish();

  ObjectReader f = r.object("ffn");
  m.gated_ffn = f.boolean_or("gated", true);
  m.dense_ffn_size = f.integer_or("dense_size", 0);
  f.finish();

  int64_t first_dense = m.num_layers, freq = 1;
  if (r.has("moe")) {
    ObjectReader e = r.object("moe");
    m.num_routed_experts = positive(e, "routed_experts");
    m.expert_ffn_size = positive(e, "expert_size");
    m.top_k = positive(e, "top_k");
    m.router_groups = e.integer_or("router_groups", 1);
    m.router_group_topk = e.integer_or("router_group_topk", m.router_groups == 1 ? 1 : 0);
    if (m.router_groups > 1 && m.router_group_topk == 0)
      e.fail("router_group_topk", "is required with router_groups");
    m.num_shared_experts = e.integer_or("shared_experts", 0);
    m.shared_expert_ffn_size = e.integer_or("shared_expert_size", 0);
    first_dense = e.integer_or("first_dense_layers", 0);
    freq = e.integer_or("layer_freq", 1);
    if (first_dense < 0 || first_dense > m.num_layers) {
      e.fail("first_dense_layers", fmt::format("must be in [0, {}]", m.num_layers));
    }
    if (freq <= 0) e.fail("layer_freq", "must be positive");
    // Experts that no layer carries: every layer dense, or a period longer than the rest.
    if (m.is_moe() &&
        std::ranges::none_of(ModelSpec::layer_map(m.num_layers, first_dense, freq, true),
                             std::identity{})) {
      e.fail(first_dense == m.num_layers ? "first_dense_layers" : "layer_freq",
             fmt::format("leaves none of the {} layers with experts (first_dense_layers {}, "
                         "layer_freq {})",
                         m.num_layers, first_dense, freq));
    }
    e.finish();
  } else {
    r.ignore("moe");
  }
  m.moe_layer = ModelSpec::layer_map(m.num_layers, first_dense, freq, m.is_moe());
  r.finish();
  return m;
}

// --- HuggingFace config.json --------------------------------------------------------------

const std::vector<std::string> kHfTypes = {
    "deepseek",     "deepseek_v2", "deepseek_v3",      "deepseek_v32", "kimi_k2",     "kimi_k25",
    "glm4_moe",     "glm_moe_dsa", "gpt_oss",          "llama4",       "llama4_text", "minimax_m2",
    "mixtral",      "phimoe",      "qwen2_moe",        "qwen3_moe",    "qwen3_next",  "qwen3_5",
    "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "olmoe",        "llama",       "qwen2",
    "mistral",      "kimi_linear"};

// Qwen3-Next and Qwen3.5: Gated DeltaNet layers between gated softmax attention.
bool qwen_hybrid(const std::string& type) {
  return type == "qwen3_next" || type == "qwen3_5_text" || type == "qwen3_5_moe_text";
}

void hf_attention_mha(ObjectReader& r, ModelSpec& m, AttentionBias bias) {
  m.attention.kind = AttentionKind::kMultiHead;
  m.attention.num_heads = positive(r, "num_attention_heads");
  m.attention.num_kv_heads =
      r.optional_integer("num_key_value_heads").value_or(m.attention.num_heads);
  m.attention.head_dim =
      r.optional_integer("head_dim").value_or(m.hidden_size / m.attention.num_heads);
  m.attention.bias = bias;
}

// A per-layer list (layer_types, no_rope_layers, attn_type_list) must have an entry a layer.
void require_per_layer(ObjectReader& r, const std::string& key, size_t entries, int64_t layers) {
  if (static_cast<int64_t>(entries) != layers)
    r.fail(key, fmt::format("has {} entries for {} layers", entries, layers));
}

// HF's layer_types: which layers attend through a window (`windowed`, e.g. sliding_attention)
// and which fully (full_attention); any other entry is an error naming it.
std::vector<bool> hf_layer_types(ObjectReader& r, int64_t layers, const std::string& windowed) {
  const std::vector<std::string> types = r.string_array("layer_types");
  require_per_layer(r, "layer_types", types.size(), layers);
  std::vector<bool> out;
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != windowed && types[i] != "full_attention") {
      r.fail_at("layer_types", i,
                fmt::format("'{}' is not {} or full_attention", types[i], windowed));
    }
    out.push_back(types[i] == windowed);
  }
  return out;
}

// Sliding-window attention: gpt-oss windows the layers its layer_types call
// "sliding_attention" (every other one, from layer 0, when the list is absent); Mistral and
// Mixtral window every layer when sliding_window is a number (null: none). Other types attend
// fully: their sliding_window keys (Qwen's, off by default) are not read.
void hf_sliding_window(ObjectReader& r, ModelSpec& m, const std::string& type) {
  const bool every_layer = type == "mistral" || type == "mixtral";
  if (type != "gpt_oss" && !every_layer) return;
  const std::optional<int64_t> window = r.optional_integer("sliding_window");
  if (!window) return;
  if (*window <= 0) r.fail("sliding_window", "must be positive");
  m.attention.sliding_window = *window;
  if (every_layer) {
    m.windowed_layer = ModelSpec::window_map(m.num_layers, 0);
  } else if (r.has("layer_types")) {
    m.windowed_layer = hf_layer_types(r, m.num_layers, "sliding_attention");
  } else {
    m.windowed_layer = ModelSpec::window_map(m.num_layers, 2);
  }
}

// The fields every HuggingFace decoder config names alike; SwiGLU FFNs throughout.
ModelSpec hf_common(ObjectReader& r, const std::string& name) {
  ModelSpec m;
  m.name = name;
  m.num_layers = layer_count(r, "num_hidden_layers");
  m.hidden_size = positive(r, "hidden_size");
  m.vocab_size = positive(r, "vocab_size");
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  m.gated_ffn = true;
  return m;
}

// Llama 4's text model (text_config of a llama4 config, or a llama4_text config itself): every
// interleave_moe_layer_step-th layer (moe_layers when listed) has num_local_experts routed
// experts and one shared expert, both of intermediate_size, the others a dense FFN of
// intermediate_size_mlp; attention is chunked (attention_chunk_size) on the layers layer_types
// calls chunked_attention, or no_rope_layers marks 1 (RoPE layers), or all but every
// no_rope_layer_interval-th (4) by default.
ModelSpec from_hf_llama4(ObjectReader& r, const std::string& name) {
  ModelSpec m = hf_common(r, name);
  hf_attention_mha(
      r, m, r.boolean_or("attention_bias", false) ? AttentionBias::kAll : AttentionBias::kNone);
  m.num_routed_experts = positive(r, "num_local_experts");
  m.expert_ffn_size = positive(r, "intermediate_size");
  m.top_k = positive(r, "num_experts_per_tok");
  m.num_shared_experts = 1;
  m.dense_ffn_size = r.integer_or("intermediate_size_mlp", 0);
  const int64_t step = r.integer_or("interleave_moe_layer_step", 1);
  if (step <= 0) r.fail("interleave_moe_layer_step", "must be positive");
  const std::vector<int64_t> listed = r.integer_array_or_empty("moe_layers");
  m.moe_layer.assign(static_cast<size_t>(m.num_layers), false);
  for (int64_t i = 0; i < m.num_layers; ++i)
    m.moe_layer[static_cast<size_t>(i)] = listed.empty() && (i + 1) % step == 0;
  for (int64_t i : listed) {
    if (i < 0 || i >= m.num_layers)
      r.fail("moe_layers", fmt::format("layer {} is not in [0, {})", i, m.num_layers));
    m.moe_layer[static_cast<size_t>(i)] = true;
  }

  const std::optional<int64_t> chunk = r.optional_integer("attention_chunk_size");
  if (chunk) {
    if (*chunk <= 0) r.fail("attention_chunk_size", "must be positive");
    m.attention.sliding_window = *chunk;
    m.attention.chunked_window = true;
    const std::vector<int64_t> rope = r.integer_array_or_empty("no_rope_layers");
    if (r.has("layer_types")) {
      m.windowed_layer = hf_layer_types(r, m.num_layers, "chunked_attention");
    } else if (!rope.empty()) {
      require_per_layer(r, "no_rope_layers", rope.size(), m.num_layers);
      for (int64_t uses_rope : rope) m.windowed_layer.push_back(uses_rope != 0);
    } else {
      const int64_t interval = r.integer_or("no_rope_layer_interval", 4);
      if (interval <= 0) r.fail("no_rope_layer_interval", "must be positive");
      m.windowed_layer = ModelSpec::window_map(m.num_layers, interval);
    }
  }
  r.ignore_rest();
  return m;
}

// DeepSeek-V3.2 and GLM-5 (glm_moe_dsa): DeepSeek Sparse Attention's indexer on every layer.
// GLM-5.2's indexer_types may mark layers "shared" (they reuse an earlier layer's selection and
// carry no indexer), which we do not model: such a config is refused by layer.
void hf_sparse_attention(ObjectReader& r, ModelSpec& m) {
  // index_topk 0 switches the indexer off: dense MLA (the other index fields are then unused).
  if (r.has("index_topk") && r.integer_or("index_topk", 0) == 0) {
    for (const char* unused : {"index_n_heads", "index_head_dim", "indexer_types"})
      r.ignore(unused);
    return;
  }
  m.attention.sparse_topk = positive(r, "index_topk");
  m.attention.indexer_heads = positive(r, "index_n_heads");
  m.attention.indexer_head_dim = positive(r, "index_head_dim");
  if (!r.has("indexer_types")) return;
  const std::vector<std::string> types = r.string_array("indexer_types");
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "full") {
      r.fail_at("indexer_types", i,
                fmt::format("'{}' is not full; layers sharing another layer's indexer "
                            "selection are not modelled",
                            types[i]));
    }
  }
}

// Qwen3-Next / Qwen3.5: Gated DeltaNet on the layer_types entries "linear_attention" (else all but
// every full_attention_interval-th layer), gated softmax attention on the rest (attn_output_gate,
// always on in Qwen3-Next).
void hf_linear_attention(ObjectReader& r, ModelSpec& m) {
  m.attention.output_gate = r.boolean_or("attn_output_gate", true);
  LinearAttentionSpec& l = m.linear_attention;
  l.key_heads = positive(r, "linear_num_key_heads");
  l.value_heads = positive(r, "linear_num_value_heads");
  l.key_head_dim = positive(r, "linear_key_head_dim");
  l.value_head_dim = positive(r, "linear_value_head_dim");
  l.conv_kernel = positive(r, "linear_conv_kernel_dim");
  if (r.has("layer_types")) {
    m.linear_layer = hf_layer_types(r, m.num_layers, "linear_attention");
    r.ignore("full_attention_interval");
  } else {
    const int64_t interval = r.integer_or("full_attention_interval", 4);
    if (interval <= 0) r.fail("full_attention_interval", "must be positive");
    m.linear_layer = ModelSpec::window_map(m.num_layers, interval);
  }
}

// Kimi Linear: Kimi Delta Attention on the layers linear_attn_config.kda_layers lists, MLA (with
// no RoPE, mla_use_nope, which changes no weight) on its full_attn_layers; both lists 1-based and
// together every layer once. Kimi K3's text model shares the model_type but routes experts in a
// narrower latent width and mixes earlier layers' outputs (Block AttnRes): both are refused.
void hf_kimi_linear(ObjectReader& r, ModelSpec& m) {
  if (r.optional_integer("routed_expert_hidden_size").value_or(m.hidden_size) != m.hidden_size)
    r.fail("routed_expert_hidden_size", "experts in a latent width (Kimi K3) are not modelled");
  if (r.has("attn_res_block_size"))
    r.fail("attn_res_block_size", "Kimi K3's attention residuals (Block AttnRes) are not modelled");
  if (r.boolean_or("mla_use_output_gate", false))
    r.fail("mla_use_output_gate", "a gated MLA output is not modelled");
  ObjectReader c = r.object("linear_attn_config");
  LinearAttentionSpec& l = m.linear_attention;
  l.kind = LinearAttentionKind::kKimiDelta;
  l.key_heads = l.value_heads = positive(c, "num_heads");
  l.key_head_dim = l.value_head_dim = positive(c, "head_dim");
  l.gate_rank = l.key_head_dim;  // f_a and g_a project h to head_dim
  l.conv_kernel = c.integer_or("short_conv_kernel_size", 4);
  if (l.conv_kernel <= 0) c.fail("short_conv_kernel_size", "must be positive");
  l.full_rank_output_gate = c.boolean_or("use_full_rank_gate", false);
  std::vector<int> seen(static_cast<size_t>(m.num_layers), 0);
  m.linear_layer.assign(static_cast<size_t>(m.num_layers), false);
  for (const char* key : {"kda_layers", "full_attn_layers"}) {
    const std::vector<int64_t> layers = c.integer_array(key);
    for (size_t i = 0; i < layers.size(); ++i) {
      if (layers[i] < 1 || layers[i] > m.num_layers) {
        c.fail_at(key, i,
                  fmt::format("layer {} is not in [1, {}] (1-based)", layers[i], m.num_layers));
      }
      const size_t at = static_cast<size_t>(layers[i] - 1);
      if (seen[at]++) c.fail_at(key, i, fmt::format("layer {} is listed twice", layers[i]));
      m.linear_layer[at] = std::string(key) == "kda_layers";
    }
  }
  const auto missing = std::find(seen.begin(), seen.end(), 0);
  if (missing != seen.end()) {
    c.fail("full_attn_layers", fmt::format("layer {} is in neither kda_layers nor full_attn_layers",
                                           missing - seen.begin() + 1));
  }
  c.ignore_rest();  // the decay's lower bound and kernel options change no weight
}

// MiniMax-M2: Mixtral's expert fields, an optional shared FFN of shared_intermediate_size, and
// attn_type_list naming each layer's attention (1 softmax; 0 MiniMax-01's lightning linear
// attention, which we do not model). Its use_mtp / num_mtp_modules describe MTP heads the released
// checkpoint does not hold (Hugging Face counts 229 B, ours without them 228.7 B), so they are
// not counted; the q/k RMSNorms (use_qk_norm) are left out as GLM's are.
void hf_minimax_m2(ObjectReader& r, ModelSpec& m) {
  m.shared_expert_ffn_size = r.integer_or("shared_intermediate_size", 0);
  if (m.shared_expert_ffn_size < 0) r.fail("shared_intermediate_size", "must not be negative");
  if (!r.has("attn_type_list")) return;
  const std::vector<int64_t> kinds = r.integer_array_or_empty("attn_type_list");
  require_per_layer(r, "attn_type_list", kinds.size(), m.num_layers);
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] != 1) {
      r.fail_at("attn_type_list", i,
                fmt::format("attention type {} is not 1 (softmax); lightning (linear) "
                            "attention is not modelled",
                            kinds[i]));
    }
  }
}

ModelSpec from_hf(ObjectReader& r, const std::string& type, const std::string& name) {
  ModelSpec m = hf_common(r, name);
  int64_t first_dense = 0, freq = 1;
  std::vector<int64_t> dense_only;  // qwen mlp_only_layers

  const bool dsa = type == "deepseek_v32" || type == "glm_moe_dsa";
  const bool kimi_linear = type == "kimi_linear";
  if (type == "deepseek_v2" || type == "deepseek_v3" || dsa || kimi_linear) {
    m.attention.kind = AttentionKind::kLatent;
    m.attention.num_heads = positive(r, "num_attention_heads");
    m.attention.num_kv_heads = m.attention.num_heads;
    m.attention.q_lora_rank = r.optional_integer("q_lora_rank").value_or(0);
    m.attention.kv_lora_rank = positive(r, "kv_lora_rank");
    m.attention.qk_nope_head_dim = positive(r, "qk_nope_head_dim");
    m.attention.qk_rope_head_dim = positive(r, "qk_rope_head_dim");
    m.attention.v_head_dim = positive(r, "v_head_dim");
    if (dsa) hf_sparse_attention(r, m);
  } else if (type == "qwen2" || type == "qwen2_moe") {
    hf_attention_mha(r, m, AttentionBias::kQkv);  // Qwen2 always biases q, k, v
  } else if (type == "glm4_moe") {
    // GLM-4.5's attention_bias biases q, k and v only (o_proj has none). Its q/k RMSNorms
    // (use_qk_norm, 2 x head_dim weights a layer) are not counted.
    hf_attention_mha(
        r, m, r.boolean_or("attention_bias", false) ? AttentionBias::kQkv : AttentionBias::kNone);
  } else if (type == "phimoe") {
    hf_attention_mha(
        r, m, r.boolean_or("attention_bias", false) ? AttentionBias::kAll : AttentionBias::kNone);
  } else {
    hf_attention_mha(
        r, m, r.boolean_or("attention_bias", false) ? AttentionBias::kAll : AttentionBias::kNone);
  }

  if (type == "deepseek" || type == "deepseek_v2" || type == "deepseek_v3" || type == "glm4_moe" ||
      dsa || kimi_linear) {
    // GLM-4.5 names its MoE fields as DeepSeek does (shared experts of moe_intermediate_size,
    // the first first_k_dense_replace layers dense, MTP layers apart); Kimi Linear has the same
    // layout under Moonshot's names for the expert count, top-k and shared experts.
    m.dense_ffn_size = positive(r, "intermediate_size");
    m.num_routed_experts =
        r.optional_integer(kimi_linear ? "num_experts" : "n_routed_experts").value_or(0);
    if (m.is_moe()) {
      m.expert_ffn_size = positive(r, "moe_intermediate_size");
      m.top_k = positive(r, kimi_linear ? "num_experts_per_token" : "num_experts_per_tok");
      m.num_shared_experts =
          r.optional_integer(kimi_linear ? "num_shared_experts" : "n_shared_experts").value_or(0);
      first_dense = r.integer_or("first_k_dense_replace", 0);
      freq = r.integer_or("moe_layer_freq", 1);
      // DeepSeek's group-limited routing: n_group groups, the best topk_group of them per
      // token, unless topk_method says plain greedy (DeepSeek-V2-Lite writes n_group 1 anyway).
      const bool greedy = r.has("topk_method") && r.raw("topk_method") == "greedy";
      if (!greedy) {
        m.router_groups = r.integer_or("n_group", 1);
        m.router_group_topk = r.integer_or("topk_group", 1);
      }
    }
    m.mtp_layers = r.integer_or("num_nextn_predict_layers", 0);
  } else if (type == "mixtral" || type == "phimoe" || type == "gpt_oss" || type == "minimax_m2") {
    m.num_routed_experts = positive(r, "num_local_experts");
    m.expert_ffn_size = positive(r, "intermediate_size");
    // gpt-oss writes its top-k under both names.
    m.top_k = type == "gpt_oss" && !r.has("num_experts_per_tok")
                  ? positive(r, "experts_per_token")
                  : positive(r, "num_experts_per_tok");
    r.ignore("experts_per_token");
    if (type == "minimax_m2") hf_minimax_m2(r, m);
  } else if (type == "qwen2_moe" || type == "qwen3_moe" ||
             (qwen_hybrid(type) && r.has("num_experts"))) {
    m.num_routed_experts = positive(r, "num_experts");
    m.expert_ffn_size = positive(r, "moe_intermediate_size");
    m.top_k = positive(r, "num_experts_per_tok");
    m.dense_ffn_size = r.integer_or("intermediate_size", 0);
    freq = r.integer_or("decoder_sparse_step", 1);
    dense_only = r.integer_array_or_empty("mlp_only_layers");
    if (type == "qwen2_moe" || qwen_hybrid(type)) {
      m.shared_expert_ffn_size = r.integer_or("shared_expert_intermediate_size", 0);
      m.shared_expert_gate = m.shared_expert_ffn_size > 0;
    }
  } else if (type == "olmoe") {
    m.num_routed_experts = positive(r, "num_experts");
    m.expert_ffn_size = positive(r, "intermediate_size");
    m.top_k = positive(r, "num_experts_per_tok");
  } else {  // dense llama / qwen2 / mistral
    m.dense_ffn_size = positive(r, "intermediate_size");
  }
  if (freq <= 0) r.fail("moe_layer_freq", "must be positive");
  if (first_dense < 0 || first_dense > m.num_layers) {
    r.fail("first_k_dense_replace", fmt::format("must be in [0, {}]", m.num_layers));
  }

  if (type == "qwen2_moe" || type == "qwen3_moe" || (qwen_hybrid(type) && m.is_moe())) {
    // Qwen: layer i is sparse when (i + 1) % decoder_sparse_step == 0 and not in mlp_only_layers.
    m.moe_layer.assign(static_cast<size_t>(m.num_layers), false);
    for (int64_t i = 0; i < m.num_layers; ++i) {
      const bool listed = std::find(dense_only.begin(), dense_only.end(), i) != dense_only.end();
      m.moe_layer[i] = !listed && (i + 1) % freq == 0;
    }
  } else {
    m.moe_layer = ModelSpec::layer_map(m.num_layers, first_dense, freq, m.is_moe());
  }
  hf_sliding_window(r, m, type);
  if (qwen_hybrid(type)) hf_linear_attention(r, m);
  if (kimi_linear) hf_kimi_linear(r, m);
  r.ignore_rest();  // HF configs carry many runtime keys (rope scaling, dropout, ...)
  return m;
}

// A config without _name_or_path is named after its file (qwen3-235b-a22b.config.json gives
// qwen3-235b-a22b) or, where it is HF's own config.json, its folder (Qwen3-235B-A22B/config.json
// gives Qwen3-235B-A22B): its model_type would name Qwen3-30B-A3B and Qwen3-235B-A22B alike.
std::string hf_name(const std::string& source) {
  const std::filesystem::path path(source);
  std::string file = path.filename().string();
  if (file == "config.json") {
    const std::string folder = std::filesystem::absolute(path).parent_path().filename().string();
    if (!folder.empty()) return folder;
  }
  for (const char* suffix : {".config.json", ".json"}) {
    const std::string s(suffix);
    if (file.size() > s.size() && file.compare(file.size() - s.size(), s.size(), s) == 0) {
      file.resize(file.size() - s.size());
      break;
    }
  }
  return file.empty() ? source : file;
}

}  // namespace

const std::vector<std::string>& supported_hf_model_types() {
  return kHfTypes;
}

ModelSpec model_from_json(const nlohmann::json& j, const std::string& source) {
  ObjectReader r(j, source, "");
  ModelSpec m;
  if (r.has("model_type")) {
    const std::string type = r.string("model_type");
    if (std::find(kHfTypes.begin(), kHfTypes.end(), type) == kHfTypes.end()) {
      std::string list;
      for (const auto& t : kHfTypes) list += (list.empty() ? "" : ", ") + t;
      r.fail("model_type", fmt::format("'{}' is not supported (supported: {})", type, list));
    }
    const std::string name = r.has("_name_or_path") ? r.string("_name_or_path") : hf_name(source);
    // Multimodal configs hold the language model in text_config beside a vision tower we do not
    // model: Llama 4, Qwen3.5 and Kimi K2.5 (whose text model is K2).
    static const std::map<std::string, std::string> kTextOf = {{"llama4", "llama4_text"},
                                                               {"qwen3_5", "qwen3_5_text"},
                                                               {"qwen3_5_moe", "qwen3_5_moe_text"},
                                                               {"kimi_k25", "kimi_k2"}};
    const auto nested = kTextOf.find(type);
    std::optional<ObjectReader> text;
    if (nested != kTextOf.end()) text.emplace(r.object("text_config"));
    ObjectReader& body = text ? *text : r;
    std::string text_type = text ? nested->second : type;
    // Moonshot's Kimi K2 is DeepSeek-V3's architecture (its config names the class
    // DeepseekV3ForCausalLM) with its own model_type so that engines can tell them apart.
    if (text_type == "kimi_k2") text_type = "deepseek_v3";
    m = text_type == "llama4_text" ? from_hf_llama4(body, name) : from_hf(body, text_type, name);
    if (text) r.ignore_rest();
  } else {
    m = from_ours(r);
  }
  try {
    validate(m);
  } catch (const ConfigError& e) {
    throw InputError(source, "", e.what());
  }
  return m;
}

ModelSpec load_model(const std::string& path) {
  return model_from_json(read_json_file(path), path);
}

}  // namespace moe::io
