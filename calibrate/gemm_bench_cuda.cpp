// One GEMM through cuBLASLt, timed and checked (calibrate/gpu_bench.h).
//
// Every type uses the "TN" layout (A stored K x M and transposed, B stored K x N), the one
// layout cuBLASLt's FP8 kernels accept on Hopper, so all four types time the same arrangement.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "calibrate/cuda_gemm.h"
#include "calibrate/cuda_util.h"

namespace moe::calibrate {

namespace {

struct TypeInfo {
  cudaDataType_t input, output;
  cublasComputeType_t compute;
  size_t input_bytes, output_bytes;
  double tolerance;  // relative Frobenius error allowed (output rounding dominates)
};

TypeInfo info_of(GemmType t) {
  switch (t) {
    case GemmType::kBf16:
      return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2, 2, 1e-2};
    case GemmType::kFp16:
      return {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 2, 2, 5e-3};
    case GemmType::kFp8:
    case GemmType::kFp8Block:
      // Hopper's FP8 tensor cores accumulate in reduced precision unless split; allow more.
      return {CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 1, 2, 5e-2};
    case GemmType::kTf32:
      return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4, 4, 5e-3};
  }
  throw GpuError("unknown GEMM type");
}

// Encodes x in the input type into `out`; returns the value the type actually holds.
double encode(GemmType t, float x, unsigned char* out) {
  switch (t) {
    case GemmType::kBf16: {
      const __nv_bfloat16 v = __float2bfloat16(x);
      std::memcpy(out, &v, 2);
      return static_cast<double>(__bfloat162float(v));
    }
    case GemmType::kFp16: {
      const __half v = __float2half(x);
      std::memcpy(out, &v, 2);
      return static_cast<double>(__half2float(v));
    }
    case GemmType::kFp8:
    case GemmType::kFp8Block: {
      const __nv_fp8_e4m3 v(x);
      std::memcpy(out, &v, 1);
      return static_cast<double>(static_cast<float>(v));
    }
    case GemmType::kTf32:
      std::memcpy(out, &x, 4);
      return static_cast<double>(x);  // the ref keeps FP32; TF32 rounding is inside the bound
  }
  return 0;
}

double decode(GemmType t, const unsigned char* in) {
  if (t == GemmType::kTf32) {
    float v;
    std::memcpy(&v, in, 4);
    return v;
  }
  if (t == GemmType::kFp16) {
    __half v;
    std::memcpy(&v, in, 2);
    return __half2float(v);
  }
  __nv_bfloat16 v;  // BF16 and FP8 write BF16
  std::memcpy(&v, in, 2);
  return __bfloat162float(v);
}

struct LtHandle {
  cublasLtHandle_t h = nullptr;
  LtHandle() { MOE_BLAS(cuda::cublas().lt_create(&h)); }
  ~LtHandle() { cuda::cublas().lt_destroy(h); }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(cudaDataType_t type, int64_t rows, int64_t cols) {
    MOE_BLAS(cuda::cublas().lt_layout_create(&l, type, static_cast<uint64_t>(rows),
                                             static_cast<uint64_t>(cols), rows));
  }
  ~Layout() { cuda::cublas().lt_layout_destroy(l); }
};
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  explicit MatmulDesc(cublasComputeType_t compute) {
    MOE_BLAS(cuda::cublas().lt_desc_create(&d, compute, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    MOE_BLAS(cuda::cublas().lt_desc_set(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    MOE_BLAS(cuda::cublas().lt_desc_set(d, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
  }
  ~MatmulDesc() { cuda::cublas().lt_desc_destroy(d); }
};
// Block scaling's factors (float32): A, the weight, one per 128 x 128 block; B, the activation,
// one per 128 elements of K for each of its N columns. Every factor is 1, so the product and its
// check are the unscaled ones; the kernel reads the factors all the same. Sized with room for
// the padding cuBLASLt's tiled layouts may round to.
struct BlockScales {
  std::unique_ptr<cuda::DeviceBuffer> a, b;
  BlockScales(const GemmShape& s, const MatmulDesc& desc) {
    const int64_t kb = (s.k + 127) / 128;
    const size_t a_count = static_cast<size_t>(kb * ((s.m + 127) / 128 + 4));
    const size_t b_count = static_cast<size_t>(kb * ((s.n + 127) / 128 * 128 + 4));
    a = ones(a_count);
    b = ones(b_count);
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const void* a_ptr = a->get();
    const void* b_ptr = b->get();
    MOE_BLAS(cuda::cublas().lt_desc_set(desc.d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                        sizeof a_mode));
    MOE_BLAS(cuda::cublas().lt_desc_set(desc.d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                        sizeof b_mode));
    MOE_BLAS(cuda::cublas().lt_desc_set(desc.d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_ptr,
                                        sizeof a_ptr));
    MOE_BLAS(cuda::cublas().lt_desc_set(desc.d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_ptr,
                                        sizeof b_ptr));
  }
  static std::unique_ptr<cuda::DeviceBuffer> ones(size_t count) {
    const std::vector<float> host(count, 1.0f);
    auto dev = std::make_unique<cuda::DeviceBuffer>(count * sizeof(float));
    MOE_CUDA(cudaMemcpy(dev->get(), host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    return dev;
  }
};

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  explicit Preference(size_t workspace) {
    MOE_BLAS(cuda::cublas().lt_pref_create(&p));
    MOE_BLAS(cuda::cublas().lt_pref_set(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                        sizeof workspace));
  }
  ~Preference() { cuda::cublas().lt_pref_destroy(p); }
};

}  // namespace

GemmTiming time_gemm(const GemmShape& s, GemmType type, const BenchOptions& o) {
  const cudaDeviceProp prop = cuda::use_device(o.device);
  if (!gemm_type_runs_on(type, prop.major, prop.minor))
    throw GpuError(fmt::format("{} (sm_{}{}) has no {} GEMMs on its tensor cores", prop.name,
                               prop.major, prop.minor, gemm_type_name(type)));
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) throw GpuError("GEMM shape must be positive");
  if (!gemm_type_fits(type, s.k))
    throw GpuError(
        fmt::format("{} needs K in whole 128-element blocks, got {}", gemm_type_name(type), s.k));
  const TypeInfo ti = info_of(type);
  const size_t a_elems = static_cast<size_t>(s.k * s.m), b_elems = static_cast<size_t>(s.k * s.n);
  const size_t c_elems = static_cast<size_t>(s.m * s.n);

  // Random inputs in [-1, 1], kept as the type holds them for the reference.
  std::mt19937 rng(static_cast<unsigned>(s.m * 131 + s.n * 17 + s.k));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<unsigned char> a_host(a_elems * ti.input_bytes), b_host(b_elems * ti.input_bytes);
  std::vector<double> a_val(a_elems), b_val(b_elems);
  for (size_t i = 0; i < a_elems; ++i)
    a_val[i] = encode(type, uniform(rng), &a_host[i * ti.input_bytes]);
  for (size_t i = 0; i < b_elems; ++i)
    b_val[i] = encode(type, uniform(rng), &b_host[i * ti.input_bytes]);

  // Several copies of A and B when they fit in L2, so repeats read HBM.
  const size_t sets = cuda::rotation(a_host.size() + b_host.size(), prop);
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> a_dev, b_dev;
  for (size_t k = 0; k < sets; ++k) {
    a_dev.push_back(std::make_unique<cuda::DeviceBuffer>(a_host.size()));
    b_dev.push_back(std::make_unique<cuda::DeviceBuffer>(b_host.size()));
    MOE_CUDA(cudaMemcpy(a_dev.back()->get(), a_host.data(), a_host.size(), cudaMemcpyHostToDevice));
    MOE_CUDA(cudaMemcpy(b_dev.back()->get(), b_host.data(), b_host.size(), cudaMemcpyHostToDevice));
  }
  cuda::DeviceBuffer c_dev(c_elems * ti.output_bytes);
  const size_t workspace_bytes = 32u << 20;
  cuda::DeviceBuffer workspace(workspace_bytes);

  LtHandle lt;
  MatmulDesc desc(ti.compute);
  std::optional<BlockScales> scales;
  if (type == GemmType::kFp8Block) scales.emplace(s, desc);
  Layout a_layout(ti.input, s.k, s.m), b_layout(ti.input, s.k, s.n), c_layout(ti.output, s.m, s.n);
  Preference pref(workspace_bytes);
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  MOE_BLAS(cuda::cublas().lt_heuristic(lt.h, desc.d, a_layout.l, b_layout.l, c_layout.l, c_layout.l,
                                       pref.p, 1, &heuristic, &found));
  if (found == 0)
    throw GpuError(
        fmt::format("no cuBLASLt algorithm for {} {}x{}x{}", gemm_type_name(type), s.m, s.n, s.k));
  cuda::Stream stream;
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&](int r) {
    const size_t k = static_cast<size_t>(r) % sets;
    MOE_BLAS(cuda::cublas().lt_matmul(lt.h, desc.d, &alpha, a_dev[k]->get(), a_layout.l,
                                      b_dev[k]->get(), b_layout.l, &beta, c_dev.get(), c_layout.l,
                                      c_dev.get(), c_layout.l, &heuristic.algo, workspace.get(),
                                      workspace_bytes, stream.get()));
  };

  GemmTiming out;
  out.shape = s;
  out.type = type;
  out.seconds = cuda::median_seconds(stream.get(), o, run);

  // Poison C (all-ones bits: NaN in every output type), run once more, and check a sample
  // against a float64 product of the inputs as stored.
  MOE_CUDA(cudaMemsetAsync(c_dev.get(), 0xff, c_dev.bytes(), stream.get()));
  run(0);
  std::vector<unsigned char> c_host(c_dev.bytes());
  MOE_CUDA(cudaMemcpyAsync(c_host.data(), c_dev.get(), c_host.size(), cudaMemcpyDeviceToHost,
                           stream.get()));
  MOE_CUDA(cudaStreamSynchronize(stream.get()));
  double err = 0, norm = 0;
  std::uniform_int_distribution<int64_t> row(0, s.m - 1), col(0, s.n - 1);
  for (int sample = 0; sample < 256; ++sample) {
    const int64_t i = row(rng), j = col(rng);
    double ref = 0;
    for (int64_t kk = 0; kk < s.k; ++kk)
      ref += a_val[static_cast<size_t>(kk + i * s.k)] * b_val[static_cast<size_t>(kk + j * s.k)];
    const double got = decode(type, &c_host[static_cast<size_t>(i + j * s.m) * ti.output_bytes]);
    if (!std::isfinite(got))
      throw GpuError(fmt::format("{} {}x{}x{}: C[{}, {}] was never written", gemm_type_name(type),
                                 s.m, s.n, s.k, i, j));
    err += (got - ref) * (got - ref);
    norm += ref * ref;
  }
  out.relative_error = std::sqrt(err / std::max(norm, 1e-300));
  if (!(out.relative_error <= ti.tolerance)) {
    throw GpuError(fmt::format("{} {}x{}x{}: relative error {:.2e} above {:.0e}",
                               gemm_type_name(type), s.m, s.n, s.k, out.relative_error,
                               ti.tolerance));
  }
  return out;
}

}  // namespace moe::calibrate
