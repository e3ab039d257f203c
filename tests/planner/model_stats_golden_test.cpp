// Published parameter counts, read from the shipped model files and HuggingFace configs.
#include <gtest/gtest.h>

#include "planner/io/loaders.h"
#include "planner/megatron_flops.h"
#include "planner/model_stats.h"
#include "test_paths.h"

namespace moe {

namespace {
ModelSpec model(const std::string& rel) {
  return io::load_model(std::string(MOEPLAN_SOURCE_DIR) + "/models/" + rel);
}
constexpr double kB = 1e9;
}  // namespace

TEST(ModelStatsGolden, Mixtral8x7B) {
  // Published: 46.7 B total, 12.9 B active.
  for (const char* file : {"mixtral-8x7b.json", "hf/mixtral-8x7b.config.json"}) {
    const ModelSpec m = model(file);
    const ModelParams p = count_params(m);
    EXPECT_NEAR(p.total() / kB, 46.7, 0.05) << file;
    EXPECT_NEAR(p.active(m) / kB, 12.9, 0.05) << file;
  }
}

TEST(ModelStatsGolden, DeepSeekV3) {
  // Published: 671 B main model (+14 B MTP, reported apart), 37 B activated.
  for (const char* file : {"deepseek-v3.json", "hf/deepseek-v3.config.json"}) {
    const ModelSpec m = model(file);
    const ModelParams p = count_params(m);
    EXPECT_NEAR(p.total() / kB, 671, 0.5) << file;
    EXPECT_NEAR(p.active(m) / kB, 37, 0.6) << file;
    EXPECT_NEAR(p.mtp / kB, 14, 0.6) << file;
  }
}

TEST(ModelStatsGolden, OtherPublishedCounts) {
  struct Case {
    const char* file;
    double total, active, tol;
  };
  // Model cards: Qwen1.5-MoE-A2.7B 14.3/2.7, Qwen3-30B-A3B 30.5/3.3, OLMoE-1B-7B 6.9/1.3,
  // Phi-3.5-MoE 41.9/6.6, DeepSeekMoE-16B 16.4/2.8, Llama-2-7B 6.74 dense.
  for (const Case& c :
       {Case{"hf/qwen1.5-moe-a2.7b.config.json", 14.3, 2.7, 0.06},
        Case{"hf/qwen3-30b-a3b.config.json", 30.5, 3.3, 0.06},
        Case{"hf/olmoe-1b-7b.config.json", 6.9, 1.3, 0.03},
        Case{"phi-3.5-moe.json", 41.9, 6.6, 0.06},
        Case{"hf/phi-3.5-moe.config.json", 41.9, 6.6, 0.06},
        Case{"deepseekmoe-16b.json", 16.4, 2.8, 0.05}, Case{"llama-2-7b.json", 6.74, 6.74, 0.01},
        Case{"hf/llama-2-7b.config.json", 6.74, 6.74, 0.01}}) {
    const ModelSpec m = model(c.file);
    const ModelParams p = count_params(m);
    EXPECT_NEAR(p.total() / kB, c.total, c.tol) << c.file;
    EXPECT_NEAR(p.active(m) / kB, c.active, c.tol) << c.file;
  }
}

TEST(ModelStatsGolden, Glm45) {
  // Model cards: GLM-4.5 355 B total / 32 B active, GLM-4.5-Air 106 B / 12 B; Hugging Face's
  // safetensors hold 358 B and 110 B with the MTP layer. Active counts leave out the embedding
  // and the output head.
  struct Case {
    const char* file;
    double total, with_mtp, active;
  };
  for (const Case& c : {Case{"hf/glm-4.5.config.json", 355, 358, 32},
                        Case{"hf/glm-4.5-air.config.json", 106, 110, 12}}) {
    const ModelSpec m = model(c.file);
    const ModelParams p = count_params(m);
    EXPECT_NEAR(p.total() / kB, c.total, 0.01 * c.total) << c.file;
    EXPECT_NEAR((p.total() + p.mtp) / kB, c.with_mtp, 0.6) << c.file;
    EXPECT_NEAR((p.active(m) - p.embedding - p.output_head) / kB, c.active, 0.25) << c.file;
    EXPECT_EQ(m.mtp_layers, 1) << c.file;
    EXPECT_EQ(m.attention.bias, AttentionBias::kQkv) << c.file;
  }
  const ModelSpec glm = model("hf/glm-4.5.config.json");
  EXPECT_EQ(glm.num_dense_layers(), 3);  // first_k_dense_replace
  EXPECT_EQ(glm.num_shared_experts, 1);
}

TEST(ModelStatsGolden, GptOss) {
  // OpenAI's model card: gpt-oss-120b 116.83 B total, 5.13 B active; gpt-oss-20b 20.91 B and
  // 3.61 B (active counts the unembedding, not the embedding). The experts' and router's
  // biases and the attention sinks (0.04 B in all) are not counted.
  struct Case {
    const char* file;
    double total, active;
  };
  for (const Case& c : {Case{"hf/gpt-oss-120b.config.json", 116.83, 5.13},
                        Case{"hf/gpt-oss-20b.config.json", 20.91, 3.61}}) {
    const ModelSpec m = model(c.file);
    const ModelParams p = count_params(m);
    EXPECT_NEAR(p.total() / kB, c.total, 0.05) << c.file;
    EXPECT_NEAR((p.active(m) - p.embedding) / kB, c.active, 0.01) << c.file;
  }
}

TEST(ModelStatsGolden, Llama4) {
  // Meta's model cards: Scout 109 B total, Maverick 400 B, 17 B active each. The cards count the
  // vision encoder (about 0.85 B: 34 layers of width 1,408) that moeplan does not load.
  struct Case {
    const char* file;
    double total, tol;
    int64_t moe_layers;
  };
  for (const Case& c : {Case{"hf/llama-4-scout-17b-16e.config.json", 109, 1.3, 48},
                        Case{"hf/llama-4-maverick-17b-128e.config.json", 400, 1.0, 24}}) {
    const ModelSpec m = model(c.file);
    const ModelParams p = count_params(m);
    EXPECT_NEAR(p.total() / kB, c.total, c.tol) << c.file;
    EXPECT_NEAR(p.active(m) / kB, 17, 0.25) << c.file;
    EXPECT_EQ(m.num_moe_layers(), c.moe_layers) << c.file;
    EXPECT_EQ(m.num_shared_experts, 1) << c.file;
    // Chunked attention on the RoPE layers: all but every fourth.
    EXPECT_TRUE(m.attention.chunked_window) << c.file;
    EXPECT_EQ(m.attention.sliding_window, 8192) << c.file;
    EXPECT_EQ(m.windowed_layer, ModelSpec::window_map(48, 4)) << c.file;
  }
  // Maverick interleaves: layer 0 dense (intermediate_size_mlp), layer 1 MoE.
  const ModelSpec maverick = model("hf/llama-4-maverick-17b-128e.config.json");
  EXPECT_FALSE(maverick.moe_layer[0]);
  EXPECT_TRUE(maverick.moe_layer[1]);
  EXPECT_EQ(maverick.dense_ffn_size, 16384);
}

TEST(ModelStatsGolden, SlidingWindowAttentionFlops) {
  // Mean keys a query attends: s / 2 causally; under a window of w once s > w,
  // (w (w + 1) / 2 + (s - w) w) / s ~ w - w^2 / (2 s): 126 at s = 4096, w = 128.
  EXPECT_DOUBLE_EQ(attended_keys(4096, 0), 2048.0);
  EXPECT_DOUBLE_EQ(attended_keys(4096, 128), 126.0);
  EXPECT_DOUBLE_EQ(attended_keys(100, 128), 50.0);  // a window wider than the sequence
  // Chunks (Llama 4) restart the triangle every w tokens: (k w^2 + r^2) / (2 s).
  EXPECT_DOUBLE_EQ(attended_keys(16384, 8192, true), 4096.0);
  EXPECT_DOUBLE_EQ(attended_keys(20000, 8192, true), (2.0 * 8192 * 8192 + 3616.0 * 3616) / 40000.0);
  EXPECT_DOUBLE_EQ(attended_keys(20000, 8192), 8192 - 8192.0 * 8192 / 40000.0);
  EXPECT_DOUBLE_EQ(attended_keys(4096, 8192, true), 2048.0);
  // gpt-oss-120b at 4,096 tokens: 2 x 64 heads x (64 + 64) = 16,384 FLOPs per key, over
  // 18 full layers (2,048 keys) and 18 windowed ones (126): 641,138,688 FLOPs a token.
  const ModelSpec oss = model("hf/gpt-oss-120b.config.json");
  EXPECT_DOUBLE_EQ(flops_per_token(oss, 4096).forward_attention.value(),
                   16384.0 * (18 * 2048.0 + 18 * 126.0));
  // Without the window every layer pays the causal 2,048.
  ModelSpec full = oss;
  full.attention.sliding_window = 0;
  full.windowed_layer.clear();
  EXPECT_DOUBLE_EQ(flops_per_token(full, 4096).forward_attention.value(), 16384.0 * 36 * 2048.0);
}

TEST(ModelStatsGolden, AptMoeTableI) {
  // Transformer blocks only (attention 4 d^2 + experts 2 d h each, 64 layers), as Table I counts.
  struct Case {
    const char* file;
    double computed;
  };
  for (const Case& c : {Case{"aptmoe-moe-s-8.json", 4.56}, Case{"aptmoe-moe-s-16.json", 8.86},
                        Case{"aptmoe-moe-s-64.json", 34.63}, Case{"aptmoe-moe-m-8.json", 18.25},
                        Case{"aptmoe-moe-m-16.json", 35.43}, Case{"aptmoe-moe-l-8.json", 64.42}}) {
    const ModelSpec m = model(c.file);
    const ModelParams p = count_params(m);
    double blocks = 0;
    for (const LayerParams& l : p.layers) blocks += l.attention + l.routed_experts;
    EXPECT_NEAR(blocks / kB, c.computed, 0.01) << c.file;
  }
  // MoE-L-8: the paper prints 61.2 B, 5 % below what its own dimensions give.
  const ModelParams l8 = count_params(model("aptmoe-moe-l-8.json"));
  double blocks = 0;
  for (const LayerParams& l : l8.layers) blocks += l.attention + l.routed_experts;
  EXPECT_NEAR(61.2 / (blocks / kB), 0.95, 0.01);
}

TEST(ModelStats, FlopsPerTokenFollowSixN) {
  const ModelSpec m = model("llama-2-7b.json");
  const TokenFlops f = flops_per_token(m, 4096);
  const ModelParams p = count_params(m);
  // Matmul FLOPs: 2 x (weights - embedding lookup - norms).
  double norms = p.final_norm;
  for (const LayerParams& l : p.layers) norms += l.norms;
  EXPECT_NEAR(f.forward_matmul.value(), 2.0 * (p.total() - p.embedding - norms), 1.0);
  // Causal attention: a (d_qk + d_v) s per token per layer = 32 x 256 x 4096 x 32 layers.
  EXPECT_DOUBLE_EQ(f.forward_attention.value(), 32.0 * 256 * 4096 * 32);
  EXPECT_DOUBLE_EQ(f.training().value(), 3 * f.forward().value());
}

TEST(ModelStats, MoeFlopsCountOnlyActiveExperts) {
  const ModelSpec m = model("mixtral-8x7b.json");
  const ModelParams p = count_params(m);
  const TokenFlops f = flops_per_token(m, 1);
  // Active matmul weights are the active parameters minus the embedding and norms.
  double norms = p.final_norm;
  for (const LayerParams& l : p.layers) norms += l.norms;
  EXPECT_NEAR(f.forward_matmul.value(), 2.0 * (p.active(m) - p.embedding - norms), 1.0);
}

// Megatron-LM's num_floating_point_operations (training.py, transformer_flops): what its log's
// "throughput per GPU (TFLOP/s/GPU)" divides by the iteration time.
TEST(MegatronFlops, DenseGptIsTheClassicFormulaWithCausalAttention) {
  // Narayanan et al. 2021: 72 B s L h^2 (1 + s / 6h + V / 12hL) for a GPT with a 4h FFN; the
  // log now halves the attention scores for the causal mask (s / 12h), and pads V to 128 x tp.
  const ModelSpec m = model("gpt-1.7b.json");
  const double B = 8, s = 2048, L = 24, h = 2304, V = 51200;  // 51,200 = 400 x 128
  const double classic = 72.0 * B * s * L * h * h * (1.0 + s / (12.0 * h) + V / (12.0 * h * L));
  EXPECT_NEAR(megatron_iteration_flops(m, 2048, 8, 1).value() / classic, 1.0, 1e-12);
  EXPECT_EQ(megatron_padded_vocab(51200, 1), 51200);
  EXPECT_EQ(megatron_padded_vocab(51200, 3), 51456);  // the next multiple of 384
  EXPECT_EQ(megatron_padded_vocab(129280, 8), 130048);
}

TEST(MegatronFlops, MoeAndLatentAttentionAsTheLogCountsThem) {
  // Per-token values worked by hand from the formula's terms (routed experts at top-k, shared
  // experts, GQA or MLA with its low-rank norms, MTP as one more MoE layer plus its projection,
  // the logits twice with MTP).
  EXPECT_DOUBLE_EQ(megatron_iteration_flops(model("mixtral-8x7b.json"), 4096, 1, 1).value(),
                   79706456064.0 * 4096);
  EXPECT_NEAR(megatron_iteration_flops(model("deepseek-v3.json"), 4096, 1, 1).value() / 4096,
              259992950784.0, 1.0);
  // Our own count differs by the router and MTP only: within 0.1 % for Mixtral.
  const ModelSpec mixtral = model("mixtral-8x7b.json");
  EXPECT_NEAR(megatron_iteration_flops(mixtral, 4096, 1, 1).value() /
                  (flops_per_token(mixtral, 4096).training().value() * 4096),
              1.0, 1e-3);
  // The log line: FLOPs over (seconds x GPUs), in TFLOP/s.
  EXPECT_NEAR(megatron_logged_tflops(mixtral, 4096, 1, 1, 8, Seconds(0.5)),
              79706456064.0 * 4096 / (0.5 * 8 * 1e12), 1e-9);
  EXPECT_EQ(megatron_logged_tflops(mixtral, 4096, 1, 1, 0, Seconds(0.5)), 0.0);
}

}  // namespace moe
