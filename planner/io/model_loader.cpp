#include <fmt/format.h>

#include <algorithm>
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

ModelSpec from_ours(ObjectReader& r) {
  ModelSpec m;
  const std::string format = r.string("format");
  if (format != kModelFormat) r.fail("format", fmt::format("'{}' is not {}", format, kModelFormat));
  m.name = r.string("name");
  m.num_layers = positive(r, "num_layers");
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
    m.num_shared_experts = e.integer_or("shared_experts", 0);
    m.shared_expert_ffn_size = e.integer_or("shared_expert_size", 0);
    first_dense = e.integer_or("first_dense_layers", 0);
    freq = e.integer_or("layer_freq", 1);
    if (first_dense < 0 || first_dense > m.num_layers) {
      e.fail("first_dense_layers", fmt::format("must be in [0, {}]", m.num_layers));
    }
    if (freq <= 0) e.fail("layer_freq", "must be positive");
    e.finish();
  } else {
    r.ignore("moe");
  }
  m.moe_layer = ModelSpec::layer_map(m.num_layers, first_dense, freq, m.is_moe());
  r.finish();
  return m;
}

// --- HuggingFace config.json --------------------------------------------------------------

const std::vector<std::string> kHfTypes = {"deepseek", "deepseek_v2", "deepseek_v3", "glm4_moe",
                                           "gpt_oss",  "llama4",      "llama4_text", "mixtral",
                                           "phimoe",   "qwen2_moe",   "qwen3_moe",   "olmoe",
                                           "llama",    "qwen2",       "mistral"};

void hf_attention_mha(ObjectReader& r, ModelSpec& m, AttentionBias bias) {
  m.attention.kind = AttentionKind::kMultiHead;
  m.attention.num_heads = positive(r, "num_attention_heads");
  m.attention.num_kv_heads =
      r.optional_integer("num_key_value_heads").value_or(m.attention.num_heads);
  m.attention.head_dim =
      r.optional_integer("head_dim").value_or(m.hidden_size / m.attention.num_heads);
  m.attention.bias = bias;
}

// HF's layer_types: which layers attend through a window (`windowed`, e.g. sliding_attention)
// and which fully (full_attention); any other entry is an error naming it.
std::vector<bool> hf_layer_types(ObjectReader& r, int64_t layers, const std::string& windowed) {
  const std::vector<std::string> types = r.string_array("layer_types");
  if (static_cast<int64_t>(types.size()) != layers)
    r.fail("layer_types", fmt::format("has {} entries for {} layers", types.size(), layers));
  std::vector<bool> out;
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != windowed && types[i] != "full_attention") {
      throw InputError(r.file(), r.pointer("layer_types") + fmt::format("/{}", i),
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

// Llama 4's text model (text_config of a llama4 config, or a llama4_text config itself): every
// interleave_moe_layer_step-th layer (moe_layers when listed) has num_local_experts routed
// experts and one shared expert, both of intermediate_size, the others a dense FFN of
// intermediate_size_mlp; attention is chunked (attention_chunk_size) on the layers layer_types
// calls chunked_attention, or no_rope_layers marks 1 (RoPE layers), or all but every
// no_rope_layer_interval-th (4) by default.
ModelSpec from_hf_llama4(ObjectReader& r, const std::string& name) {
  ModelSpec m;
  m.name = name;
  m.num_layers = positive(r, "num_hidden_layers");
  m.hidden_size = positive(r, "hidden_size");
  m.vocab_size = positive(r, "vocab_size");
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  m.gated_ffn = true;
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
      if (static_cast<int64_t>(rope.size()) != m.num_layers)
        r.fail("no_rope_layers",
               fmt::format("has {} entries for {} layers", rope.size(), m.num_layers));
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

ModelSpec from_hf(ObjectReader& r, const std::string& type, const std::string& name) {
  ModelSpec m;
  m.name = name;
  m.num_layers = positive(r, "num_hidden_layers");
  m.hidden_size = positive(r, "hidden_size");
  m.vocab_size = positive(r, "vocab_size");
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  m.gated_ffn = true;
  int64_t first_dense = 0, freq = 1;
  std::vector<int64_t> dense_only;  // qwen mlp_only_layers

  if (type == "deepseek_v2" || type == "deepseek_v3") {
    m.attention.kind = AttentionKind::kLatent;
    m.attention.num_heads = positive(r, "num_attention_heads");
    m.attention.num_kv_heads = m.attention.num_heads;
    m.attention.q_lora_rank = r.optional_integer("q_lora_rank").value_or(0);
    m.attention.kv_lora_rank = positive(r, "kv_lora_rank");
    m.attention.qk_nope_head_dim = positive(r, "qk_nope_head_dim");
    m.attention.qk_rope_head_dim = positive(r, "qk_rope_head_dim");
    m.attention.v_head_dim = positive(r, "v_head_dim");
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

  if (type == "deepseek" || type == "deepseek_v2" || type == "deepseek_v3" || type == "glm4_moe") {
    // GLM-4.5 names its MoE fields as DeepSeek does (shared experts of moe_intermediate_size,
    // the first first_k_dense_replace layers dense, MTP layers apart).
    m.dense_ffn_size = positive(r, "intermediate_size");
    m.num_routed_experts = r.optional_integer("n_routed_experts").value_or(0);
    if (m.is_moe()) {
      m.expert_ffn_size = positive(r, "moe_intermediate_size");
      m.top_k = positive(r, "num_experts_per_tok");
      m.num_shared_experts = r.optional_integer("n_shared_experts").value_or(0);
      first_dense = r.integer_or("first_k_dense_replace", 0);
      freq = r.integer_or("moe_layer_freq", 1);
    }
    m.mtp_layers = r.integer_or("num_nextn_predict_layers", 0);
  } else if (type == "mixtral" || type == "phimoe" || type == "gpt_oss") {
    m.num_routed_experts = positive(r, "num_local_experts");
    m.expert_ffn_size = positive(r, "intermediate_size");
    // gpt-oss writes its top-k under both names.
    m.top_k = type == "gpt_oss" && !r.has("num_experts_per_tok")
                  ? positive(r, "experts_per_token")
                  : positive(r, "num_experts_per_tok");
    r.ignore("experts_per_token");
  } else if (type == "qwen2_moe" || type == "qwen3_moe") {
    m.num_routed_experts = positive(r, "num_experts");
    m.expert_ffn_size = positive(r, "moe_intermediate_size");
    m.top_k = positive(r, "num_experts_per_tok");
    m.dense_ffn_size = r.integer_or("intermediate_size", 0);
    freq = r.integer_or("decoder_sparse_step", 1);
    dense_only = r.integer_array_or_empty("mlp_only_layers");
    if (type == "qwen2_moe") {
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

  if (type == "qwen2_moe" || type == "qwen3_moe") {
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
  r.ignore_rest();  // HF configs carry many runtime keys (rope scaling, dropout, ...)
  return m;
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
    const std::string name = r.has("_name_or_path") ? r.string("_name_or_path") : type;
    if (type == "llama4") {
      ObjectReader text = r.object("text_config");  // the vision encoder is not modelled
      m = from_hf_llama4(text, name);
      r.ignore_rest();
    } else if (type == "llama4_text") {
      m = from_hf_llama4(r, name);
    } else {
      m = from_hf(r, type, name);
    }
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
