#include <cuda_bf16.h>

#include "calibrate/layer_kernels.h"

namespace moe::calibrate::kernels {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

// N consecutive BF16 values moved as one access: 8 (16 bytes, the widest load a thread issues)
// where every row is a multiple of 8 and 16-byte aligned, else 1. Scalar 2-byte accesses reached
// about 0.35 of an H100's HBM bandwidth in `execute`; the planner assumes 0.7 for these ops.
template <int N>
__device__ void load(const bf16* p, float (&f)[N]) {
  if constexpr (N == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = __bfloat1622float2(pairs[i]);
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    }
  } else {
    f[0] = __bfloat162float(*p);
  }
}

template <int N>
__device__ void store(bf16* p, const float (&f)[N]) {
  if constexpr (N == 8) {
    uint4 raw;
    __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) pairs[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
    *p = __float2bfloat16(f[0]);
  }
}

// One block per output row; threads stride over the columns, N at a time.
template <int N>
__global__ void gather_rows_kernel(const bf16* src, const int32_t* index, const float* weight,
                                   bf16* dst, int64_t cols) {
  const int64_t r = blockIdx.x;
  const bf16* in = src + static_cast<int64_t>(index[r]) * cols;
  bf16* out = dst + r * cols;
  const float w = weight ? weight[r] : 1.0f;
  for (int64_t j = threadIdx.x * N; j < cols; j += static_cast<int64_t>(blockDim.x) * N) {
    float f[N];
    load<N>(in + j, f);
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] *= w;
    store<N>(out + j, f);
  }
}

template <int N>
__global__ void gather_sum_rows_kernel(const bf16* src, const int32_t* index, const float* weight,
                                       int64_t k, bf16* dst, int64_t cols) {
  const int64_t t = blockIdx.x;
  bf16* out = dst + t * cols;
  for (int64_t j = threadIdx.x * N; j < cols; j += static_cast<int64_t>(blockDim.x) * N) {
    float sum[N] = {};
    for (int64_t i = 0; i < k; ++i) {
      const float w = weight ? weight[t * k + i] : 1.0f;
      float f[N];
      load<N>(src + static_cast<int64_t>(index[t * k + i]) * cols + j, f);
#pragma unroll
      for (int l = 0; l < N; ++l) sum[l] += f[l] * w;
    }
    store<N>(out + j, sum);
  }
}

__device__ float silu(float u) {
  return u / (1.0f + __expf(-u));
}

// Grid-stride over the output in packs of N; g is a multiple of N.
template <int N>
__global__ void activation_kernel(const bf16* h, bf16* a, int64_t rows, int64_t g, bool gated) {
  const int64_t packs = rows * g / N;
  for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < packs;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = v * N, r = i / g, j = i % g;
    float out[N];
    if (gated) {
      float u[N], b[N];
      load<N>(h + r * 2 * g + j, u);
      load<N>(h + r * 2 * g + g + j, b);
#pragma unroll
      for (int l = 0; l < N; ++l) out[l] = silu(u[l]) * b[l];
    } else {
      load<N>(h + i, out);
#pragma unroll
      for (int l = 0; l < N; ++l) out[l] = fmaxf(out[l], 0.0f);
    }
    store<N>(a + i, out);
  }
}

template <int N>
__global__ void activation_backward_kernel(const bf16* h, const bf16* da, bf16* dh, int64_t rows,
                                           int64_t g, bool gated) {
  const int64_t packs = rows * g / N;
  for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < packs;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = v * N, r = i / g, j = i % g;
    float dy[N];
    load<N>(da + i, dy);
    if (!gated) {
      float x[N];
      load<N>(h + i, x);
#pragma unroll
      for (int l = 0; l < N; ++l) x[l] = x[l] > 0.0f ? dy[l] : 0.0f;
      store<N>(dh + i, x);
      continue;
    }
    float u[N], b[N], du[N], db[N];
    load<N>(h + r * 2 * g + j, u);
    load<N>(h + r * 2 * g + g + j, b);
#pragma unroll
    for (int l = 0; l < N; ++l) {
      const float sig = 1.0f / (1.0f + __expf(-u[l]));
      const float s = u[l] * sig;
      du[l] = dy[l] * b[l] * (sig + s * (1.0f - sig));
      db[l] = dy[l] * s;
    }
    store<N>(dh + r * 2 * g + j, du);
    store<N>(dh + r * 2 * g + g + j, db);
  }
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

// Rows of `cols` BF16 values starting at these pointers can be moved 8 at a time.
bool packs_of_8(int64_t cols, std::initializer_list<const void*> pointers) {
  if (cols % 8 != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace

cudaError_t gather_rows(const void* src, const int32_t* index, const float* weight, void* dst,
                        int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  auto* in = static_cast<const bf16*>(src);
  auto* out = static_cast<bf16*>(dst);
  const auto grid = static_cast<unsigned>(rows);
  if (packs_of_8(cols, {src, dst}))
    gather_rows_kernel<8><<<grid, kThreads, 0, s>>>(in, index, weight, out, cols);
  else
    gather_rows_kernel<1><<<grid, kThreads, 0, s>>>(in, index, weight, out, cols);
  return cudaGetLastError();
}

cudaError_t gather_sum_rows(const void* src, const int32_t* index, const float* weight, int64_t k,
                            void* dst, int64_t tokens, int64_t cols, cudaStream_t s) {
  if (tokens == 0) return cudaSuccess;
  auto* in = static_cast<const bf16*>(src);
  auto* out = static_cast<bf16*>(dst);
  const auto grid = static_cast<unsigned>(tokens);
  if (packs_of_8(cols, {src, dst}))
    gather_sum_rows_kernel<8><<<grid, kThreads, 0, s>>>(in, index, weight, k, out, cols);
  else
    gather_sum_rows_kernel<1><<<grid, kThreads, 0, s>>>(in, index, weight, k, out, cols);
  return cudaGetLastError();
}

cudaError_t activation(const void* h, void* a, int64_t rows, int64_t g, bool gated,
                       cudaStream_t s) {
  if (rows * g == 0) return cudaSuccess;
  auto* in = static_cast<const bf16*>(h);
  auto* out = static_cast<bf16*>(a);
  if (packs_of_8(g, {h, a}))
    activation_kernel<8><<<blocks_for(rows * g / 8), kThreads, 0, s>>>(in, out, rows, g, gated);
  else
    activation_kernel<1><<<blocks_for(rows * g), kThreads, 0, s>>>(in, out, rows, g, gated);
  return cudaGetLastError();
}

cudaError_t activation_backward(const void* h, const void* da, void* dh, int64_t rows, int64_t g,
                                bool gated, cudaStream_t s) {
  if (rows * g == 0) return cudaSuccess;
  auto* in = static_cast<const bf16*>(h);
  auto* grad = static_cast<const bf16*>(da);
  auto* out = static_cast<bf16*>(dh);
  if (packs_of_8(g, {h, da, dh}))
    activation_backward_kernel<8>
        <<<blocks_for(rows * g / 8), kThreads, 0, s>>>(in, grad, out, rows, g, gated);
  else
    activation_backward_kernel<1>
        <<<blocks_for(rows * g), kThreads, 0, s>>>(in, grad, out, rows, g, gated);
  return cudaGetLastError();
}

}  // namespace moe::calibrate::kernels
