#include <cuda_bf16.h>

#include "calibrate/layer_kernels.h"

namespace moe::calibrate::kernels {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

// One block per output row; threads stride over the columns.
__global__ void gather_rows_kernel(const bf16* src, const int32_t* index, const float* weight,
                                   bf16* dst, int64_t cols) {
  const int64_t r = blockIdx.x;
  const bf16* in = src + static_cast<int64_t>(index[r]) * cols;
  bf16* out = dst + r * cols;
  const float w = weight ? weight[r] : 1.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    out[j] = __float2bfloat16(__bfloat162float(in[j]) * w);
}

__global__ void gather_sum_rows_kernel(const bf16* src, const int32_t* index, const float* weight,
                                       int64_t k, bf16* dst, int64_t cols) {
  const int64_t t = blockIdx.x;
  bf16* out = dst + t * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      const float w = weight ? weight[t * k + i] : 1.0f;
      sum += __bfloat162float(src[static_cast<int64_t>(index[t * k + i]) * cols + j]) * w;
    }
    out[j] = __float2bfloat16(sum);
  }
}

__device__ float silu(float u) {
  return u / (1.0f + __expf(-u));
}

__global__ void activation_kernel(const bf16* h, bf16* a, int64_t rows, int64_t g, bool gated) {
  const int64_t n = rows * g;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / g, j = i % g;
    if (gated) {
      const float u = __bfloat162float(h[r * 2 * g + j]);
      a[i] = __float2bfloat16(silu(u) * __bfloat162float(h[r * 2 * g + g + j]));
    } else {
      a[i] = __float2bfloat16(fmaxf(__bfloat162float(h[i]), 0.0f));
    }
  }
}

__global__ void activation_backward_kernel(const bf16* h, const bf16* da, bf16* dh, int64_t rows,
                                           int64_t g, bool gated) {
  const int64_t n = rows * g;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / g, j = i % g;
    const float dy = __bfloat162float(da[i]);
    if (!gated) {
      dh[i] = __float2bfloat16(__bfloat162float(h[i]) > 0.0f ? dy : 0.0f);
      continue;
    }
    const float u = __bfloat162float(h[r * 2 * g + j]);
    const float v = __bfloat162float(h[r * 2 * g + g + j]);
    const float sig = 1.0f / (1.0f + __expf(-u));
    const float s = u * sig;
    dh[r * 2 * g + j] = __float2bfloat16(dy * v * (sig + s * (1.0f - sig)));
    dh[r * 2 * g + g + j] = __float2bfloat16(dy * s);
  }
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

}  // namespace

cudaError_t gather_rows(const void* src, const int32_t* index, const float* weight, void* dst,
                        int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  gather_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
      static_cast<const bf16*>(src), index, weight, static_cast<bf16*>(dst), cols);
  return cudaGetLastError();
}

cudaError_t gather_sum_rows(const void* src, const int32_t* index, const float* weight, int64_t k,
                            void* dst, int64_t tokens, int64_t cols, cudaStream_t s) {
  if (tokens == 0) return cudaSuccess;
  gather_sum_rows_kernel<<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(
      static_cast<const bf16*>(src), index, weight, k, static_cast<bf16*>(dst), cols);
  return cudaGetLastError();
}

cudaError_t activation(const void* h, void* a, int64_t rows, int64_t g, bool gated,
                       cudaStream_t s) {
  if (rows * g == 0) return cudaSuccess;
  activation_kernel<<<blocks_for(rows * g), kThreads, 0, s>>>(
      static_cast<const bf16*>(h), static_cast<bf16*>(a), rows, g, gated);
  return cudaGetLastError();
}

cudaError_t activation_backward(const void* h, const void* da, void* dh, int64_t rows, int64_t g,
                                bool gated, cudaStream_t s) {
  if (rows * g == 0) return cudaSuccess;
  activation_backward_kernel<<<blocks_for(rows * g), kThreads, 0, s>>>(
      static_cast<const bf16*>(h), static_cast<const bf16*>(da), static_cast<bf16*>(dh), rows, g,
      gated);
  return cudaGetLastError();
}

}  // namespace moe::calibrate::kernels
