// The work each layer operator records for plan --explain (LayerOp::flops, peak, bytes): the
// GEMMs' FLOPs add up to the layer's own count, no op runs faster than its peak, and the
// operators' compute is what the layer's passes charge.
#include <gtest/gtest.h>

#include "planner/layer_ops.h"
#include "planner/model_stats.h"
#include "planner/parallel.h"
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
    for (const LayerOp& op : layer_forward_ops(s.ctx, c, s.ctx.params.layers[0], true, 1.0, 1))
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
