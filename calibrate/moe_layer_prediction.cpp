#include "calibrate/moe_layer_prediction.h"

#include <algorithm>

#include "planner/memfine.h"
#include "planner/power_limit.h"

namespace moe::calibrate {

LayerPrediction predict_layer(const TimeContext& ctx, const MoeLayerCase& c,
                              const std::vector<ChunkRouting>& routing) {
  // `execute` runs the layer's operators back to back, its compute stream busy all the time:
  // the GEMMs at the clock the GPU's power limit leaves then (planner/power_limit.h). On the lent
  // H100 they ran at 0.85-0.93 of the cool curve's rate (calibrate/data/h100-runs/execute-*).
  GemmRate peak = linear_gemm_rate(ctx, Precision::kBf16);
  peak.clock = clock_under_power_limit(ctx.gpu.power, 1.0);
  const double h = static_cast<double>(c.hidden), g = static_cast<double>(c.ffn);
  const double up = c.gated ? 2 * g : g;
  const double e = kActivationBytes;
  auto memory = [&](double bytes) {
    return (Bytes(bytes) / (ctx.links.hbm * ctx.eff.memory_bound)).value();
  };
  auto gemm = [&](double m, double k, double n) {
    return m > 0 ? gemm_time(ctx, peak, m, k, n).value() : 0.0;
  };
  LayerPrediction p;
  auto add = [&](LayerOp op, double s) { p.seconds[static_cast<size_t>(op)] += s; };
  double largest_chunk = 0;
  for (const ChunkRouting& ch : routing) {
    const double rows = static_cast<double>(ch.rows()), tokens = static_cast<double>(ch.tokens);
    largest_chunk = std::max(largest_chunk, rows);
    // Gathers read and write a row each; the gather-sums read k rows and write one.
    const double dispatch = memory(2 * rows * h * e);
    const double activation = memory(rows * (up + g) * e);
    double up_proj = 0, down = 0, down_back = 0, up_back = 0;
    for (int64_t n : ch.expert_rows) {
      const double m = static_cast<double>(n);
      up_proj += gemm(m, h, up);
      down += gemm(m, g, h);
      down_back += gemm(m, h, g) + (m > 0 ? gemm(g, m, h) : 0.0);
      up_back += gemm(m, up, h) + (m > 0 ? gemm(h, m, up) : 0.0);
    }
    add(LayerOp::kDispatch, dispatch);
    add(LayerOp::kUpProjection, up_proj);
    add(LayerOp::kActivation, activation);
    add(LayerOp::kDownProjection, down);
    add(LayerOp::kCombine, memory((rows + tokens) * h * e));
    add(LayerOp::kRecompute, dispatch + up_proj + activation);
    add(LayerOp::kCombineBackward, dispatch);
    add(LayerOp::kDownBackward, down_back);
    add(LayerOp::kActivationBackward, memory(rows * (up + g + up) * e));
    add(LayerOp::kUpBackward, up_back);
    add(LayerOp::kDispatchBackward, memory((rows + tokens) * h * e));
  }
  for (double s : p.seconds) p.total_seconds += s;

  memfine::LayerShape shape;
  shape.bytes_per_element = e;
  shape.hidden = c.hidden;
  shape.expert_ffn = c.ffn;
  p.memfine_peak_bytes = (memfine::activation_per_received_token(shape) *
                          memfine::tokens_per_chunk(static_cast<double>(c.rows()),
                                                    static_cast<int64_t>(routing.size())))
                             .value();
  // The runner's three widest moments of a chunk's backward (moe_layer_run.cpp): down
  // projection's gradient (xp, hidden, act, dy, da), the activation's (xp, hidden, da, dh) and
  // the up projection's (xp, dh, dxp).
  const double widest = std::max({2 * h + up + 2 * g, h + 2 * up + g, 2 * h + up});
  p.buffer_peak_bytes = largest_chunk * widest * e;
  return p;
}

}  // namespace moe::calibrate
