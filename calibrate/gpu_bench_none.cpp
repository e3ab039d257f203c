// A build without CUDA: the microbenchmarks exist as names, and running one says why it cannot.
#include "calibrate/affinity_run.h"
#include "calibrate/gpu_bench.h"
#include "calibrate/layer_device.h"

namespace moe::calibrate {

GemmTiming time_gemm(const GemmShape&, GemmType, const BenchOptions&) {
  throw NoGpuError("no GPU: this build has no CUDA (the toolkit was not found at configure time)");
}

CopyTiming time_copy(CopyKind, double, const BenchOptions&) {
  throw NoGpuError("no GPU: this build has no CUDA (the toolkit was not found at configure time)");
}

std::unique_ptr<LayerDevice> make_gpu_layer_device(int) {
  throw NoGpuError("no GPU: this build has no CUDA (the toolkit was not found at configure time)");
}

AffinityTimes run_affinity(const AffinityCase&, int, int, int) {
  throw NoGpuError("no GPU: this build has no CUDA (the toolkit was not found at configure time)");
}

}  // namespace moe::calibrate
