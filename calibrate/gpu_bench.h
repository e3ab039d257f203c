// GPU microbenchmarks: one GEMM through cuBLASLt, and copies (device to device, pinned host to
// device and back, both directions at once), timed as METHOD-minded benchmarks are: random
// inputs (never zeros), outputs poisoned first, a warm-up, CUDA events around each repeat, the
// median kept, GEMM results checked against a float64 product of sampled entries.
//
// Built against the CUDA runtime and cuBLASLt when CMake finds them (gpu_bench_cuda.cpp);
// otherwise every call throws NoGpuError (gpu_bench_none.cpp), as it does on a machine without
// a GPU. A failing CUDA or cuBLAS call throws GpuError naming the call and its error.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "calibrate/device_info.h"
#include "planner/cluster_spec.h"

namespace moe::calibrate {

class GpuError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Operand types cuBLASLt multiplies: BF16/FP16/FP8 (E4M3) inputs accumulate in FP32 and write
// BF16 (FP16 for FP16); TF32 reads and writes FP32. kFp8 scales each operand by one number
// (Transformer Engine's tensorwise and delayed recipes); kFp8Block scales A (the weight) per
// 128 x 128 block and B (the activation) per 128 elements along K, as DeepSeek-V3 trained and
// Megatron's --fp8-recipe blockwise runs (cuBLASLt 12.9+, Hopper).
enum class GemmType { kBf16, kFp16, kFp8, kFp8Block, kTf32 };
inline constexpr GemmType kGemmTypes[] = {GemmType::kBf16, GemmType::kFp16, GemmType::kFp8,
                                          GemmType::kFp8Block, GemmType::kTf32};
const char* gemm_type_name(GemmType t);  // "bf16", "fp16", "fp8", "fp8_block", "tf32"
// The precision whose peak (in the cluster file) a type's GEMMs are measured against.
Dtype gemm_dtype(GemmType t);
// The calibration curve each type's GEMMs are written to: "gemm" for BF16 (what the planner
// reads), "gemm_fp16", "gemm_fp8", "gemm_fp8_block", "gemm_tf32" for the others.
std::string gemm_curve_name(GemmType t);
// Whether a GPU of compute capability major.minor has the type on its tensor cores: FP8 from
// sm_89; block-scaled FP8 on Hopper alone (Blackwell scales 32-element blocks instead: MXFP8).
bool gemm_type_runs_on(GemmType t, int major, int minor);
// Whether the type multiplies a GEMM whose inner dimension is `k`: block scaling needs whole
// 128-element blocks.
bool gemm_type_fits(GemmType t, int64_t k);
// The curve for GEMMs in `d` (FP8: the tensorwise one); none for FP32, which runs on CUDA
// cores and is not measured.
std::optional<std::string> gemm_curve_for(Dtype d);

// C[m x n] = A[m x k] B[k x n].
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * k; }
};

struct BenchOptions {
  int device = 0;
  int warmup = 3;
  int repeats = 20;
  // Before the timed repeats, run the work back to back this long: a training run holds its
  // GPUs at the clock their power limit allows, below the boost a cool GPU times a short burst
  // at. 0: no such run. Single-GPU benchmarks only: it counts calls by the local clock, and a
  // collective's ranks must make the same calls.
  double sustain_seconds = 0;
};

struct GemmTiming {
  GemmShape shape;
  GemmType type = GemmType::kBf16;
  double seconds = 0;         // median of the repeats
  double relative_error = 0;  // ||C - ref|| / ||ref|| over the sampled entries
};

// Throws GpuError when the product is wrong (relative error above the type's bound, or an
// entry never written) or when no cuBLASLt algorithm fits the shape.
GemmTiming time_gemm(const GemmShape& shape, GemmType type, const BenchOptions& o);

enum class CopyKind { kDeviceToDevice, kHostToDevice, kDeviceToHost, kBothDirections };
const char* copy_kind_name(CopyKind k);  // "d2d", "h2d", "d2h", "h2d+d2h"

struct CopyTiming {
  CopyKind kind = CopyKind::kDeviceToDevice;
  double bytes = 0;    // copied per direction
  double seconds = 0;  // median; both directions: until the later one lands
};

// Host memory is pinned. The copied bytes are checked on a sample after the timed repeats.
CopyTiming time_copy(CopyKind kind, double bytes, const BenchOptions& o);

}  // namespace moe::calibrate
