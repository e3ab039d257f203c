#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include "calibrate/device_info.h"

namespace moe::calibrate {

SystemInfo probe_system() {
  SystemInfo info;
  int driver = 0;
  // With no driver installed this returns 0 rather than failing.
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    throw NoGpuError("no GPU: the CUDA driver is not installed or cannot be reached");
  }
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess)
    throw NoGpuError("no GPU: the CUDA runtime cannot start");
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    throw NoGpuError(fmt::format(
        "no GPU: {}", err == cudaSuccess ? "no CUDA device is visible" : cudaGetErrorString(err)));
  }
  info.driver_version = cuda_version_string(driver);
  info.runtime_version = cuda_version_string(runtime);
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    info.nccl_version = fmt::format("{}.{}.{}", nccl / 10000, (nccl % 10000) / 100, nccl % 100);
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    DeviceInfo dev;
    dev.index = d;
    dev.name = prop.name;
    dev.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    dev.multiprocessors = prop.multiProcessorCount;
    dev.compute_major = prop.major;
    dev.compute_minor = prop.minor;
    dev.l2_bytes = prop.l2CacheSize;
    info.devices.push_back(dev);
  }
  if (info.devices.empty()) throw NoGpuError("no GPU: no device answered a properties query");
  return info;
}

}  // namespace moe::calibrate
