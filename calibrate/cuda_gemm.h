// Row-major BF16 GEMMs through cuBLAS (FP32 accumulation), for the *_cuda / gpu_* files that
// run layers: cuBLAS is column-major, so row-major C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T with B passed first.
#pragma once

#include <fmt/format.h>

#include <cstdint>

#include "calibrate/cublas_api.h"
#include "calibrate/gpu_bench.h"

namespace moe::calibrate::cuda {

inline void check_blas(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw GpuError(fmt::format("{}: cuBLAS status {}", call, static_cast<int>(s)));
}
#define MOE_BLAS(call) ::moe::calibrate::cuda::check_blas((call), #call)

// A cuBLAS handle issuing on `stream`, destroyed on scope exit.
class Blas {
 public:
  explicit Blas(cudaStream_t stream) {
    MOE_BLAS(cublas().create(&h_));
    MOE_BLAS(cublas().set_stream(h_, stream));
  }
  ~Blas() { cublas().destroy(h_); }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

// A row-major matrix of `rows` x `cols` BF16 at `data` (rows are `cols` apart).
struct Bf16Rows {
  const void* data;
  int64_t rows, cols;
};

// c = op(a) op(b) (+ c when accumulate); c has op(a)'s rows and op(b)'s columns.
inline void gemm_bf16(cublasHandle_t h, Bf16Rows a, bool ta, Bf16Rows b, bool tb, void* c,
                      int64_t c_cols, bool accumulate) {
  const int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const int64_t n = tb ? b.rows : b.cols;
  if (m == 0 || n == 0) return;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  MOE_BLAS(cublas().gemm_ex(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                            static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
                            b.data, CUDA_R_16BF, static_cast<int>(b.cols), a.data, CUDA_R_16BF,
                            static_cast<int>(a.cols), &beta, c, CUDA_R_16BF,
                            static_cast<int>(c_cols), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace moe::calibrate::cuda
