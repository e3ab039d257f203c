#include "calibrate/device_info.h"

namespace moe::calibrate {

SystemInfo probe_system() {
  throw NoGpuError(
      "this moeplan was built without the CUDA toolkit and NCCL; rebuild where CMake finds them");
}

}  // namespace moe::calibrate
