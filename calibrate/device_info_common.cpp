#include <fmt/format.h>

#include "calibrate/device_info.h"

namespace moe::calibrate {

std::string cuda_version_string(int encoded) {
  return fmt::format("{}.{}", encoded / 1000, (encoded % 1000) / 10);
}

}  // namespace moe::calibrate
