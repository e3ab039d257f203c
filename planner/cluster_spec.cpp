#include "planner/cluster_spec.h"

#include <fmt/format.h>

#include <algorithm>

#include "planner/errors.h"

namespace moe {

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::kFp32:
      return "fp32";
    case Dtype::kTf32:
      return "tf32";
    case Dtype::kBf16:
      return "bf16";
    case Dtype::kFp16:
      return "fp16";
    case Dtype::kFp8:
      return "fp8";
  }
  return "?";
}

double dtype_bytes(Dtype d) {
  switch (d) {
    case Dtype::kFp32:
    case Dtype::kTf32:
      return 4.0;
    case Dtype::kBf16:
    case Dtype::kFp16:
      return 2.0;
    case Dtype::kFp8:
      return 1.0;
  }
  return 0.0;
}

FlopsPerSec GpuSpec::peak_for(Dtype d) const {
  auto it = peak.find(d);
  if (it == peak.end()) {
    throw ConfigError(
        fmt::format("GPU {} has no {} peak in the cluster file", model, dtype_name(d)));
  }
  return it->second;
}

BytesPerSec pcie_lane_bandwidth(int generation) {
  // Transfer rate in GT/s by generation; one transfer carries one bit per lane.
  static constexpr double kGigaTransfers[] = {0, 2.5, 5, 8, 16, 32, 64};
  if (generation < 1 || generation > 6) {
    throw ConfigError(fmt::format("PCIe generation {} is not one of 1-6", generation));
  }
  // Gen1/2 use 8b/10b encoding, Gen3+ 128b/130b.
  const double efficiency = generation <= 2 ? 0.8 : 128.0 / 130.0;
  return BytesPerSec(kGigaTransfers[generation] * kGiga * efficiency / 8.0);
}

BytesPerSec NodeSpec::pcie_bandwidth() const {
  return pcie_lane_bandwidth(pcie_generation) * static_cast<double>(pcie_lanes);
}

BytesPerSec NodeSpec::host_link_bandwidth() const {
  return has_c2c() ? c2c_bandwidth : pcie_bandwidth();
}

Bytes NodeSpec::host_memory_per_gpu() const {
  Bytes sum;
  for (const CpuSocket& s : cpus) sum += s.memory;
  return num_gpus > 0 ? sum / static_cast<double>(num_gpus) : Bytes(0);
}

int NodeSpec::switch_of_gpu(int gpu) const {
  for (size_t s = 0; s < pcie_switches.size(); ++s) {
    const auto& g = pcie_switches[s].gpus;
    if (std::find(g.begin(), g.end(), gpu) != g.end()) return static_cast<int>(s);
  }
  return -1;
}

int NodeSpec::cpu_of_gpu(int gpu) const {
  const int s = switch_of_gpu(gpu);
  return s < 0 ? -1 : pcie_switches[s].cpu;
}

int NodeSpec::nic_of_gpu(int gpu) const {
  for (size_t n = 0; n < nics.size(); ++n) {
    const auto& g = nics[n].gpus;
    if (std::find(g.begin(), g.end(), gpu) != g.end()) return static_cast<int>(n);
  }
  return -1;
}

BytesPerSec ClusterSpec::node_network_bandwidth() const {
  BytesPerSec sum;
  for (const Nic& n : node.nics) sum += n.bandwidth;
  return sum;
}

BytesPerSec ClusterSpec::gpu_network_bandwidth() const {
  BytesPerSec best;
  for (const Nic& n : node.nics) {
    if (n.gpus.empty()) continue;
    best = std::max(best, n.bandwidth / static_cast<double>(n.gpus.size()));
  }
  return best;
}

void validate(const ClusterSpec& c) {
  const NodeSpec& n = c.node;
  require_field(c.num_nodes > 0, "nodes", "must be positive");
  require_field(n.num_gpus > 0, "node/gpus", "must be positive");
  require_field(n.gpu.hbm_capacity > Bytes(0), "node/gpu/hbm_GB", "must be positive");
  require_field(n.gpu.hbm_bandwidth > BytesPerSec(0), "node/gpu/hbm_bandwidth_GBps",
                "must be positive");
  require_field(n.gpu.peak.count(Dtype::kBf16) == 1, "node/gpu/peak_TFLOPS/bf16", "is required");
  for (const auto& [d, f] : n.gpu.peak) {
    require_field(f > FlopsPerSec(0), fmt::format("node/gpu/peak_TFLOPS/{}", dtype_name(d)),
                  "must be positive");
  }
  if (const GpuPower& w = n.gpu.power; w.limit_w > 0) {
    require_field(w.idle_w >= 0 && w.idle_w < w.limit_w, "node/gpu/power/idle_W",
                  "must be at least 0 and below limit_W");
    require_field(w.busy_w > w.limit_w, "node/gpu/power/busy_W",
                  "must be above limit_W (a board that never reaches its limit needs no entry)");
    require_field(w.sustained_rate > 0 && w.sustained_rate < 1, "node/gpu/power/sustained_rate",
                  "must be a share in (0, 1): the rate a board past its limit keeps");
  }
  if (n.fabric == Fabric::kNvSwitch) {
    require_field(n.nvlink_bandwidth > BytesPerSec(0), "node/intra_node/bandwidth_GBps",
                  "must be positive for an NVSwitch fabric");
  }
  require_field(!n.cpus.empty(), "node/cpus", "a node needs at least one CPU socket");
  require_field(!n.pcie_switches.empty(), "node/pcie/switches",
                "a node needs at least one PCIe switch");
  for (size_t s = 0; s < n.pcie_switches.size(); ++s) {
    const PcieSwitch& sw = n.pcie_switches[s];
    require_field(sw.cpu >= 0 && sw.cpu < static_cast<int>(n.cpus.size()),
                  fmt::format("node/pcie/switches/{}/cpu", s),
                  fmt::format("CPU {} does not exist (node has {})", sw.cpu, n.cpus.size()));
    for (int g : sw.gpus) {
      require_field(g >= 0 && g < n.num_gpus, fmt::format("node/pcie/switches/{}/gpus", s),
                    fmt::format("GPU {} does not exist (node has {})", g, n.num_gpus));
    }
  }
  for (int g = 0; g < n.num_gpus; ++g) {
    int owners = 0;
    for (const PcieSwitch& sw : n.pcie_switches)
      owners += std::count(sw.gpus.begin(), sw.gpus.end(), g);
    require_field(owners == 1, "node/pcie/switches",
                  fmt::format("GPU {} sits under {} switches (needs exactly one)", g, owners));
  }
  for (size_t i = 0; i < n.cpus.size(); ++i) {
    require_field(n.cpus[i].cores > 0, fmt::format("node/cpus/{}/cores", i), "must be positive");
  }
  for (size_t k = 0; k < n.nics.size(); ++k) {
    const Nic& nic = n.nics[k];
    require_field(nic.bandwidth > BytesPerSec(0), fmt::format("node/nics/{}/bandwidth_Gbps", k),
                  "must be positive");
    require_field(!nic.gpus.empty(), fmt::format("node/nics/{}/gpus", k), "a NIC must serve a GPU");
    for (int g : nic.gpus) {
      require_field(g >= 0 && g < n.num_gpus, fmt::format("node/nics/{}/gpus", k),
                    fmt::format("GPU {} does not exist (node has {})", g, n.num_gpus));
    }
    require_field(nic.pcie_switch < static_cast<int>(n.pcie_switches.size()),
                  fmt::format("node/nics/{}/pcie_switch", k),
                  fmt::format("switch {} does not exist (node has {})", nic.pcie_switch,
                              n.pcie_switches.size()));
  }
  if (c.num_nodes > 1) {
    require_field(!n.nics.empty(), "node/nics", "a multi-node cluster needs NICs");
    for (int g = 0; g < n.num_gpus; ++g) {
      require_field(n.nic_of_gpu(g) >= 0, "node/nics",
                    fmt::format("GPU {} is served by no NIC in a multi-node cluster", g));
    }
  }
}

}  // namespace moe
