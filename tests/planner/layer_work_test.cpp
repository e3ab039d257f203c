// The work each layer operator records for plan --explain (LayerOp::flops, peak, bytes): the
// GEMMs' FLOPs add up to the layer's own count, no op runs faster than its peak, and the
// operators' compute is what the layer's passes charge.
#include <gtest/gtest.h>

#include "planner/layer_ops.h"
#include "planner/model_stats.h"
#include "planner/parallel.h"
#include "planner/search.h"
#include "tests/planner/planner_inputs.h"

namespace moe {
namespace {

PlanChoice choice(const char* layout, Precision precision = Precision::kBf16) {
  PlanChoice c;
  c.parallel = resolve(parse_parallel(layout));
  c.precision = precision;
  return c;
}

// One MoE layer's forward FLOPs on one GPU, from the parameter count: every GEMM runs two FLOPs
// per weight per token it sees (top-k routed experts per token), plus the causal core; TP and
// CP cut both by t x cp.
double expected_layer_flops(const TimeContext& ctx, const PlanChoice& c, size_t layer) {
  const ModelSpec& m = *ctx.model;
  const LayerParams& lp = ctx.params.layers[layer];
  const double tokens = static_cast<double>(*c.parallel.mbs * ctx.seq_len);
  const double weights = lp.attention + lp.router + lp.shared_experts +
                         static_cast<double>(m.top_k) * lp.one_routed_expert;
  const double core =
      flops_per_token(m, ctx.seq_len).forward_attention.value() / static_cast<double>(m.num_layers);
  return (2.0 * weights + core) * tokens / static_cast<double>(*c.parallel.tp * *c.parallel.cp);
}

TEST(LayerWork, GemmFlopsAddUpToTheLayersCount) {
  const Inputs s("mixtral-8x7b.json", "h100-256.json");
  for (const char* layout : {"tp=1,ep=1,etp=1,cp=1,mbs=1", "tp=2,ep=4,etp=1,cp=1,mbs=2",
                             "tp=4,ep=8,etp=2,cp=2,mbs=1", "tp=8,ep=1,etp=8,cp=1,mbs=1"}) {
    const PlanChoice c = choice(layout);
    double flops = 0;
    for (const LayerOp& op : layer_forward_ops(s.ctx, c, s.ctx.params.layers[1], true, 1.0, 1))
      if (op.kind == OpKind::kCompute) flops += op.flops;
    EXPECT_NEAR(flops / expected_layer_flops(s.ctx, c, 0), 1.0, 1e-9) << layout;
  }
}

TEST(LayerWork, NoOperatorBeatsItsPeak) {
  const Inputs s("deepseek-v3.json", "h800-2048.json");
  for (Precision precision : {Precision::kBf16, Precision::kFp8}) {
    const PlanChoice c = choice("tp=2,ep=64,etp=1,cp=1,mbs=1", precision);
    const std::vector<LayerOp> ops =
        layer_forward_ops(s.ctx, c, s.ctx.params.layers[3], true, 1.3, 1);
    ASSERT_FALSE(ops.empty());
    for (const LayerOp& op : ops) {
      const double t = op.time.value();
      if (op.kind != OpKind::kCompute) {
        EXPECT_GT(op.bytes, 0) << op.name;  // a collective always has a size
      } else if (op.flops > 0) {
        EXPECT_GT(op.peak, 0) << op.name;
        EXPECT_LE(op.flops / t, op.peak * (1 + 1e-9)) << op.name;
      } else {
        EXPECT_GT(op.bytes, 0) << op.name;
        EXPECT_LE(op.bytes / t, s.ctx.links.hbm.value() * (1 + 1e-9)) << op.name;
      }
    }
  }
}

TEST(LayerWork, TheOperatorsComputeIsWhatTheLayersPassesCharge) {
  // forward + backward = 3 x the forward operators' compute (layer_pass_times, which the stage
  // sums and the breakdown's compute line add up).
  const Inputs s("hf/qwen3-30b-a3b.config.json", "h100-256.json");
  const PlanChoice c = choice("tp=2,pp=1,ep=8,etp=1,cp=1,vpp=1,mbs=1,dp=4,gbs=4");
  Seconds compute;
  for (const LayerOp& op : layer_forward_ops(s.ctx, c, s.ctx.params.layers[0], true,
                                             s.ctx.skew.imbalance(s.model, 8), 1))
    if (op.kind == OpKind::kCompute) compute += op.time;
  EXPECT_NEAR(layer_pass_times(s.ctx, c, 0).compute.value(), 3.0 * compute.value(),
              1e-12 * compute.value());
}

}  // namespace
}  // namespace moe

namespace moe {

TEST(LayerWork, Fp8CastsCostWhatEachRecipeRunsInTransformerEngine) {
  // Llama 3 8B's dense layer (h 4096, 32 heads, 8 KV heads of 128, SwiGLU 14336). Casts of their
  // own, elements a token: the output projection's input (4096) and every GEMM's output
  // gradient (QKV 6144, projection 4096, fc1 28672, fc2 4096): 47104. Delayed scaling fuses the
  // two norms' casts (2 x 4096) and the activation's (14336) into those kernels; the other
  // recipes cast them apart (MXFP8 keeps the activation's), and current scaling reads every
  // standalone cast's input once more for its amax.
  const Inputs s("hf/llama-3-8b.config.json", "h100-256.json", 8192);
  auto cast_bytes = [&](Fp8Recipe recipe) {
    PlanChoice c = choice("tp=1,cp=1,mbs=1", Precision::kFp8);
    c.fp8_recipe = recipe;
    for (const LayerOp& op : layer_forward_ops(s.ctx, c, s.ctx.params.layers[0], false, 1.0, 1))
      if (std::string_view(op.name) == "FP8 casts") return op.bytes;
    return 0.0;
  };
  const double tokens = 8192, forward_share = 1.0 / 3.0;
  const double delayed = cast_bytes(Fp8Recipe::kDelayed);
  EXPECT_NEAR(delayed, 4.0 * 47104 * tokens * forward_share, 1.0);
  EXPECT_NEAR(cast_bytes(Fp8Recipe::kTensorwise) / delayed,
              (6.0 * 47104 + 4.0 * (8192 + 14336)) / (4.0 * 47104), 1e-12);
  EXPECT_NEAR(cast_bytes(Fp8Recipe::kBlockwise) / delayed, (47104.0 + 8192 + 14336) / 47104, 1e-12);
  EXPECT_NEAR(cast_bytes(Fp8Recipe::kMxfp8) / delayed, (47104.0 + 8192) / 47104, 1e-12);
}

TEST(LayerWork, CommunicationRecordsTheLatencyThatHoldsNoLink) {
  // Each collective's latency (LayerOp::latency, which the simulator waits out instead of
  // sending as bytes): the TP ring's t - 1 steps, the all-to-all's one message, and under FCDA
  // every further round's two latencies and dispatcher overhead; compute records none.
  const Inputs s("mixtral-8x7b.json", "h100-256.json");
  const TimeContext& ctx = s.ctx;
  auto op_named = [](const std::vector<LayerOp>& ops, const std::string& name) {
    for (const LayerOp& op : ops)
      if (op.name == name) return op;
    ADD_FAILURE() << "no op " << name;
    return LayerOp{};
  };
  const PlanChoice c = choice("tp=4,ep=8,etp=1,cp=1,mbs=1");
  for (int64_t chunks : {1, 4}) {
    const std::vector<LayerOp> ops =
        layer_forward_ops(ctx, c, ctx.params.layers[0], true, 1.0, chunks);
    for (const LayerOp& op : ops) {
      if (op.kind == OpKind::kCompute) {
        EXPECT_EQ(op.latency.value(), 0.0) << op.name;
      }
      EXPECT_LT(op.latency.value(), op.time.value()) << op.name;
    }
    const LayerOp tp = op_named(ops, "attention TP all-gather + reduce-scatter");
    EXPECT_NEAR(tp.latency.value(), 2.0 * 3 * ctx.links.intra_latency.value(), 1e-15);
    const double rounds =
        (2.0 * ctx.links.latency(8).value() + ctx.eff.dispatch_round_overhead.value()) *
        static_cast<double>(chunks - 1);
    // Each half of the dispatch-combine pair: one all-to-all, half of the rounds.
    EXPECT_NEAR(op_named(ops, "dispatch").latency.value(),
                ctx.links.latency(8).value() + rounds / 2, 1e-15);
    EXPECT_NEAR(op_named(ops, "combine").latency.value(), ctx.links.latency(8).value() + rounds / 2,
                1e-15);
  }
  // Context parallelism: what shows of the K/V ring past core attention carries the ring's
  // latency in the same share.
  const PlanChoice ring = choice("tp=1,ep=8,etp=1,cp=16,mbs=1,dp=16");
  const Inputs long_sequence("mixtral-8x7b.json", "h100-256.json", 16384);
  const LayerOp kv =
      op_named(layer_forward_ops(long_sequence.ctx, ring, ctx.params.layers[0], true, 1.0, 1),
               "context-parallel K/V ring");
  EXPECT_GT(kv.latency.value(), 0.0);
  EXPECT_LE(kv.latency.value(), 15 * ctx.links.latency(16).value() * (1 + 1e-12));
}

TEST(LayerWork, ANodeCrossingAllToAllKeepsWhatRidesTheNodesLinks) {
  // An all-to-all that leaves the node sends its local peers' bytes over NVLink beside the NIC's
  // (LayerOp::in_node, which the planner puts on the node's links and the simulator sends as a
  // second flow): NCCL's and DeepEP's alike. DeepEP's had none, so an in-node sync beside it
  // slowed nothing in either.
  const Inputs s("deepseekmoe-16b.json", "h100-256.json");
  auto dispatch = [&](const char* layout, megascale::Dispatcher d) {
    PlanChoice c = choice(layout);
    c.dispatcher = d;
    for (const LayerOp& op : layer_forward_ops(s.ctx, c, s.ctx.params.layers[1], true, 1.0, 1))
      if (std::string(op.name) == "dispatch") return op;
    ADD_FAILURE() << "no dispatch";
    return LayerOp{};
  };
  for (const megascale::Dispatcher d :
       {megascale::Dispatcher::kAllToAll, megascale::Dispatcher::kDeepEp}) {
    const LayerOp across = dispatch("tp=1,ep=16,etp=1,cp=1,mbs=1", d);
    EXPECT_GT(across.in_node.value(), 0.0) << megascale::dispatcher_name(d);
    EXPECT_LE((across.in_node + across.latency).value(), across.time.value() * (1 + 1e-12));
    EXPECT_EQ(dispatch("tp=1,ep=8,etp=1,cp=1,mbs=1", d).in_node.value(), 0.0);
  }
}

TEST(LayerWork, TpCommOverlapRunsTheShardedGemmsInPieces) {
  // Megatron's --tp-comm-overlap (userbuffers' ring exchange) runs each TP-sharded GEMM beside
  // the all-gather or reduce-scatter in t pieces of rows / t: the attention projections and the
  // dense FFN of Llama 3 70B at tp = 8 take what eight GEMMs of an eighth of the rows take, more
  // than the whole GEMM without overlap; the FLOPs stay the same. Ulysses SP and TP = 1 keep
  // them whole.
  const Inputs s("hf/llama-3-70b.config.json", "h100-256.json");
  PlanChoice c = choice("tp=8,ep=1,etp=1,edp=8,cp=1,mbs=1");
  auto op = [&](const PlanChoice& x, const std::string& name) {
    for (const LayerOp& o : layer_forward_ops(s.ctx, x, s.ctx.params.layers[0], false, 1.0, 1))
      if (o.name == name) return o;
    ADD_FAILURE() << name;
    return LayerOp{};
  };
  c.overlap = false;
  const LayerOp whole = op(c, "attention projections");
  const LayerOp ffn_whole = op(c, "dense FFN");
  c.overlap = true;
  const LayerOp pieces = op(c, "attention projections");
  const LayerOp ffn_pieces = op(c, "dense FFN");
  EXPECT_DOUBLE_EQ(pieces.flops, whole.flops);
  EXPECT_GT(pieces.time, whole.time * 1.02);
  EXPECT_GT(ffn_pieces.time, ffn_whole.time * 1.02);
  const double h = static_cast<double>(s.ctx.model->hidden_size);
  const double rows = static_cast<double>(s.ctx.seq_len);
  const double width = s.ctx.params.layers[0].attention / h / 8.0;
  EXPECT_NEAR(pieces.time.value(),
              (gemm_time(s.ctx, linear_gemm_rate(s.ctx, c), rows / 8, h, width) * 8.0).value(),
              1e-12);
  c.attention = AttentionMode::kUlysses;
  EXPECT_DOUBLE_EQ(op(c, "attention projections").flops, whole.flops);
  PlanChoice one = choice("tp=1,ep=1,etp=1,cp=1,mbs=1");
  one.overlap = true;
  const LayerOp alone = op(one, "attention projections");
  one.overlap = false;
  EXPECT_EQ(op(one, "attention projections").time, alone.time);
}

TEST(LayerWork, TheLossPassesOverTheLogitsAndKeepsThemOnTheLastStage) {
  // Llama 3 8B's 128,256-entry vocabulary, 8K tokens a micro-batch on one GPU: 1.05e9 logits.
  // Transformer Engine's kernel reads them twice and writes the gradient once in forward and
  // scales it in backward (BF16: 6 and 4 bytes a logit), keeping the BF16 logits; Megatron's
  // native one moves 26 and 14 and keeps the FP32 softmax beside them (6 bytes).
  const Inputs s("hf/llama-3-8b.config.json", "h100-sxm-8.json", 8192);
  PlanChoice c = choice("tp=1,pp=2,cp=1,mbs=1,dp=4,gbs=64");
  const double logits = 8192.0 * 128256.0;
  const double hbm = s.ctx.links.hbm.value() * s.ctx.eff.memory_bound;
  const LossPasses te = cross_entropy_passes(s.ctx, c);
  EXPECT_NEAR(te.forward.bytes, 6.0 * logits, 1.0);
  EXPECT_NEAR(te.forward.time.value(), 6.0 * logits / hbm, 1e-12);
  EXPECT_NEAR(te.backward.value(), 4.0 * logits / hbm, 1e-12);
  EXPECT_NEAR(te.held.value(), 2.0 * logits, 1.0);
  c.cross_entropy = CrossEntropy::kNative;
  const LossPasses native = cross_entropy_passes(s.ctx, c);
  EXPECT_NEAR(native.forward.time / te.forward.time, 26.0 / 6.0, 1e-9);
  EXPECT_NEAR(native.backward / te.backward, 14.0 / 4.0, 1e-9);
  EXPECT_NEAR(native.held.value(), 6.0 * logits, 1.0);
  // TP splits the vocabulary, CP the tokens.
  PlanChoice split = choice("tp=2,pp=2,cp=2,mbs=1,dp=1,gbs=64");
  EXPECT_NEAR(cross_entropy_passes(s.ctx, split).held.value(), 0.5 * logits, 1.0);

  // The last stage's passes carry the loss, the first's do not.
  c.cross_entropy = CrossEntropy::kTe;
  PlanChoice heavy = c;
  heavy.cross_entropy = CrossEntropy::kNative;
  const StageTimes last = stage_times(s.ctx, c, 1), last_native = stage_times(s.ctx, heavy, 1);
  EXPECT_NEAR((last_native.forward - last.forward).value(),
              (native.forward.time - te.forward.time).value(), 1e-12);
  EXPECT_NEAR((last_native.backward - last.backward).value(),
              (native.backward - te.backward).value(), 1e-12);
  EXPECT_EQ(stage_times(s.ctx, c, 0).forward, stage_times(s.ctx, heavy, 0).forward);

  // Memory: the last stage keeps one micro-batch's logits (1F1B runs its backward next); GPipe
  // keeps every micro-batch's; a measured static memory holds them already.
  const Bytes cap = s.cluster.node.gpu.hbm_capacity;
  auto stage_bytes = [&](const PlanChoice& p, int64_t stage, std::optional<Bytes> measured = {}) {
    const MemoryRequest r = memory_request(s.ctx, p, cap, 1.0, measured);
    return estimate_memory(s.model, s.ctx.params, p.parallel, r)
        .stages[static_cast<size_t>(stage)]
        .activation_bytes;
  };
  EXPECT_NEAR((stage_bytes(heavy, 1) - stage_bytes(c, 1)).value(), 4.0 * logits, 1.0);
  EXPECT_EQ(stage_bytes(heavy, 0), stage_bytes(c, 0));
  PlanChoice gpipe = c;
  gpipe.gpipe = true;
  PlanChoice gpipe_native = gpipe;
  gpipe_native.cross_entropy = CrossEntropy::kNative;
  const double microbatches = 64.0 / 4.0;
  EXPECT_NEAR((stage_bytes(gpipe_native, 1) - stage_bytes(gpipe, 1)).value(),
              4.0 * logits * microbatches, 16.0);
  EXPECT_EQ(stage_bytes(heavy, 1, gigabytes(20.0)), stage_bytes(c, 1, gigabytes(20.0)));
}

TEST(LayerWork, TheFirstStagesBackwardBuildsTheEmbeddingsDenseGradient) {
  // Llama 3 8B, 8K tokens: PyTorch's embedding backward zero-fills a gradient of the whole
  // vocabulary slice (128,256 x 4,096 BF16 entries) and Megatron's DDP hook adds it into the
  // FP32 main_grad (2 + 2 + 4 + 4 bytes an entry), beside each token's row (6 bytes an element).
  const Inputs s("hf/llama-3-8b.config.json", "h100-sxm-8.json", 8192);
  const PlanChoice c = choice("tp=1,pp=4,cp=1,mbs=1,dp=2,gbs=64");
  const double entries = 128256.0 * 4096.0, rows = 8192.0 * 4096.0;
  const LayerOp op = embedding_gradient_op(s.ctx, c);
  EXPECT_NEAR(op.bytes, 12.0 * entries + 6.0 * rows, 1.0);
  EXPECT_NEAR(op.time.value(), op.bytes / (s.ctx.links.hbm.value() * s.ctx.eff.memory_bound),
              1e-12);
  // TP splits the vocabulary; every rank's backward sees every token (its own rows masked in).
  EXPECT_NEAR(embedding_gradient_op(s.ctx, choice("tp=2,pp=4,cp=1,mbs=1,dp=1,gbs=64")).bytes,
              6.0 * entries + 6.0 * rows, 1.0);
  // Stages 0 and 1 hold eight layers each; only the first looks tokens up.
  const StageTimes first = stage_times(s.ctx, c, 0), second = stage_times(s.ctx, c, 1);
  EXPECT_NEAR((first.backward - second.backward).value(), op.time.value(), 1e-12);
  EXPECT_NEAR((first.forward - second.forward).value(), 0.0, 1e-12);
}

}  // namespace moe
