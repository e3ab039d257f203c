#include "calibrate/cublas_api.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <string>

#include "calibrate/gpu_bench.h"

namespace moe::calibrate::cuda {

namespace {

void* open_library(const char* stem) {
  const std::string name = fmt::format("lib{}.so.{}", stem, CUBLAS_VER_MAJOR);
  if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  const std::string first_error = dlerror();
#ifdef MOEPLAN_CUDA_LIBRARY_DIR
  const std::string path = std::string(MOEPLAN_CUDA_LIBRARY_DIR) + "/" + name;
  if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
#endif
  throw GpuError(
      fmt::format("cannot open {} ({}); is the CUDA toolkit's library folder on "
                  "LD_LIBRARY_PATH?",
                  name, first_error));
}

template <typename Fn>
void resolve(void* library, const char* symbol, Fn& into) {
  void* p = dlsym(library, symbol);
  if (!p) throw GpuError(fmt::format("cuBLAS has no entry point {}", symbol));
  into = reinterpret_cast<Fn>(p);
}

CublasApi load() {
  // Opened once for the process and never closed: handles may outlive any one caller.
  void* blas = open_library("cublas");
  void* lt = open_library("cublasLt");
  CublasApi api{};
  resolve(blas, "cublasCreate_v2", api.create);
  resolve(blas, "cublasDestroy_v2", api.destroy);
  resolve(blas, "cublasSetStream_v2", api.set_stream);
  resolve(blas, "cublasGemmEx", api.gemm_ex);
  resolve(lt, "cublasLtCreate", api.lt_create);
  resolve(lt, "cublasLtDestroy", api.lt_destroy);
  resolve(lt, "cublasLtMatrixLayoutCreate", api.lt_layout_create);
  resolve(lt, "cublasLtMatrixLayoutDestroy", api.lt_layout_destroy);
  resolve(lt, "cublasLtMatmulDescCreate", api.lt_desc_create);
  resolve(lt, "cublasLtMatmulDescDestroy", api.lt_desc_destroy);
  resolve(lt, "cublasLtMatmulDescSetAttribute", api.lt_desc_set);
  resolve(lt, "cublasLtMatmulPreferenceCreate", api.lt_pref_create);
  resolve(lt, "cublasLtMatmulPreferenceDestroy", api.lt_pref_destroy);
  resolve(lt, "cublasLtMatmulPreferenceSetAttribute", api.lt_pref_set);
  resolve(lt, "cublasLtMatmulAlgoGetHeuristic", api.lt_heuristic);
  resolve(lt, "cublasLtMatmul", api.lt_matmul);
  return api;
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();
  return api;
}

}  // namespace moe::calibrate::cuda
