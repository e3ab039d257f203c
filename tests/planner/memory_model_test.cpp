#include "planner/memory_model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "planner/model_stats.h"
#include "planner/parallel.h"
#include "planner/plan.h"
#include "test_models.h"

namespace moe {

namespace {
ParallelConfig layout(const std::string& text, const ModelSpec& m) {
  ParallelConfig p = resolve(parse_parallel(text));
  check(p, m);
  return p;
}

MemoryRequest request(Recompute r = Recompute::kNone) {
  MemoryRequest q;
  q.recompute = r;
  q.gpu_capacity = gigabytes(80);
  return q;
}

Bytes max_static(const MemoryReport& r) {
  Bytes worst;
  for (const auto& s : r.stages) worst = std::max(worst, s.static_bytes);
  return worst;
}
}  // namespace

TEST(MemoryModel, MoreChunksNeverRaisePeakActivation) {
  const ModelSpec m = testing_models::memfine_model(16);
  const ParallelConfig p = layout("tp=1,pp=4,ep=32", m);
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    for (double tokens : {4096.0 * 8, 300000.0, 596797.0, 1e6}) {
      MemoryRequest q = request(r);
      q.received_tokens = tokens;
      std::vector<Bytes> last(4, Bytes(1e30));
      for (int64_t c = 1; c <= 64; ++c) {
        q.chunks = c;
        const MemoryReport rep = estimate_memory(m, p, q);
        for (size_t s = 0; s < rep.stages.size(); ++s) {
          EXPECT_LE(rep.stages[s].activation_bytes, last[s]) << "stage " << s << ", chunks " << c;
          last[s] = rep.stages[s].activation_bytes;
        }
      }
    }
  }
}

TEST(MemoryModel, LargerTpOrPpNeverRaisesStaticMemory) {
  const ModelSpec m = testing_models::mixtral_8x7b();
  Bytes last_tp(1e30);
  for (int tp : {1, 2, 4, 8}) {
    const Bytes s = max_static(
        estimate_memory(m, layout(fmt::format("tp={},pp=2,ep=8,dp=8", tp), m), request()));
    EXPECT_LE(s, last_tp) << "tp " << tp;
    last_tp = s;
  }
  Bytes last_pp(1e30);
  for (int pp : {1, 2, 4, 8, 16, 32}) {
    const Bytes s = max_static(
        estimate_memory(m, layout(fmt::format("tp=2,pp={},ep=8,dp=4", pp), m), request()));
    EXPECT_LE(s, last_pp) << "pp " << pp;
    last_pp = s;
  }
}

TEST(MemoryModel, StaticMemoryIsEighteenBytesPerParameterWithoutSharding) {
  // Megatron's theoretical memory: 18 bytes per parameter with no distributed optimizer.
  const ModelSpec m = testing_models::mixtral_8x7b();
  MemoryRequest q = request();
  q.zero_stage = 0;
  const MemoryReport r = estimate_memory(m, layout("tp=1,pp=1,ep=1", m), q);
  EXPECT_NEAR(r.stages[0].static_bytes.value(), 18.0 * r.stages[0].params_per_gpu, 1.0);
  EXPECT_NEAR(r.stages[0].params_per_gpu, 46.70e9, 0.01e9);
}

TEST(MemoryModel, DistributedOptimizerShardsOnlyOptimizerStates) {
  // With ZeRO-1 over d ranks: 6 + 12/d bytes per parameter (Megatron theoretical_memory_usage).
  const ModelSpec m = testing_models::mixtral_8x7b();
  MemoryRequest q = request();
  q.zero_stage = 1;
  const MemoryReport r = estimate_memory(m, layout("tp=1,pp=1,ep=1,dp=4", m), q);
  EXPECT_NEAR(r.stages[0].static_bytes.value(), (6.0 + 12.0 / 4) * r.stages[0].params_per_gpu, 1.0);
}

TEST(MemoryModel, PipelineScheduleSetsStoredMicrobatches) {
  // MemFine's m_g = v p + p - 2 r - 1 counts in-flight chunk-micro-batches of interleaved
  // 1F1B; plain 1F1B holds p - r; full recompute one layer's activations at a time (m_g = 1).
  EXPECT_DOUBLE_EQ(memfine::stored_microbatches(4, 1, 0, false), 4);
  EXPECT_DOUBLE_EQ(memfine::stored_microbatches(4, 1, 3, false), 1);
  EXPECT_DOUBLE_EQ(memfine::stored_microbatches(4, 2, 0, false), 11);
  EXPECT_DOUBLE_EQ(memfine::stored_microbatches(4, 2, 0, true), 1);
}

TEST(MemoryModel, FullRecomputeAddsCheckpointsUnlessStaticIsMeasured) {
  const ModelSpec m = testing_models::memfine_model(16);
  const ParallelConfig p = layout("tp=1,pp=4,ep=32", m);
  MemoryRequest q = request(Recompute::kFull);
  const MemoryReport computed = estimate_memory(m, p, q);
  // Stage 0: 4 micro-batches in flight x 4 layers x D_t b s h = 16 x 58.7 MB.
  EXPECT_NEAR(computed.stages[0].checkpoint_bytes.value(), 16.0 * 2 * 4096 * 7168, 1.0);
  q.static_override = gigabytes(43.0);
  EXPECT_DOUBLE_EQ(estimate_memory(m, p, q).stages[0].checkpoint_bytes.value(), 0.0);
}

TEST(MemoryModel, WorstCaseReceivedTokens) {
  const ModelSpec m = testing_models::memfine_model(16);
  // 32 EP ranks, 8 local experts, top-8: every rank sends each of 4096 tokens 8 times here.
  EXPECT_DOUBLE_EQ(worst_received_tokens(m, layout("tp=1,pp=4,ep=32", m), 4096), 32.0 * 4096 * 8);
  EXPECT_DOUBLE_EQ(balanced_received_tokens(m, 4096), 4096.0 * 8);
}

TEST(MemoryModel, DenseModelsHaveNoExpertMemory) {
  const ModelSpec m = testing_models::dense_mixtral();
  const MemoryReport r = estimate_memory(m, layout("tp=2,pp=2", m), request());
  for (const auto& s : r.stages) {
    EXPECT_EQ(s.expert_params_per_gpu, 0.0);
    EXPECT_EQ(s.num_moe_layers, 0);
  }
}

TEST(MemoryModel, MoeActDropsOnlyTheExpertsActivation) {
  // Megatron's moe_act replays the experts' activation function: it frees a MoE layer's
  // g_e-wide row, and nothing of a dense layer's FFN, whose activation goes only with mlp (as
  // the time model replays it). A dense model under "moe_act layernorm" (the search's default
  // modules, whose printed arguments drop moe_act) holds what layernorm alone holds.
  const ModelSpec dense = testing_models::dense_mixtral();
  MemoryRequest q = request(Recompute::kSelective);
  auto activation = [&](const ModelSpec& m, uint32_t modules) {
    q.recompute_modules = modules;
    return estimate_memory(m, layout("tp=2,pp=2", m), q).stages[0].activation_bytes;
  };
  EXPECT_EQ(activation(dense, kRecomputeMoeAct | kRecomputeLayernorm),
            activation(dense, kRecomputeLayernorm));
  EXPECT_LT(activation(dense, kRecomputeMlp | kRecomputeLayernorm),
            activation(dense, kRecomputeLayernorm));
  const ModelSpec moe = testing_models::mixtral_8x7b();
  EXPECT_LT(activation(moe, kRecomputeMoeAct | kRecomputeLayernorm),
            activation(moe, kRecomputeLayernorm));
}

}  // namespace moe

namespace moe {

TEST(MemoryModel, RematerializationKeepsMegaScalesShare) {
  // MegaScale App. A.2, Mixtral-8x7B with n = 8: rematerialization keeps 18.5 of 54.25 bsh/n.
  const ModelSpec m = testing_models::mixtral_8x7b();
  const ParallelConfig p = layout("tp=1,pp=1,ep=8,dp=8", m);
  MemoryRequest q = request(Recompute::kNone);
  const Bytes none = estimate_memory(m, p, q).stages[0].activation_bytes;
  q.recompute = Recompute::kRematerialize;
  const Bytes sar = estimate_memory(m, p, q).stages[0].activation_bytes;
  EXPECT_NEAR(sar / none, 18.5 / 54.25, 1e-12);
  EXPECT_EQ(recompute_from_name("sar"), Recompute::kRematerialize);
  EXPECT_FALSE(recompute_from_name("partial").has_value());
}

}  // namespace moe

namespace moe {

TEST(MemoryModel, GPipeHoldsEveryMicroBatch) {
  // 1F1B keeps p - r micro-batches on stage r (4 on stage 0 of 4); GPipe all m.
  const ModelSpec m = testing_models::mixtral_8x7b();
  const ParallelConfig p = layout("tp=8,pp=4,ep=8,dp=1,mbs=1,gbs=16", m);
  MemoryRequest q = request(Recompute::kNone);
  const MemoryReport one_f_one_b = estimate_memory(m, p, q);
  q.gpipe_microbatches = 16;
  const MemoryReport gpipe = estimate_memory(m, p, q);
  EXPECT_DOUBLE_EQ(one_f_one_b.stages[0].m_g, 4.0);
  EXPECT_DOUBLE_EQ(gpipe.stages[0].m_g, 16.0);
  EXPECT_NEAR(gpipe.stages[0].activation_bytes / one_f_one_b.stages[0].activation_bytes, 16.0 / 4.0,
              1e-12);
  EXPECT_DOUBLE_EQ(gpipe.stages[3].m_g, 16.0);
}

}  // namespace moe

namespace moe {

TEST(MemoryModel, Fp8KeepsTheLinearLayersInputsInOneByte) {
  // FP8 with Transformer Engine: the inputs of the QKV and output projections (Table 2 rows 2
  // and 6), of FC1 (row 11) and of FC2 (the activation output in row 12) are kept as the FP8
  // copies the forward GEMMs used. Model I: the sequence part loses 2 h bytes per token
  // (0.8997 -> 0.8410 GB), a received token costs 3 (h + g_e) = 27,648 bytes instead of 36,864.
  const ModelSpec m = testing_models::memfine_model(16);
  memfine::LayerShape s = moe_layer_shape(m, layout("tp=1,pp=4,ep=32", m), 4096, 2.0);
  const double bf16_sequence = memfine::sequence_activation(s).value();
  EXPECT_NEAR(bf16_sequence / 1e9, 0.8997, 5e-4);
  EXPECT_DOUBLE_EQ(memfine::activation_per_received_token(s).value(), 36864.0);
  s.gemm_input_bytes = 1;
  EXPECT_NEAR(memfine::sequence_activation(s).value(), bf16_sequence - 2.0 * 7168 * 4096, 1.0);
  EXPECT_DOUBLE_EQ(memfine::activation_per_received_token(s).value(), 27648.0);

  // Through the memory model: an FP8 request holds less activation, the same static memory.
  MemoryRequest q = request();
  q.received_tokens = 4096.0 * 8;
  const MemoryReport bf16 = estimate_memory(m, layout("tp=1,pp=4,ep=32", m), q);
  q.gemm_input_bytes = 1;
  const MemoryReport fp8 = estimate_memory(m, layout("tp=1,pp=4,ep=32", m), q);
  // Balanced routing: 6.5 % off the sequence part, 25 % off the received tokens' (measured 14 %).
  const double kept = fp8.stages[0].activation_bytes / bf16.stages[0].activation_bytes;
  EXPECT_GT(kept, 0.75);
  EXPECT_LT(kept, 0.9);
  EXPECT_EQ(fp8.stages[0].static_bytes, bf16.stages[0].static_bytes);
}

TEST(MemoryModel, LatentDownProjectionsStayWholeOnEveryTpRank) {
  // Megatron-Core keeps MLA's W_dq and W_dkv with the two latent norms whole on each TP rank
  // (h x 1,536 + 1,536 + h x 576 + 512 for DeepSeek-V3's shapes); the rest of the layer's
  // attention and its shared expert split. Going from TP 1 to TP 2 halves only those.
  const ModelSpec m = testing_models::memfine_model(8);
  const ModelParams all = count_params(m);
  const double duplicated = latent_duplicated_params(m);
  EXPECT_DOUBLE_EQ(duplicated, 7168.0 * 1536 + 1536 + 7168.0 * 576 + 512);
  const LayerWeights one = stage_layer_weights(m, all, layout("tp=1,pp=2,ep=8,dp=8", m), 1, false);
  const LayerWeights two = stage_layer_weights(m, all, layout("tp=2,pp=2,ep=8,dp=4", m), 1, false);
  double halved = 0;
  for (int64_t i = 4; i < 8; ++i) {
    const LayerParams& l = all.layers[static_cast<size_t>(i)];
    halved += (l.attention - duplicated + l.shared_experts + l.dense_ffn) / 2;
  }
  EXPECT_NEAR(one.dense - two.dense, halved, 1e-6 * halved);
}

TEST(MemoryModel, SparseAttentionIndexerKeepsItsInputs) {
  // DSA's indexer keeps a token's 64 x 128 query, its 128-wide key and 64 head weights: 8,384
  // elements more in eq. (2)'s sequence term, 16.8 KB a token in BF16 (+7.6 % for V3's layer).
  const ModelSpec v3 = testing_models::memfine_model(16);
  ModelSpec v32 = v3;
  v32.attention.sparse_topk = 2048;
  v32.attention.indexer_heads = 64;
  v32.attention.indexer_head_dim = 128;
  const ParallelConfig p = layout("tp=1,pp=4,ep=32,cp=1,vpp=1,mbs=1", v3);
  const memfine::LayerShape a = moe_layer_shape(v3, p, 4096, 2),
                            b = moe_layer_shape(v32, p, 4096, 2);
  EXPECT_EQ(a.indexer_width, 0);
  EXPECT_EQ(b.indexer_width, 64 * 128 + 128 + 64);
  // Every TP rank runs the indexer over the gathered sequence.
  EXPECT_EQ(
      moe_layer_shape(v32, layout("tp=2,pp=4,ep=32,cp=1,vpp=1,mbs=1", v32), 4096, 2).indexer_width,
      2 * (64 * 128 + 128 + 64));
  EXPECT_DOUBLE_EQ((memfine::sequence_activation(b) - memfine::sequence_activation(a)).value(),
                   2.0 * 4096 * 8384);
}

TEST(MemoryModel, LinearAttentionLayersKeepTheirOwnWidths) {
  // A token keeps q (and its gate), k and v in a gated softmax layer, and in a Gated DeltaNet
  // layer q, k and v before and after the conv, z, the recurrence's output, beta and the decay;
  // eq. (2)'s sequence term takes the mean over layers (the planner prices the mean layer).
  ModelSpec m = testing_models::mixtral_8x7b();
  const ParallelConfig p = layout("tp=1,pp=1,ep=8,cp=1,vpp=1,mbs=1", m);
  const memfine::LayerShape plain = moe_layer_shape(m, p, 4096, 2);
  EXPECT_LT(plain.attention_width, 0);
  EXPECT_DOUBLE_EQ(plain.attention_elements(), 32 * 128 + 2 * 8 * 128);
  m.attention.output_gate = true;
  m.linear_attention = {16, 32, 128, 128, 4};
  m.linear_layer = ModelSpec::window_map(32, 4);
  const double softmax = 2 * 32 * 128 + 2 * 8 * 128;
  const double qkv = 2 * 16 * 128 + 32 * 128;
  const double linear = 2 * qkv + 2 * 32 * 128 + 2 * 32;
  const memfine::LayerShape hybrid = moe_layer_shape(m, p, 4096, 2);
  EXPECT_DOUBLE_EQ(hybrid.attention_width, (8 * softmax + 24 * linear) / 32);
  EXPECT_DOUBLE_EQ(
      (memfine::sequence_activation(hybrid) - memfine::sequence_activation(plain)).value(),
      2.0 * 4096 * (hybrid.attention_width - plain.attention_elements()));
  // Kimi Delta Attention decays per key channel and keeps its two low-rank gates' inner
  // activations: K + 2 r where Gated DeltaNet keeps one decay a head.
  m.linear_attention = {32, 32, 128, 128, 4, LinearAttentionKind::kKimiDelta, 128};
  const double kda_qkv = 3 * 32 * 128;
  const double kda = 2 * kda_qkv + 2 * 32 * 128 + 32 + 32 * 128 + 2 * 128;
  EXPECT_DOUBLE_EQ(moe_layer_shape(m, p, 4096, 2).attention_width, (8 * softmax + 24 * kda) / 32);
}

}  // namespace moe

namespace moe {

TEST(MemoryModel, MactSettlesEachStagesOwnChunkCount) {
  // The plan's count is the largest any stage needs; each stage keeps its own only where stages
  // differ (a stage without MoE layers runs at the plan's); without MACT nothing changes.
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=1,pp=3,ep=1,dp=1,mbs=1,gbs=1"));
  c.mact = true;
  MemoryReport r;
  r.mact_chunks = 4;
  for (auto [moe, chunks] : {std::pair{2, 1}, std::pair{0, 1}, std::pair{3, 4}}) {
    StageMemory st;
    st.num_moe_layers = moe;
    st.chunks = chunks;
    r.stages.push_back(st);
  }
  settle_mact_chunks(c, r);
  EXPECT_EQ(c.fcda_chunks, 4);
  EXPECT_EQ(c.stage_chunks, (std::vector<int64_t>{1, 4, 4}));
  EXPECT_EQ(c.chunks_on_stage(0), 1);
  EXPECT_EQ(c.chunks_on_stage(2), 4);
  r.stages[0].chunks = 4;
  settle_mact_chunks(c, r);
  EXPECT_TRUE(c.stage_chunks.empty());
  EXPECT_EQ(c.chunks_on_stage(0), 4);
  c.mact = false;
  c.fcda_chunks = 2;
  r.stages[0].chunks = 1;
  settle_mact_chunks(c, r);
  EXPECT_TRUE(c.stage_chunks.empty());
  EXPECT_EQ(c.fcda_chunks, 2);
}

}  // namespace moe
