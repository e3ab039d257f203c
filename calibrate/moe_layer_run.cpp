#include "calibrate/moe_layer_run.h"

#include <cmath>
#include <memory>
#include <numeric>

namespace moe::calibrate {

const char* layer_op_name(LayerOp op) {
  switch (op) {
    case LayerOp::kDispatch:
      return "dispatch";
    case LayerOp::kUpProjection:
      return "up projection";
    case LayerOp::kActivation:
      return "activation";
    case LayerOp::kDownProjection:
      return "down projection";
    case LayerOp::kCombine:
      return "combine";
    case LayerOp::kRecompute:
      return "recompute";
    case LayerOp::kCombineBackward:
      return "combine backward";
    case LayerOp::kDownBackward:
      return "down projection backward";
    case LayerOp::kActivationBackward:
      return "activation backward";
    case LayerOp::kUpBackward:
      return "up projection backward";
    case LayerOp::kDispatchBackward:
      return "dispatch backward";
  }
  return "?";
}

namespace {

int64_t up_width(const MoeLayerCase& c) {
  return c.gated ? 2 * c.ffn : c.ffn;
}

struct ChunkIndices {
  std::shared_ptr<void> row_token, row_weight, token_rows, token_weights;
};

}  // namespace

std::vector<float> random_values(int64_t n, float scale, uint64_t seed, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  const float half_width = scale * std::sqrt(3.0f);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull +
                 static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    v[static_cast<size_t>(i)] = (2.0f * u - 1.0f) * half_width;
  }
  return v;
}

LayerTensors make_layer_tensors(LayerDevice& d, const MoeLayerCase& c, uint32_t seed) {
  const int64_t n = c.tokens, h = c.hidden, g = c.ffn, e = c.experts(), up = up_width(c);
  return layer_tensors_from(
      d, c, random_values(n * h, 1.0f, seed, 0), random_values(n * h, 1.0f, seed, 1),
      random_values(e * h * up, 1.0f / std::sqrt(static_cast<float>(h)), seed, 2),
      random_values(e * g * h, 1.0f / std::sqrt(static_cast<float>(g)), seed, 3));
}

LayerTensors layer_tensors_from(LayerDevice& d, const MoeLayerCase& c, const std::vector<float>& x,
                                const std::vector<float>& d_out, const std::vector<float>& w13,
                                const std::vector<float>& w2) {
  const int64_t n = c.tokens, h = c.hidden, g = c.ffn, e = c.experts(), up = up_width(c);
  LayerTensors t;
  t.x = d.upload(x, n, h);
  t.d_out = d.upload(d_out, n, h);
  t.w13 = d.upload(w13, e * h, up);
  t.w2 = d.upload(w2, e * g, h);
  t.out = d.alloc(n, h);
  t.d_x = d.alloc(n, h);
  t.d_w13 = d.alloc(e * h, up);
  t.d_w2 = d.alloc(e * g, h);
  return t;
}

LayerRun run_layer(LayerDevice& d, const MoeLayerCase& c, const std::vector<ChunkRouting>& routing,
                   LayerTensors& t) {
  const int64_t h = c.hidden, g = c.ffn, up = up_width(c), k = c.top_k;
  std::vector<ChunkIndices> idx;
  for (const ChunkRouting& ch : routing) {
    idx.push_back({d.upload_indices(ch.row_token), d.upload_weights(ch.row_weight),
                   d.upload_indices(ch.token_rows), d.upload_weights(ch.token_weights)});
  }
  d.zero(t.d_w13);
  d.zero(t.d_w2);
  d.collect_times(kLayerOps);  // drop whatever came before
  d.reset_peak();
  auto timed = [&](LayerOp op, const std::function<void()>& work) {
    d.timed(static_cast<int>(op), work);
  };
  // Expert e's rows in a chunk buffer, and its weights.
  auto for_experts = [&](const ChunkRouting& ch, auto&& fn) {
    int64_t first = 0;
    for (int64_t e = 0; e < c.experts(); ++e) {
      const int64_t n = ch.expert_rows[static_cast<size_t>(e)];
      if (n > 0) fn(e, first, n);
      first += n;
    }
  };
  // Dispatch, up projection and activation: the forward's first half, and backward's recompute.
  // `step(op, work)` times each operator on its own (forward) or runs it plainly (inside the
  // recompute's single slot).
  auto up_half = [&](const ChunkRouting& ch, const ChunkIndices& ix, DeviceMatrix& xp,
                     DeviceMatrix& hidden, DeviceMatrix& act, auto&& step) {
    const int64_t rows = ch.rows();
    step(LayerOp::kDispatch, [&] {
      xp = d.alloc(rows, h);
      d.gather_rows(all_rows(t.x), ix.row_token.get(), nullptr, all_rows(xp));
    });
    step(LayerOp::kUpProjection, [&] {
      hidden = d.alloc(rows, up);
      for_experts(ch, [&](int64_t e, int64_t first, int64_t n) {
        d.gemm(rows_of(xp, first, n), false, rows_of(t.w13, e * h, h), false,
               rows_of(hidden, first, n), false);
      });
    });
    step(LayerOp::kActivation, [&] {
      act = d.alloc(rows, g);
      d.activation(all_rows(hidden), all_rows(act), c.gated);
    });
  };
  auto untimed = [](LayerOp, const std::function<void()>& work) { work(); };
  // Backward of Y = X W per expert (W: `width` rows per expert): dX = dY W^T, dW += X^T dY.
  auto linear_backward = [&](const ChunkRouting& ch, const DeviceMatrix& x, const DeviceMatrix& dy,
                             const DeviceMatrix& w, const DeviceMatrix& dw, int64_t width,
                             const DeviceMatrix& dx) {
    for_experts(ch, [&](int64_t e, int64_t first, int64_t n) {
      d.gemm(rows_of(dy, first, n), false, rows_of(w, e * width, width), true,
             rows_of(dx, first, n), false);
      d.gemm(rows_of(x, first, n), true, rows_of(dy, first, n), false,
             rows_of(dw, e * width, width), true);
    });
  };

  for (size_t i = 0; i < routing.size(); ++i) {
    const ChunkRouting& ch = routing[i];
    const int64_t rows = ch.rows();
    DeviceMatrix xp, hidden, act, yp;
    up_half(ch, idx[i], xp, hidden, act, timed);
    xp = {};  // chunked recompute: nothing of the chunk outlives its combine
    hidden = {};
    timed(LayerOp::kDownProjection, [&] {
      yp = d.alloc(rows, h);
      for_experts(ch, [&](int64_t e, int64_t first, int64_t n) {
        d.gemm(rows_of(act, first, n), false, rows_of(t.w2, e * g, g), false, rows_of(yp, first, n),
               false);
      });
    });
    act = {};
    timed(LayerOp::kCombine, [&] {
      d.gather_sum_rows(all_rows(yp), idx[i].token_rows.get(), idx[i].token_weights.get(), k,
                        rows_of(t.out, ch.first_token, ch.tokens));
    });
  }

  for (size_t i = 0; i < routing.size(); ++i) {
    const ChunkRouting& ch = routing[i];
    const int64_t rows = ch.rows();
    DeviceMatrix xp, hidden, act, dy, da, dh, dxp;
    timed(LayerOp::kRecompute, [&] { up_half(ch, idx[i], xp, hidden, act, untimed); });
    timed(LayerOp::kCombineBackward, [&] {
      dy = d.alloc(rows, h);
      d.gather_rows(all_rows(t.d_out), idx[i].row_token.get(), idx[i].row_weight.get(),
                    all_rows(dy));
    });
    timed(LayerOp::kDownBackward, [&] {
      da = d.alloc(rows, g);
      linear_backward(ch, act, dy, t.w2, t.d_w2, g, da);
    });
    dy = {};
    act = {};
    timed(LayerOp::kActivationBackward, [&] {
      dh = d.alloc(rows, up);
      d.activation_backward(all_rows(hidden), all_rows(da), all_rows(dh), c.gated);
    });
    da = {};
    hidden = {};
    timed(LayerOp::kUpBackward, [&] {
      dxp = d.alloc(rows, h);
      linear_backward(ch, xp, dh, t.w13, t.d_w13, h, dxp);
    });
    dh = {};
    xp = {};
    timed(LayerOp::kDispatchBackward, [&] {
      d.gather_sum_rows(all_rows(dxp), idx[i].token_rows.get(), nullptr, k,
                        rows_of(t.d_x, ch.first_token, ch.tokens));
    });
  }

  LayerRun run;
  const std::vector<double> s = d.collect_times(kLayerOps);
  for (int op = 0; op < kLayerOps; ++op)
    run.seconds[static_cast<size_t>(op)] = s[static_cast<size_t>(op)];
  run.total_seconds = std::accumulate(s.begin(), s.end(), 0.0);
  run.peak_bytes = d.peak_bytes();
  return run;
}

}  // namespace moe::calibrate
