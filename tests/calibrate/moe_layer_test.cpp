// `moeplan execute`'s MoE layer on the CPU reference device: the routing it builds, the chunked
// run against an independent per-expert reference (calibrate/cpu_expert), the peak against the
// buffers the prediction counts, and the GPU device's refusal where there is no GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>

#include "calibrate/cpu_expert.h"
#include "calibrate/device_info.h"
#include "calibrate/layer_device.h"
#include "calibrate/moe_layer_case.h"
#include "calibrate/moe_layer_execute.h"
#include "calibrate/moe_layer_prediction.h"
#include "calibrate/moe_layer_run.h"
#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/parallel.h"
#include "planner/routing_skew.h"
#include "test_models.h"
#include "test_paths.h"

namespace moe::calibrate {

namespace {

MoeLayerCase small_case(bool gated) {
  MoeLayerCase c;
  c.hidden = 16;
  c.ffn = 24;
  c.gated = gated;
  c.top_k = 2;
  c.tokens = 40;
  c.expert_rows = {30, 20, 20, 10};  // sums to 80 = 40 tokens x top-2, none above 40
  return c;
}

PlanChoice mixtral_plan(int64_t ep) {
  PlanChoice p;
  p.parallel = resolve(parse_parallel(fmt::format("tp=1,pp=1,cp=1,ep={},dp={},mbs=1", ep, ep)));
  p.seq_len = 4096;
  return p;
}

double max_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return num / std::max(den, 1e-30);
}

}  // namespace

TEST(MoeLayerCase, RoutesEveryExpertItsRowsOverDistinctExperts) {
  const MoeLayerCase c = small_case(true);
  for (int64_t chunks : {1, 3}) {
    const std::vector<ChunkRouting> r = route_in_chunks(c, chunks, 7);
    ASSERT_EQ(static_cast<int64_t>(r.size()), chunks);
    std::vector<int64_t> per_expert(4, 0);
    int64_t tokens = 0;
    for (const ChunkRouting& ch : r) {
      EXPECT_EQ(ch.first_token, tokens);
      tokens += ch.tokens;
      EXPECT_EQ(ch.rows(), ch.tokens * c.top_k);
      for (size_t e = 0; e < 4; ++e) per_expert[e] += ch.expert_rows[e];
      // Each route points at a row that holds that token, and each token's routes are distinct
      // experts (rows of one expert are contiguous).
      std::vector<int64_t> first(4, 0);
      for (size_t e = 1; e < 4; ++e) first[e] = first[e - 1] + ch.expert_rows[e - 1];
      auto expert_of = [&](int32_t row) {
        int64_t e = 3;
        while (row < first[static_cast<size_t>(e)]) --e;
        return e;
      };
      for (int64_t t = 0; t < ch.tokens; ++t) {
        std::set<int64_t> experts;
        float sum = 0;
        for (int64_t j = 0; j < c.top_k; ++j) {
          const int32_t row = ch.token_rows[static_cast<size_t>(t * c.top_k + j)];
          EXPECT_EQ(ch.row_token[static_cast<size_t>(row)], ch.first_token + t);
          EXPECT_EQ(ch.row_weight[static_cast<size_t>(row)],
                    ch.token_weights[static_cast<size_t>(t * c.top_k + j)]);
          experts.insert(expert_of(row));
          sum += ch.token_weights[static_cast<size_t>(t * c.top_k + j)];
        }
        EXPECT_EQ(experts.size(), 2u);
        EXPECT_NEAR(sum, 1.0f, 1e-6);
      }
    }
    EXPECT_EQ(tokens, c.tokens);
    EXPECT_EQ(per_expert, c.expert_rows);
  }
  EXPECT_THROW(route_in_chunks(c, 41, 7), InputError);
}

TEST(MoeLayerCase, TakesTheBusiestRanksRowsFromThePlan) {
  const ModelSpec m = testing_models::mixtral_8x7b();
  const ClusterSpec cl = io::load_cluster(MOEPLAN_SOURCE_DIR "/topologies/h100-sxm-8.json");
  // Balanced, EP = 2: 4,096 tokens x top-2 = 8,192 rows over 4 local experts, 2,048 each.
  TimeContext ctx = make_time_context(m, cl, Efficiencies{}, RoutingSkew{}, 4096);
  MoeLayerCase c = layer_case_of(ctx, mixtral_plan(2), 0);
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(c.ffn, 14336);
  EXPECT_EQ(c.top_k, 2);
  EXPECT_EQ(c.tokens, 4096);
  EXPECT_EQ(c.expert_rows, (std::vector<int64_t>{2048, 2048, 2048, 2048}));
  // EP = 8: one local expert, so each virtual token routes once; capacity 1.5 on rank 0.
  ctx = make_time_context(m, cl, Efficiencies{}, parse_skew("capacity=1.5", m), 4096);
  c = layer_case_of(ctx, mixtral_plan(8), 0);
  EXPECT_EQ(c.top_k, 1);
  // Each of 8 ranks sends an eighth of its 4,096 x 2 routes: 8,192 balanced, x 1.5.
  EXPECT_EQ(c.rows(), 12288);
  // A popularity skew spreads the rank's rows by its experts' proportions.
  ctx = make_time_context(m, cl, Efficiencies{}, parse_skew("G=0.5", m), 4096);
  c = layer_case_of(ctx, mixtral_plan(2), 0);
  EXPECT_GT(c.expert_rows.front(), c.expert_rows.back());
  EXPECT_EQ(c.rows(), c.tokens * 2);
  EXPECT_LE(c.expert_rows.front(), c.tokens);
  EXPECT_THROW(layer_case_of(ctx, mixtral_plan(2), 32), InputError);

  const MoeLayerCase s = shrink(c, 64, 3);
  EXPECT_EQ(s.tokens, 64);
  EXPECT_EQ(s.experts(), 3);
  EXPECT_EQ(s.rows(), 128);
  EXPECT_GE(s.expert_rows.front(), s.expert_rows.back());
  EXPECT_EQ(shrink(c, 64, 1).experts(), 2);  // never below top-k
}

// Chunked or not, the layer computes what each expert computes on its own tokens (cpu_expert's
// independent forward and backward), weighted by the gates and summed per token.
TEST(MoeLayerRun, ChunkedRunMatchesPerExpertReference) {
  for (bool gated : {true, false}) {
    const MoeLayerCase c = small_case(gated);
    auto dev = make_cpu_layer_device();
    LayerTensors t = make_layer_tensors(*dev, c, 11);
    const std::vector<float> x = dev->download(t.x), d_out = dev->download(t.d_out);
    const std::vector<float> w13 = dev->download(t.w13), w2 = dev->download(t.w2);
    const int64_t h = c.hidden, g = c.ffn, up = gated ? 2 * g : g;

    // The reference, from one chunk's routing (the same for any chunking: same seed).
    const std::vector<ChunkRouting> whole = route_in_chunks(c, 1, 3);
    std::vector<float> out(static_cast<size_t>(c.tokens * h), 0.0f), d_x(out.size(), 0.0f);
    std::vector<float> d_w13(w13.size(), 0.0f), d_w2(w2.size(), 0.0f);
    const ExpertShape shape{h, g, gated};
    int64_t first = 0;
    for (int64_t e = 0; e < 4; ++e) {
      const int64_t n = whole[0].expert_rows[static_cast<size_t>(e)];
      ExpertWeights w;
      w.w1.resize(h, g);
      w.w3.resize(gated ? h : 0, gated ? g : 0);
      w.w2.resize(g, h);
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < g; ++j) {
          w.w1(i, j) = w13[static_cast<size_t>((e * h + i) * up + j)];
          if (gated) w.w3(i, j) = w13[static_cast<size_t>((e * h + i) * up + g + j)];
        }
      for (int64_t i = 0; i < g; ++i)
        for (int64_t j = 0; j < h; ++j) w.w2(i, j) = w2[static_cast<size_t>((e * g + i) * h + j)];
      Eigen::MatrixXf xe(n, h), dye(n, h);
      for (int64_t r = 0; r < n; ++r) {
        const int32_t tok = whole[0].row_token[static_cast<size_t>(first + r)];
        const float gate = whole[0].row_weight[static_cast<size_t>(first + r)];
        for (int64_t j = 0; j < h; ++j) {
          xe(r, j) = x[static_cast<size_t>(tok * h + j)];
          dye(r, j) = d_out[static_cast<size_t>(tok * h + j)] * gate;
        }
      }
      const Eigen::MatrixXf ye = expert_forward(shape, w, xe, 1);
      ExpertGrads grads;
      BackwardWorkspace ws;
      expert_backward(shape, w, xe, dye, 1, grads, ws);
      for (int64_t r = 0; r < n; ++r) {
        const int32_t tok = whole[0].row_token[static_cast<size_t>(first + r)];
        const float gate = whole[0].row_weight[static_cast<size_t>(first + r)];
        for (int64_t j = 0; j < h; ++j) {
          out[static_cast<size_t>(tok * h + j)] += gate * ye(r, j);
          d_x[static_cast<size_t>(tok * h + j)] += grads.dx(r, j);
        }
      }
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < g; ++j) {
          d_w13[static_cast<size_t>((e * h + i) * up + j)] = grads.dw1(i, j);
          if (gated) d_w13[static_cast<size_t>((e * h + i) * up + g + j)] = grads.dw3(i, j);
        }
      for (int64_t i = 0; i < g; ++i)
        for (int64_t j = 0; j < h; ++j)
          d_w2[static_cast<size_t>((e * g + i) * h + j)] = grads.dw2(i, j);
      first += n;
    }

    for (int64_t chunks : {1, 4}) {
      const LayerRun run = run_layer(*dev, c, route_in_chunks(c, chunks, 3), t);
      EXPECT_LT(max_relative(dev->download(t.out), out), 1e-5) << chunks;
      EXPECT_LT(max_relative(dev->download(t.d_x), d_x), 1e-5) << chunks;
      EXPECT_LT(max_relative(dev->download(t.d_w13), d_w13), 1e-5) << chunks;
      EXPECT_LT(max_relative(dev->download(t.d_w2), d_w2), 1e-5) << chunks;
      EXPECT_GT(run.total_seconds, 0.0);
      EXPECT_GT(run.seconds[static_cast<size_t>(LayerOp::kUpBackward)], 0.0);
    }
  }
}

// The peak is one chunk's backward working set, exactly what the prediction counts, and it
// falls with the chunk count as FCDA promises; eq. (2)'s term falls the same way.
TEST(MoeLayerRun, PeakIsTheLargestChunksWorkingSet) {
  MoeLayerCase c = small_case(true);
  c.tokens = 400;
  c.expert_rows = {300, 200, 200, 100};
  const ModelSpec m = testing_models::mixtral_8x7b();
  const ClusterSpec cl = io::load_cluster(MOEPLAN_SOURCE_DIR "/topologies/h100-sxm-8.json");
  const TimeContext ctx = make_time_context(m, cl, Efficiencies{}, RoutingSkew{}, 4096);
  auto dev = make_cpu_layer_device();
  LayerTensors t = make_layer_tensors(*dev, c, 1);
  std::map<int64_t, double> peak, eq2;
  for (int64_t chunks : {1, 2, 4, 8}) {
    const std::vector<ChunkRouting> r = route_in_chunks(c, chunks, 2);
    const LayerRun run = run_layer(*dev, c, r, t);
    const LayerPrediction p = predict_layer(ctx, c, r);
    EXPECT_DOUBLE_EQ(run.peak_bytes, p.buffer_peak_bytes) << chunks;
    // h + 2 up + g = 16 + 96 + 24 = 136 elements per row, BF16, 800 / c rows.
    EXPECT_DOUBLE_EQ(p.buffer_peak_bytes, 800.0 / static_cast<double>(chunks) * 136 * 2);
    peak[chunks] = run.peak_bytes;
    eq2[chunks] = p.memfine_peak_bytes;
    // Backward's recompute is the forward's first half again.
    const auto at = [&](LayerOp op) { return p.seconds[static_cast<size_t>(op)]; };
    EXPECT_NEAR(at(LayerOp::kRecompute),
                at(LayerOp::kDispatch) + at(LayerOp::kUpProjection) + at(LayerOp::kActivation),
                1e-15);
    EXPECT_GT(at(LayerOp::kUpBackward), at(LayerOp::kUpProjection));
  }
  EXPECT_DOUBLE_EQ(peak[1] / peak[8], 8.0);
  EXPECT_DOUBLE_EQ(eq2[1], 800.0 * 2 * (2 * 16 + 2 * 24));  // D_t (2h + 2g) s''
  EXPECT_DOUBLE_EQ(eq2[1] / eq2[4], 4.0);
}

// `execute` runs the layer back to back, its stream busy all the time: on a GPU with a power
// limit the GEMMs run at the clock it leaves then (the H100 file's 0.85), and the memory-bound
// gathers and activation keep their time.
TEST(MoeLayerRun, PredictionRunsTheGemmsAtThePowerLimitsClock) {
  MoeLayerCase c = small_case(true);
  c.hidden = 4096;
  c.ffn = 14336;
  c.tokens = 8192;
  c.expert_rows = {4096, 4096, 4096, 4096};
  const ModelSpec m = testing_models::mixtral_8x7b();
  ClusterSpec cl = io::load_cluster(MOEPLAN_SOURCE_DIR "/topologies/h100-1.json");
  ASSERT_EQ(cl.node.gpu.power.sustained_rate, 0.85);
  const std::vector<ChunkRouting> r = route_in_chunks(c, 1, 2);
  const LayerPrediction limited =
      predict_layer(make_time_context(m, cl, efficiencies(), RoutingSkew{}, 4096), c, r);
  cl.node.gpu.power = GpuPower{};
  const LayerPrediction cool =
      predict_layer(make_time_context(m, cl, efficiencies(), RoutingSkew{}, 4096), c, r);
  const auto ratio = [&](LayerOp op) {
    return limited.seconds[static_cast<size_t>(op)] / cool.seconds[static_cast<size_t>(op)];
  };
  for (LayerOp op : {LayerOp::kUpProjection, LayerOp::kDownProjection, LayerOp::kUpBackward})
    EXPECT_NEAR(ratio(op), 1 / 0.85, 1e-9) << static_cast<int>(op);
  for (LayerOp op : {LayerOp::kDispatch, LayerOp::kActivation, LayerOp::kCombine})
    EXPECT_DOUBLE_EQ(ratio(op), 1.0) << static_cast<int>(op);
}

// On a GPU: the BF16 layer agrees with the CPU reference, every operator takes time, and the
// pool's high-water mark is the buffers the prediction counts (the pool rounds each allocation
// up, so within 2 MiB per live buffer). Without one: the device says so, and the test skips.
TEST(MoeLayerExecute, GpuMatchesTheReferenceWhereAGpuIsPresent) {
  std::unique_ptr<LayerDevice> gpu;
  try {
    gpu = make_gpu_layer_device(0);
  } catch (const NoGpuError& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU"), std::string::npos);
    GTEST_SKIP() << e.what();
  }
  const ModelSpec m = testing_models::mixtral_8x7b();
  const ClusterSpec cl = io::load_cluster(MOEPLAN_SOURCE_DIR "/topologies/h100-1.json");
  const TimeContext ctx = make_time_context(m, cl, Efficiencies{}, RoutingSkew{}, 4096);
  // Widths in multiples of 8 take the kernels' 16-byte path, the others their scalar one.
  for (auto [hidden, ffn] : {std::pair<int64_t, int64_t>{1024, 2048}, {1028, 2044}}) {
    MoeLayerCase c;
    c.hidden = hidden;
    c.ffn = ffn;
    c.top_k = 2;
    c.tokens = 2048;
    c.expert_rows = {1536, 1024, 1024, 512};
    ExecuteOptions o;
    o.chunks = {1, 4};
    o.repeats = 3;
    const LayerExecution e = execute_layer(*gpu, ctx, c, o);
    EXPECT_LT(e.check_error, o.check_tolerance) << hidden;
    for (const ChunkExecution& r : e.runs) {
      for (double s : r.measured.seconds) EXPECT_GT(s, 0.0) << r.chunks;
      EXPECT_GE(r.measured.peak_bytes, r.predicted.buffer_peak_bytes) << r.chunks;
      EXPECT_LE(r.measured.peak_bytes, r.predicted.buffer_peak_bytes + 5 * 2097152.0) << r.chunks;
    }
    EXPECT_LT(e.runs[1].measured.peak_bytes, e.runs[0].measured.peak_bytes);
  }
}

}  // namespace moe::calibrate

namespace moe::calibrate {

// The measurement loop on the CPU reference standing in for a GPU: the check finds no
// difference, every chunk count gets a prediction and a measurement, the peaks fall with c.
TEST(MoeLayerExecute, ChecksThenMeasuresEveryChunkCount) {
  const ModelSpec m = testing_models::mixtral_8x7b();
  const ClusterSpec cl = io::load_cluster(MOEPLAN_SOURCE_DIR "/topologies/h100-sxm-8.json");
  const TimeContext ctx = make_time_context(m, cl, Efficiencies{}, RoutingSkew{}, 4096);
  MoeLayerCase c = small_case(true);
  c.tokens = 200;
  c.expert_rows = {150, 100, 100, 50};
  ExecuteOptions o;
  o.chunks = {1, 4};
  o.repeats = 2;
  o.check_tokens = 16;
  auto dev = make_cpu_layer_device();
  std::vector<size_t> progress;
  const LayerExecution e =
      execute_layer(*dev, ctx, c, o, [&](size_t done, size_t) { progress.push_back(done); });
  EXPECT_LT(e.check_error, 1e-6);
  EXPECT_EQ(progress, (std::vector<size_t>{1, 2}));
  ASSERT_EQ(e.runs.size(), 2u);
  EXPECT_EQ(e.runs[1].chunks, 4);
  EXPECT_GT(e.runs[0].measured.total_seconds, 0.0);
  EXPECT_GT(e.runs[0].predicted.total_seconds, 0.0);
  EXPECT_DOUBLE_EQ(e.runs[0].measured.peak_bytes, e.runs[0].predicted.buffer_peak_bytes);
  EXPECT_DOUBLE_EQ(e.runs[0].measured.peak_bytes / e.runs[1].measured.peak_bytes, 4.0);
  o.chunks = {201};
  EXPECT_THROW(execute_layer(*dev, ctx, c, o), InputError);
}

}  // namespace moe::calibrate
