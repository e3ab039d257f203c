// cuBLAS and cuBLASLt, opened on first use. Linked, libcublasLt's load-time initialisation cost
// every moeplan command 0.4 s and 210 MB before main() (plan, simulate and info included),
// though only calibrate, execute and affinity --measure call them.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

namespace moe::calibrate::cuda {

// The entry points moeplan calls, typed from the headers it compiles against. cublas_v2.h maps
// cublasCreate, cublasDestroy and cublasSetStream to their _v2 symbols.
struct CublasApi {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasDestroy_v2) destroy;
  decltype(&::cublasSetStream_v2) set_stream;
  // The C entry point; cublas_api.h overloads cublasGemmEx in C++ for a cudaDataType compute.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);
  decltype(&::cublasLtCreate) lt_create;
  decltype(&::cublasLtDestroy) lt_destroy;
  decltype(&::cublasLtMatrixLayoutCreate) lt_layout_create;
  decltype(&::cublasLtMatrixLayoutDestroy) lt_layout_destroy;
  decltype(&::cublasLtMatmulDescCreate) lt_desc_create;
  decltype(&::cublasLtMatmulDescDestroy) lt_desc_destroy;
  decltype(&::cublasLtMatmulDescSetAttribute) lt_desc_set;
  decltype(&::cublasLtMatmulPreferenceCreate) lt_pref_create;
  decltype(&::cublasLtMatmulPreferenceDestroy) lt_pref_destroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) lt_pref_set;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) lt_heuristic;
  decltype(&::cublasLtMatmul) lt_matmul;
};

// Opens libcublas and libcublasLt of the major version compiled against (the loader's search
// path first, then the toolkit's library folder found at build time) and resolves every entry
// point. Throws GpuError naming the library or symbol that is missing.
const CublasApi& cublas();

}  // namespace moe::calibrate::cuda
