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

TEST(ModelStatsGolden, KimiK2) {
  // Kimi K2 is DeepSeek-V3's architecture (model_type kimi_k2): 61 layers, the first dense, 384
  // routed experts top-8 and one shared, 64 MLA heads, a 163,840-token vocabulary. Its card says
  // 1 T total and 32 B activated; the tech report 1.04 T. Counted by hand from the config: per
  // layer MLA q_a 7168 x 1536, q_b 1536 x 64 x 192, kv_a 7168 x 576, kv_b 512 x 64 x 256 and o
  // 8192 x 7168; an expert 3 x 7168 x 2048; the dense FFN 3 x 7168 x 18432; the router 384 x 7168.
  const double attention =
      7168.0 * 1536 + 1536.0 * 64 * 192 + 7168.0 * 576 + 512.0 * 64 * 256 + 8192.0 * 7168;
  const double expert = 3.0 * 7168 * 2048, dense = 3.0 * 7168 * 18432, router = 384.0 * 7168;
  const double embedding = 163840.0 * 7168;
  const double matrices_total =
      2 * embedding + 61 * attention + 60 * (385 * expert + router) + dense;
  const double matrices_active =
      2 * embedding + 61 * attention + 60 * (9 * expert + router) + dense;
  const ModelSpec m = model("hf/kimi-k2-instruct.config.json");
  const ModelParams p = count_params(m);
  EXPECT_EQ(m.attention.kind, AttentionKind::kLatent);
  EXPECT_EQ(m.num_dense_layers(), 1);
  EXPECT_EQ(m.mtp_layers, 0);
  EXPECT_NEAR(p.total(), matrices_total, 2e6);  // norms only
  EXPECT_NEAR(p.active(m), matrices_active, 2e6);
  EXPECT_NEAR(p.total() / kB, 1026.4, 0.05);
  EXPECT_NEAR(p.total() / 1.04e12, 1.0, 0.015);
  EXPECT_NEAR((p.active(m) - p.embedding) / kB, 32, 0.5);
}

TEST(ModelStatsGolden, MiniMaxM2) {
  // MiniMax's card: 230 B total, 10 B active; Hugging Face counts the checkpoint at 229 B. Every
  // one of 62 layers is MoE (256 experts of 3 x 3072 x 1536, top-8) under GQA attention of 48
  // heads and 8 KV heads of 128: q and o 3072 x 6144 each, k and v 3072 x 1024 each.
  const double attention = 2.0 * 3072 * 6144 + 2.0 * 3072 * 1024;
  const double expert = 3.0 * 3072 * 1536, router = 256.0 * 3072, embedding = 200064.0 * 3072;
  const ModelSpec m = model("hf/minimax-m2.config.json");
  const ModelParams p = count_params(m);
  EXPECT_EQ(m.num_moe_layers(), 62);
  EXPECT_EQ(m.mtp_layers, 0);  // use_mtp: heads the released checkpoint does not hold
  EXPECT_NEAR(p.total(), 2 * embedding + 62 * (attention + 256 * expert + router), 1e6);
  EXPECT_NEAR(p.total() / kB, 229, 0.5);
  EXPECT_NEAR((p.active(m) - p.embedding) / kB, 10, 0.5);
}

TEST(ModelStatsGolden, DeepSeekV32SparseAttention) {
  // DeepSeek-V3.2 is V3 plus a lightning indexer a layer: wq_b 1536 x (64 x 128), wk 7168 x 128,
  // a LayerNorm of 128 (weight and bias) and weights_proj 7168 x 64. Hugging Face counts 685 B
  // with the MTP module, as for V3.
  const double indexer = 1536.0 * 64 * 128 + 7168.0 * 128 + 2 * 128 + 7168.0 * 64;
  const ModelSpec v3 = model("hf/deepseek-v3.config.json");
  const ModelSpec v32 = model("hf/deepseek-v3.2.config.json");
  EXPECT_DOUBLE_EQ(indexer_params(v32), indexer);
  EXPECT_DOUBLE_EQ(indexer_params(v3), 0.0);
  const ModelParams p3 = count_params(v3), p32 = count_params(v32);
  EXPECT_NEAR(p32.total() - p3.total(), 61 * indexer, 1.0);
  EXPECT_NEAR((p32.total() + p32.mtp) / kB, 685, 0.5);
  // FLOPs per token and layer. Masked MHA mode: 2 a (d_qk + d_v) = 2 x 128 x 320 a key over
  // s / 2 keys. MQA mode: 2 a (2 r_kv + d_rope) = 2 x 128 x 1088 a key over the top 2,048
  // (w - w^2 / 2s once s > w). The indexer: 2 x 64 x 128 a key over s / 2 keys, always.
  auto per_layer = [&](const ModelSpec& m, int64_t s) {
    return flops_per_token(m, s).forward_attention.value() / 61.0;
  };
  for (int64_t s : {4096, 16384, 131072}) {
    const double half = s / 2.0;
    const double dense = 2.0 * 128 * 320 * half;
    const double top = 2048.0 - 2048.0 * 2048.0 / (2.0 * static_cast<double>(s));
    const double sparse = 2.0 * 128 * 1088 * top;
    const double index = 2.0 * 64 * 128 * half;
    EXPECT_DOUBLE_EQ(per_layer(v3, s), dense) << s;
    EXPECT_NEAR(per_layer(v32, s), std::min(dense, sparse) + index, 1e-6 * dense) << s;
    EXPECT_NEAR(flops_per_token(v32, s).forward_indexer.value(), 61 * index, 1.0) << s;
  }
  // Break-even: masked MHA below about 14K tokens, the top-k MQA mode above; at 128K the
  // attention term is 3.3x smaller than V3's.
  EXPECT_LT(per_layer(v32, 4096) / per_layer(v3, 4096), 1.25);
  EXPECT_NEAR(per_layer(v3, 131072) / per_layer(v32, 131072), 3.27, 0.01);
  // The indexer's weights are matrices too: 2 x 61 x 13.96 M more matmul FLOPs a token.
  EXPECT_NEAR(flops_per_token(v32, 4096).forward_matmul.value() -
                  flops_per_token(v3, 4096).forward_matmul.value(),
              2.0 * 61 * indexer, 1.0);
}

TEST(ModelStatsGolden, GatedDeltaNetHybrids) {
  // Qwen3-Next-80B-A3B: 48 layers, every fourth gated softmax attention (16 heads of 256 with a
  // gate, 2 KV heads), the rest Gated DeltaNet (16 key heads, 32 value heads, of 128; conv 4);
  // 512 experts of 3 x 2048 x 512, top-10, a gated shared expert of 512. The card: 80 B, 3 B
  // activated. Counted by hand: in_proj_qkvz 2048 x (2 x 2048 + 2 x 4096), in_proj_ba 2048 x 64,
  // conv 8192 x 4, dt_bias and A_log 32 each, norm 128, out_proj 4096 x 2048.
  const double h = 2048, k = 16 * 128, v = 32 * 128;
  const double linear = h * (2 * k + 2 * v) + h * 64 + (2 * k + v) * 4 + 64 + 128 + v * h;
  const double softmax = h * 4096 * 2 + 2 * h * 512 + 4096 * h;
  const double expert = 3 * h * 512, router = 512 * h + h, embedding = 151936 * h;
  const ModelSpec next = model("hf/qwen3-next-80b-a3b.config.json");
  EXPECT_EQ(next.num_linear_layers(), 36);
  EXPECT_FALSE(next.linear_layer[3]);
  EXPECT_TRUE(next.attention.output_gate);
  EXPECT_DOUBLE_EQ(linear_attention_params(next), linear);
  const ModelParams p = count_params(next);
  const double norms = 48 * 2 * h + h;
  EXPECT_NEAR(p.total(),
              2 * embedding + 36 * linear + 12 * softmax + 48 * (513 * expert + router) + norms,
              1.0);
  EXPECT_NEAR(p.total() / kB, 80, 0.5);
  EXPECT_NEAR((p.active(next) - p.embedding - p.output_head) / kB, 3, 0.3);
  // Qwen3.5-397B-A17B, its language model in text_config: 397 B, 17 B active.
  const ModelSpec big = model("hf/qwen3.5-397b-a17b.config.json");
  const ModelParams q = count_params(big);
  EXPECT_EQ(big.num_linear_layers(), 45);
  EXPECT_NEAR(q.total() / kB, 397, 1.0);
  EXPECT_NEAR(q.active(big) / kB, 17, 0.5);
  // FLOPs: softmax layers over s / 2 keys (2 x 16 x 512 a key), Gated DeltaNet layers linear
  // in s: 2 n_v (3 d_k d_v + 64 (3 d_k + 2 d_v) + 64^2 / 3) a token.
  const double delta = 32 * 2.0 * (3.0 * 128 * 128 + 64.0 * (5 * 128) + 64.0 * 64 / 3);
  EXPECT_DOUBLE_EQ(linear_attention_flops_per_token(next), delta);
  for (int64_t s : {4096, 65536}) {
    const TokenFlops f = flops_per_token(next, s);
    EXPECT_NEAR(f.forward_linear.value(), 36 * delta, 1e-3);
    EXPECT_NEAR(f.forward_attention.value(), 12 * 2.0 * 16 * 512 * (s / 2.0) + 36 * delta, 1e-3);
  }
  // Megatron-Core's count (linear_self_attn_term): 6 (h (2K + 2V + 2 n_v) + 4 (2K + V) +
  // 4 n_v d_v^2 + h V) a linear layer; the gate in the softmax layers' projections.
  ModelSpec all_softmax = next;
  all_softmax.linear_layer.clear();
  const double seq = 4096, tokens = seq * 8;
  const double diff = (megatron_iteration_flops(all_softmax, 4096, 8, 1) -
                       megatron_iteration_flops(next, 4096, 8, 1))
                          .value() /
                      tokens;
  const double mcore_linear =
      6 * (h * (2 * k + 2 * v + 64) + 4 * (2 * k + v) + 32 * 128.0 * 128 * 4 + h * v);
  const double mcore_softmax = 6 * (h * (4096 + 1024 + 4096) + 4096 * seq + 4096 * h);
  EXPECT_NEAR(diff, 36 * (mcore_softmax - mcore_linear), 1.0);
}

TEST(ModelStatsGolden, KimiLinear) {
  // Kimi-Linear-48B-A3B: 27 layers, 1-based kda_layers (20) and full_attn_layers 4, 8, ..., 24,
  // 27 (MLA: 32 heads, q projected directly, kv rank 512, 128 + 64 / 128); layer 1 dense (9216),
  // the rest 256 experts of 1024, top-8, one shared. KDA (32 heads of 128, conv 4) counted by
  // hand: q, k, v 2304 x 4096 each, 3 convs 4096 x 4, f_a 2304 x 128, f_b 128 x 4096, dt_bias
  // 4096, A_log 32, b_proj 2304 x 32, g_a 2304 x 128, g_b 128 x 4096, o_norm 128, o_proj
  // 4096 x 2304. The card says 48 B and 3 B activated: 49.1 B and 2.7 B without embedding and
  // head here.
  const double h = 2304, w = 4096, r = 128;
  const double kda =
      3 * h * w + 3 * w * 4 + h * r + r * w + w + 32 + h * 32 + h * r + r * w + 128 + w * h;
  const double mla = h * 32 * 192 + h * (512 + 64) + 512 + 512 * 32 * 256 + 32 * 128 * h;
  const double expert = 3 * h * 1024, router = 256 * h, embedding = 163840 * h;
  const ModelSpec kl = model("hf/kimi-linear-48b-a3b.config.json");
  EXPECT_EQ(kl.linear_attention.kind, LinearAttentionKind::kKimiDelta);
  EXPECT_EQ(kl.num_linear_layers(), 20);
  EXPECT_TRUE(kl.linear_layer[0]);    // layer 1
  EXPECT_FALSE(kl.linear_layer[3]);   // layer 4
  EXPECT_FALSE(kl.linear_layer[26]);  // layer 27
  EXPECT_FALSE(kl.moe_layer[0]);
  EXPECT_DOUBLE_EQ(linear_attention_params(kl), kda);
  const ModelParams p = count_params(kl);
  const double norms = 27 * 2 * h + h;
  EXPECT_NEAR(
      p.total(),
      2 * embedding + 20 * kda + 7 * mla + 3 * h * 9216 + 26 * (257 * expert + router) + norms,
      1.0);
  EXPECT_NEAR(p.total() / kB, 49.12, 0.01);
  EXPECT_NEAR((p.active(kl) - p.embedding - p.output_head) / kB, 2.73, 0.01);
  // A full-rank output gate (Kimi K3's use_full_rank_gate) is one h x K matrix.
  ModelSpec full = kl;
  full.linear_attention.full_rank_output_gate = true;
  EXPECT_DOUBLE_EQ(linear_attention_params(full) - kda, h * w - (h * r + r * w));
  // Megatron-Core has no KDA; its Gated DeltaNet count with KDA's projections.
  ModelSpec all_mla = kl;
  all_mla.linear_layer.clear();
  const double seq = 4096, tokens = seq * 8;
  const double diff =
      (megatron_iteration_flops(all_mla, 4096, 8, 1) - megatron_iteration_flops(kl, 4096, 8, 1))
          .value() /
      tokens;
  const double mcore_kda =
      6 * (h * (3 * w + 32) + r * (h + w) * 2 + 4 * 3 * w + 32 * 128.0 * 128 * 4 + h * w);
  const double q_term = h * 32 * 192;
  const double mcore_mla = 6 * (q_term + 512 * (h + 32 * 256 + 1) + h * 64 + 32 * 128 * h +
                                seq * 32 * 192 / 2 + seq * 32 * 128 / 2);
  EXPECT_NEAR(diff, 20 * (mcore_mla - mcore_kda), 1.0);
}

TEST(ModelStatsGolden, OtherPublishedCounts) {
  struct Case {
    const char* file;
    double total, active, tol;
  };
  // Model cards: Qwen1.5-MoE-A2.7B 14.3/2.7, Qwen3-30B-A3B 30.5/3.3, Qwen3-235B-A22B 235/22,
  // OLMoE-1B-7B 6.9/1.3, Phi-3.5-MoE 41.9/6.6, DeepSeekMoE-16B 16.4/2.8, Llama-2-7B 6.74 dense;
  // Llama 3 8B 8.03, 70B 70.55 and Llama 3.1 405B 405.85 (Meta's model cards: 8.03 B, 70.6 B,
  // 405 B; tools/validate_bridge.sh prices their Megatron-Bridge runs).
  for (const Case& c :
       {Case{"hf/qwen1.5-moe-a2.7b.config.json", 14.3, 2.7, 0.06},
        Case{"hf/qwen3-30b-a3b.config.json", 30.5, 3.3, 0.06},
        Case{"hf/qwen3-235b-a22b.config.json", 235.1, 22.2, 0.1},
        Case{"hf/olmoe-1b-7b.config.json", 6.9, 1.3, 0.03},
        Case{"phi-3.5-moe.json", 41.9, 6.6, 0.06},
        Case{"hf/phi-3.5-moe.config.json", 41.9, 6.6, 0.06},
        Case{"deepseekmoe-16b.json", 16.4, 2.8, 0.05}, Case{"llama-2-7b.json", 6.74, 6.74, 0.01},
        Case{"hf/llama-2-7b.config.json", 6.74, 6.74, 0.01},
        Case{"hf/llama-3-8b.config.json", 8.03, 8.03, 0.01},
        Case{"hf/llama-3-70b.config.json", 70.55, 70.55, 0.01},
        Case{"hf/llama-3.1-405b.config.json", 405.85, 405.85, 0.01}}) {
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
