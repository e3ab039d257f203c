#include "calibrate/gpu_bench.h"

namespace moe::calibrate {

const char* gemm_type_name(GemmType t) {
  switch (t) {
    case GemmType::kBf16:
      return "bf16";
    case GemmType::kFp16:
      return "fp16";
    case GemmType::kFp8:
      return "fp8";
    case GemmType::kTf32:
      return "tf32";
  }
  return "?";
}

const char* copy_kind_name(CopyKind k) {
  switch (k) {
    case CopyKind::kDeviceToDevice:
      return "d2d";
    case CopyKind::kHostToDevice:
      return "h2d";
    case CopyKind::kDeviceToHost:
      return "d2h";
    case CopyKind::kBothDirections:
      return "h2d+d2h";
  }
  return "?";
}

}  // namespace moe::calibrate
