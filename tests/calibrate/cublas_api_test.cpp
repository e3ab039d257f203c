// The cuBLAS entry points moeplan opens at run time: every one resolves from the libraries of
// the toolkit it was built against. Needs the toolkit's libraries, not a GPU.
#include "calibrate/cublas_api.h"

#include <gtest/gtest.h>

namespace moe::calibrate::cuda {

TEST(CublasApi, ResolvesEveryEntryPointWithoutAGpu) {
  const CublasApi& api = cublas();
  for (const void* p :
       {reinterpret_cast<const void*>(api.create), reinterpret_cast<const void*>(api.destroy),
        reinterpret_cast<const void*>(api.set_stream), reinterpret_cast<const void*>(api.gemm_ex),
        reinterpret_cast<const void*>(api.lt_create), reinterpret_cast<const void*>(api.lt_destroy),
        reinterpret_cast<const void*>(api.lt_layout_create),
        reinterpret_cast<const void*>(api.lt_layout_destroy),
        reinterpret_cast<const void*>(api.lt_desc_create),
        reinterpret_cast<const void*>(api.lt_desc_destroy),
        reinterpret_cast<const void*>(api.lt_desc_set),
        reinterpret_cast<const void*>(api.lt_pref_create),
        reinterpret_cast<const void*>(api.lt_pref_destroy),
        reinterpret_cast<const void*>(api.lt_pref_set),
        reinterpret_cast<const void*>(api.lt_heuristic),
        reinterpret_cast<const void*>(api.lt_matmul)})
    EXPECT_NE(p, nullptr);
  // Opened once: the same table every call.
  EXPECT_EQ(&cublas(), &api);
}

TEST(CublasApi, LayoutCallsWorkWithoutADevice) {
  // Matrix layouts are host-side objects: creating one exercises a resolved call end to end.
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(cublas().lt_layout_create(&layout, CUDA_R_16BF, 64, 32, 64), CUBLAS_STATUS_SUCCESS);
  EXPECT_NE(layout, nullptr);
  EXPECT_EQ(cublas().lt_layout_destroy(layout), CUBLAS_STATUS_SUCCESS);
}

}  // namespace moe::calibrate::cuda
