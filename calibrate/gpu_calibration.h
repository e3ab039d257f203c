// The GPU parts of `moeplan calibrate`: GEMMs per operand type ("gemm" for BF16, which the
// planner reads, and "gemm_fp16", "gemm_fp8", "gemm_tf32"), the device-to-device copy
// ("d2d_copy", which the planner reads for MoNTA's D2D stage) and pinned PCIe copies
// ("pcie_h2d", "pcie_d2h", "pcie_both"), each measured against the cluster file's GPU peak,
// HBM bandwidth or PCIe link bandwidth, and NCCL collectives over the launched world
// ("allgather_intra" or "_inter" and "alltoall_...", which the planner reads, and
// "reduce_scatter_...", "all_reduce_...", "sendrecv_...") against the NVLink port or the GPU's
// NIC share.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "calibrate/cpu_calibration.h"
#include "calibrate/gpu_bench.h"
#include "calibrate/nccl_bench.h"
#include "planner/cluster_spec.h"
#include "planner/model_spec.h"

namespace moe::calibrate {

struct GpuSweep {
  std::set<std::string> parts;       // of gemm, copy, pcie, nccl
  const ModelSpec* model = nullptr;  // GEMM shapes from it when given
  bool quick = false;
  BenchOptions bench;
  // gemm: each shape runs back to back this long before it is timed (BenchOptions).
  double gemm_sustain_seconds = 0;
  NcclWorld world;           // nccl: this process's rank (world_from_environment)
  std::string nccl_id_file;  // nccl: where rank 0 leaves NCCL's unique id
  // nccl: one load per rank (RoutingSkew::rank_loads over the world as the EP group) adds an
  // all-to-all-v of that dispatch ("alltoallv_..."), described by `dispatch_skew`.
  std::vector<double> dispatch_loads;
  std::string dispatch_skew;
};

// One measurement finished, for progress and the closing table.
struct GpuPoint {
  std::string curve;
  std::string what;  // "bf16 8192x8192x8192", "h2d 64 MiB"
  double seconds = 0;
  double rate = 0;  // FLOP/s or bytes/s
  double efficiency = 0;
};

// Curves named in `skip` (--resume) are not measured again. Throws NoGpuError without a GPU,
// GpuError when a measurement fails its check.
void run_gpu_sweep(const GpuSweep& sweep, const ClusterSpec& cluster,
                   const std::vector<std::string>& skip,
                   const std::function<void(const GpuPoint&)>& progress, const CurveDone& done);

}  // namespace moe::calibrate
