// What GPUs this machine has, with the versions a calibration records as provenance.
//
// Built from the CUDA runtime and NCCL when CMake finds them (device_info_cuda.cpp); otherwise
// probe_system() reports that this build has no CUDA (device_info_none.cpp). Either way a
// machine without a usable GPU is a NoGpuError, never a crash.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe::calibrate {

class NoGpuError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct DeviceInfo {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  int multiprocessors = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int64_t l2_bytes = 0;
};

struct SystemInfo {
  std::string driver_version;   // e.g. "13.0"
  std::string runtime_version;  // CUDA runtime
  std::string nccl_version;     // e.g. "2.27.7"
  std::vector<DeviceInfo> devices;
};

// Throws NoGpuError when CUDA is absent from the build, the driver cannot be reached, or no
// device is visible.
SystemInfo probe_system();

// "13.0" from CUDA's 13000 encoding (major*1000 + minor*10).
std::string cuda_version_string(int encoded);

}  // namespace moe::calibrate
