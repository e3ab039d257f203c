#include "calibrate/moe_layer_execute.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "calibrate/gpu_bench.h"
#include "calibrate/median.h"

namespace moe::calibrate {

namespace {

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
}

// The small case on `device` and on the CPU, two chunks each: the largest relative
// (Frobenius) error of the output and the three gradients.
double check_against_reference(LayerDevice& device, const MoeLayerCase& full,
                               const ExecuteOptions& o) {
  const MoeLayerCase c = shrink(full, o.check_tokens, full.top_k + 1);
  const std::vector<ChunkRouting> routing =
      route_in_chunks(c, std::min<int64_t>(2, c.tokens), o.seed);
  auto cpu = make_cpu_layer_device();
  LayerTensors got = make_layer_tensors(device, c, o.seed);
  // The reference starts from the device's rounded inputs, so only the arithmetic differs.
  LayerTensors want =
      layer_tensors_from(*cpu, c, device.download(got.x), device.download(got.d_out),
                         device.download(got.w13), device.download(got.w2));
  run_layer(*cpu, c, routing, want);
  run_layer(device, c, routing, got);
  double worst = 0;
  for (auto member :
       {&LayerTensors::out, &LayerTensors::d_x, &LayerTensors::d_w13, &LayerTensors::d_w2}) {
    worst =
        std::max(worst, relative_error(device.download(got.*member), cpu->download(want.*member)));
  }
  return worst;
}

}  // namespace

LayerExecution execute_layer(LayerDevice& device, const TimeContext& ctx, const MoeLayerCase& c,
                             const ExecuteOptions& o,
                             const std::function<void(size_t, size_t)>& progress) {
  LayerExecution out;
  out.device = device.name();
  out.layer = c;
  out.check_error = check_against_reference(device, c, o);
  if (!(out.check_error <= o.check_tolerance)) {
    throw GpuError(fmt::format(
        "{}: the MoE layer's output and gradients differ from the CPU reference by {:.3g} "
        "(allowed {:.3g})",
        out.device, out.check_error, o.check_tolerance));
  }
  LayerTensors t = make_layer_tensors(device, c, o.seed);
  const int repeats = std::max(o.repeats, 1);
  for (size_t i = 0; i < o.chunks.size(); ++i) {
    ChunkExecution run;
    run.chunks = o.chunks[i];
    const std::vector<ChunkRouting> routing = route_in_chunks(c, run.chunks, o.seed);
    run.predicted = predict_layer(ctx, c, routing);
    run_layer(device, c, routing, t);  // warm-up: the pool grows, cuBLAS picks its kernels
    std::vector<LayerRun> runs;
    for (int r = 0; r < repeats; ++r) runs.push_back(run_layer(device, c, routing, t));
    for (int op = 0; op < kLayerOps; ++op) {
      std::vector<double> s;
      for (const LayerRun& lr : runs) s.push_back(lr.seconds[static_cast<size_t>(op)]);
      run.measured.seconds[static_cast<size_t>(op)] = median(s);
    }
    std::vector<double> totals;
    for (const LayerRun& lr : runs) {
      totals.push_back(lr.total_seconds);
      run.measured.peak_bytes = std::max(run.measured.peak_bytes, lr.peak_bytes);
    }
    run.measured.total_seconds = median(totals);
    out.runs.push_back(run);
    if (progress) progress(i + 1, o.chunks.size());
  }
  return out;
}

}  // namespace moe::calibrate
