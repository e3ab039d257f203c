// A build without CUDA/NCCL: the collectives cannot run, and say so.
#include "calibrate/nccl_bench.h"

namespace moe::calibrate {

struct NcclBench::State {};

NcclBench::NcclBench(const NcclWorld& world, const std::string&, double) : world_(world) {
  throw NoGpuError("no GPU: this build has no CUDA or NCCL (not found at configure time)");
}

NcclBench::~NcclBench() = default;

NcclTiming NcclBench::time(Collective, double, const BenchOptions&) {
  throw NoGpuError("no GPU: this build has no CUDA or NCCL (not found at configure time)");
}

NcclTiming NcclBench::time_alltoallv(const std::vector<std::vector<double>>&, const BenchOptions&) {
  throw NoGpuError("no GPU: this build has no CUDA or NCCL (not found at configure time)");
}

double NcclBench::time_monta(monta::Strategy, int64_t, double, int64_t, const BenchOptions&) {
  throw NoGpuError("no GPU: this build has no CUDA or NCCL (not found at configure time)");
}

}  // namespace moe::calibrate
