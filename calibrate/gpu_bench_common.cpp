#include <fmt/format.h>

#include <cstring>
#include <string>

#include "calibrate/gpu_bench.h"
#include "calibrate/nccl_bench.h"

namespace moe::calibrate {

const char* gemm_type_name(GemmType t) {
  switch (t) {
    case GemmType::kBf16:
      return "bf16";
    case GemmType::kFp16:
      return "fp16";
    case GemmType::kFp8:
      return "fp8";
    case GemmType::kFp8Block:
      return "fp8_block";
    case GemmType::kTf32:
      return "tf32";
  }
  return "?";
}

std::string gemm_curve_name(GemmType t) {
  return t == GemmType::kBf16 ? std::string("gemm") : fmt::format("gemm_{}", gemm_type_name(t));
}

Dtype gemm_dtype(GemmType t) {
  switch (t) {
    case GemmType::kBf16:
      return Dtype::kBf16;
    case GemmType::kFp16:
      return Dtype::kFp16;
    case GemmType::kFp8:
    case GemmType::kFp8Block:
      return Dtype::kFp8;
    case GemmType::kTf32:
      return Dtype::kTf32;
  }
  return Dtype::kBf16;
}

bool gemm_type_runs_on(GemmType t, int major, int minor) {
  if (t == GemmType::kFp8Block) return major == 9;
  if (t == GemmType::kFp8) return major * 10 + minor >= 89;
  return true;
}

bool gemm_type_fits(GemmType t, int64_t k) {
  return t != GemmType::kFp8Block || k % 128 == 0;
}

std::optional<std::string> gemm_curve_for(Dtype d) {
  for (GemmType t : kGemmTypes)
    if (gemm_dtype(t) == d) return gemm_curve_name(t);
  return std::nullopt;  // FP32: CUDA cores, not measured
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

namespace moe::calibrate {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllToAll:
      return "alltoall";
    case Collective::kAllToAllV:
      return "alltoallv";
    case Collective::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

double bus_factor(Collective c, int ranks) {
  const double n = static_cast<double>(ranks);
  if (ranks <= 1) return c == Collective::kSendRecv ? 1.0 : 0.0;
  switch (c) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
    case Collective::kAllToAllV:
      return (n - 1) / n;
    case Collective::kSendRecv:
      return 1.0;
  }
  return 0.0;
}

std::vector<std::vector<double>> dispatch_matrix(const std::vector<double>& loads,
                                                 double bytes_per_rank) {
  const size_t n = loads.size();
  double total = 0;
  for (double l : loads) total += l;
  std::vector<std::vector<double>> m(n, std::vector<double>(n, 0.0));
  for (size_t src = 0; src < n; ++src)
    for (size_t dst = 0; dst < n; ++dst)
      m[src][dst] = total > 0 ? bytes_per_rank * loads[dst] / total : 0.0;
  return m;
}

NcclWorld world_from_environment(const std::function<const char*(const char*)>& getenv) {
  auto first = [&](std::initializer_list<const char*> names, int fallback) {
    for (const char* name : names) {
      const char* v = getenv(name);
      if (v == nullptr || *v == '\0') continue;
      try {
        size_t used = 0;
        const int x = std::stoi(v, &used);
        if (used == std::strlen(v)) return x;
      } catch (const std::exception&) {
      }
      throw GpuError(fmt::format("{}='{}' is not an integer", name, v));
    }
    return fallback;
  };
  NcclWorld w;
  w.rank = first({"MOEPLAN_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "RANK"}, 0);
  w.size = first({"MOEPLAN_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "WORLD_SIZE"}, 1);
  w.local_rank = first({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, w.rank);
  if (w.size < 1) throw GpuError(fmt::format("world size {} is below 1", w.size));
  if (w.rank < 0 || w.rank >= w.size)
    throw GpuError(fmt::format("rank {} is outside a world of {}", w.rank, w.size));
  return w;
}

}  // namespace moe::calibrate
