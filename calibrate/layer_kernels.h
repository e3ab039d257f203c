// The CUDA kernels of the GPU LayerDevice (layer_kernels.cu): BF16 row gathers for dispatch and
// combine and the FFN activation with its backward, each accumulating in FP32. Launchers return
// the launch's error; the caller checks it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace moe::calibrate::kernels {

// dst[r, :] = src[index[r], :] * (weight ? weight[r] : 1), rows x cols BF16.
cudaError_t gather_rows(const void* src, const int32_t* index, const float* weight, void* dst,
                        int64_t rows, int64_t cols, cudaStream_t s);
// dst[t, :] = sum_j src[index[t k + j], :] * (weight ? weight[t k + j] : 1).
cudaError_t gather_sum_rows(const void* src, const int32_t* index, const float* weight, int64_t k,
                            void* dst, int64_t tokens, int64_t cols, cudaStream_t s);
// Gated: a[r, j] = silu(h[r, j]) * h[r, g + j] with h rows x 2g; plain: a = relu(h).
cudaError_t activation(const void* h, void* a, int64_t rows, int64_t g, bool gated, cudaStream_t s);
cudaError_t activation_backward(const void* h, const void* da, void* dh, int64_t rows, int64_t g,
                                bool gated, cudaStream_t s);

}  // namespace moe::calibrate::kernels
