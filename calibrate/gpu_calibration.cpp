#include "calibrate/gpu_calibration.h"

#include <fmt/format.h>

#include <algorithm>

#include "calibrate/gpu_curves.h"

namespace moe::calibrate {

namespace {

bool skipped(const std::vector<std::string>& skip, const std::string& name) {
  return std::find(skip.begin(), skip.end(), name) != skip.end();
}

std::string size_label(double bytes) {
  if (bytes >= 1 << 30) return fmt::format("{:g} GiB", bytes / (1 << 30));
  if (bytes >= 1 << 20) return fmt::format("{:g} MiB", bytes / (1 << 20));
  return fmt::format("{:g} KiB", bytes / 1024);
}

}  // namespace

void run_gpu_sweep(const GpuSweep& sweep, const ClusterSpec& cluster,
                   const std::vector<std::string>& skip,
                   const std::function<void(const GpuPoint&)>& progress, const CurveDone& done) {
  const GpuSpec& gpu = cluster.node.gpu;
  if (sweep.parts.count("gemm")) {
    const std::vector<GemmShape> shapes = gemm_shapes(sweep.model, sweep.quick);
    const DeviceInfo device = probe_system().devices.at(static_cast<size_t>(sweep.bench.device));
    for (GemmType type : kGemmTypes) {
      const Dtype dtype = gemm_dtype(type);
      const std::string name = gemm_curve_name(type);
      // A type the cluster file gives no peak for (FP8 on A100), or the GPU cannot multiply
      // (block-scaled FP8 off Hopper), is not measured.
      if (skipped(skip, name) || !gpu.peak.count(dtype) ||
          !gemm_type_runs_on(type, device.compute_major, device.compute_minor))
        continue;
      const FlopsPerSec peak = gpu.peak.at(dtype);
      std::vector<GemmTiming> timings;
      for (const GemmShape& s : shapes) {
        if (!gemm_type_fits(type, s.k)) continue;
        BenchOptions bench = sweep.bench;
        bench.sustain_seconds = sweep.gemm_sustain_seconds;
        const GemmTiming t = time_gemm(s, type, bench);
        const double rate = s.flops() / t.seconds;
        progress({name, fmt::format("{} {}x{}x{}", gemm_type_name(type), s.m, s.n, s.k), t.seconds,
                  rate, rate / peak.value()});
        timings.push_back(t);
      }
      done(name, gemm_curve(timings, peak,
                            fmt::format("cuBLASLt {} GEMMs (TN layout), median of {} repeats{}, "
                                        "against the cluster file's {} peak; efficiencies "
                                        "divided by moeplan's shape factor",
                                        gemm_type_name(type), sweep.bench.repeats,
                                        sweep.gemm_sustain_seconds > 0
                                            ? fmt::format(" after {} s back to back",
                                                          sweep.gemm_sustain_seconds)
                                            : std::string(),
                                        gpu.model)));
    }
  }
  struct Transfer {
    const char* part;
    const char* name;
    CopyKind kind;
    BytesPerSec reference;
  };
  const Transfer transfers[] = {
      {"copy", "d2d_copy", CopyKind::kDeviceToDevice, gpu.hbm_bandwidth},
      {"pcie", "pcie_h2d", CopyKind::kHostToDevice, cluster.node.host_link_bandwidth()},
      {"pcie", "pcie_d2h", CopyKind::kDeviceToHost, cluster.node.host_link_bandwidth()},
      {"pcie", "pcie_both", CopyKind::kBothDirections, cluster.node.host_link_bandwidth()}};
  for (const Transfer& x : transfers) {
    if (!sweep.parts.count(x.part) || skipped(skip, x.name)) continue;
    std::vector<CopyTiming> timings;
    for (double bytes : transfer_sizes(sweep.quick)) {
      const CopyTiming t = time_copy(x.kind, bytes, sweep.bench);
      const double rate = bytes / t.seconds;
      progress({x.name, fmt::format("{} {}", copy_kind_name(x.kind), size_label(bytes)), t.seconds,
                rate, rate / x.reference.value()});
      timings.push_back(t);
    }
    done(x.name,
         transfer_curve(timings, x.reference,
                        fmt::format("{} copies ({}), median of {} repeats, bytes per "
                                    "direction per second against the cluster file's "
                                    "figure",
                                    copy_kind_name(x.kind),
                                    x.kind == CopyKind::kDeviceToDevice ? "device memory"
                                                                        : "pinned host memory",
                                    sweep.bench.repeats)));
  }
  if (!sweep.parts.count("nccl")) return;
  NcclBench nccl(sweep.world, sweep.nccl_id_file);
  // One node's GPUs talk over NVLink, more over the NICs (ranks fill nodes in order).
  const bool inter = sweep.world.size > cluster.node.num_gpus;
  const char* where = inter ? "inter" : "intra";
  const BytesPerSec reference =
      inter ? cluster.gpu_network_bandwidth() : cluster.node.nvlink_bandwidth;
  const std::pair<Collective, const char*> ops[] = {{Collective::kAllGather, "allgather"},
                                                    {Collective::kAllToAll, "alltoall"},
                                                    {Collective::kReduceScatter, "reduce_scatter"},
                                                    {Collective::kAllReduce, "all_reduce"},
                                                    {Collective::kSendRecv, "sendrecv"}};
  for (auto [op, stem] : ops) {
    const std::string name = fmt::format("{}_{}", stem, where);
    if (skipped(skip, name)) continue;
    std::vector<NcclTiming> timings;
    for (double bytes : transfer_sizes(sweep.quick)) {
      const NcclTiming t = nccl.time(op, bytes, sweep.bench);
      progress(
          {name,
           fmt::format("{} {} x {}", collective_name(op), size_label(t.bytes), sweep.world.size),
           t.seconds, t.busbw, t.busbw / reference.value()});
      timings.push_back(t);
    }
    // A world of one moves nothing between GPUs: there is no curve to write.
    if (sweep.world.size > 1) {
      done(name,
           collective_curve(timings, reference,
                            fmt::format("NCCL {} over {} ranks, median of {} repeats, bus "
                                        "bandwidth (nccl-tests) against the cluster file's "
                                        "{} per GPU",
                                        collective_name(op), sweep.world.size, sweep.bench.repeats,
                                        inter ? "NIC share" : "NVLink port")));
    }
  }
  const std::string name = fmt::format("alltoallv_{}", where);
  if (sweep.world.size < 2 || skipped(skip, name) ||
      sweep.dispatch_loads.size() != static_cast<size_t>(sweep.world.size))
    return;
  std::vector<NcclTiming> timings;
  for (double bytes : transfer_sizes(sweep.quick)) {
    const NcclTiming t =
        nccl.time_alltoallv(dispatch_matrix(sweep.dispatch_loads, bytes), sweep.bench);
    progress({name,
              fmt::format("alltoallv {} per rank, busiest receives {}", size_label(bytes),
                          size_label(t.bytes)),
              t.seconds, t.busbw, t.busbw / reference.value()});
    timings.push_back(t);
  }
  done(name, collective_curve(timings, reference,
                              fmt::format("NCCL all-to-all-v of one MoE dispatch under {} over "
                                          "{} ranks; size and bus bandwidth of the busiest "
                                          "receiver",
                                          sweep.dispatch_skew, sweep.world.size)));
}

}  // namespace moe::calibrate
