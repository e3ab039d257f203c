// ClusterSpec: the hardware a plan runs on.
//
// A cluster is `num_nodes` identical nodes. A node has GPUs of one model, an intra-node fabric
// (NVLink through NVSwitch, or PCIe only), PCIe switches that hang off CPU sockets (root
// complexes), CPU sockets with cores and host memory, and NICs that serve a subset of GPUs.
// ClusterGraph (cluster_graph.h) turns this into a graph of devices and links.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/units.h"

namespace moe {

enum class Dtype { kFp32, kTf32, kBf16, kFp16, kFp8 };
const char* dtype_name(Dtype d);
// Bytes per element as stored (tf32 is stored as fp32).
double dtype_bytes(Dtype d);

// What a GPU draws, and what its power limit leaves of its clock (planner/power_limit.h). The
// board draws idle_w with its compute stream empty and busy_w with it running all the time at
// full clock (GEMMs and element-wise kernels alike: both drew the same on a lent H100); in
// between, in proportion. Past limit_w the clock falls until the draw is back at the limit: a
// stream busy all the time under the limit it was measured at (rated_limit_w; 0: limit_w) keeps
// `sustained_rate` of the compute rate it had at full clock. A cap (whatif's power-limit-W)
// moves limit_w alone. limit_w 0: not given, and the clock never falls.
struct GpuPower {
  double limit_w = 0, idle_w = 0, busy_w = 0;
  double sustained_rate = 1;
  double rated_limit_w = 0;
};

struct GpuSpec {
  std::string model;
  std::map<Dtype, FlopsPerSec> peak;  // dense peak per dtype
  Bytes hbm_capacity;
  BytesPerSec hbm_bandwidth;
  // Streaming multiprocessors (cudaDeviceProp::multiProcessorCount): what communication
  // kernels running beside compute take their share of. 0: not given, and none is taken.
  int sms = 0;
  // CUDA compute capability, major.minor (nvidia-smi's compute_cap: 8.0 A100, 9.0 H100, 10.0
  // B200): what checks the kernels a plan asks for run on the GPU. 0: not given, nothing checked.
  double compute_capability = 0;
  GpuPower power;

  // Throws ConfigError when the file did not give this dtype.
  FlopsPerSec peak_for(Dtype d) const;
  // Transformer Engine's MXFP8 recipe needs Blackwell's block-scaled tensor cores (compute
  // capability 10.0 and later); true where the file does not say.
  bool runs_mxfp8() const { return compute_capability == 0 || compute_capability >= 10.0; }
};

enum class Fabric { kNvSwitch, kPcie };

struct PcieSwitch {
  int cpu = 0;            // socket whose root complex it hangs off
  std::vector<int> gpus;  // local GPU indices below it
};

struct CpuSocket {
  int cores = 0;
  FlopsPerSec achievable_flops;  // whole socket, all cores, for FFN-like GEMMs
  Bytes memory;
  BytesPerSec memory_bandwidth;
};

struct Nic {
  BytesPerSec bandwidth;  // per direction
  std::vector<int> gpus;  // GPUs that send through it (GPUDirect RDMA)
  int pcie_switch = -1;   // where it is attached; -1: on the first GPU's switch
};

struct NodeSpec {
  int num_gpus = 0;
  GpuSpec gpu;
  Fabric fabric = Fabric::kNvSwitch;
  BytesPerSec nvlink_bandwidth;  // per GPU, per direction, through the NVSwitch
  int pcie_generation = 4;
  int pcie_lanes = 16;
  // Grace superchips (GH200, GB200, GB300): the GPUs reach their CPU over NVLink-C2C at this
  // rate per direction, shared through the superchip as a PCIe switch's uplink is; the NICs
  // stay on PCIe. Zero: the GPUs sit on PCIe.
  BytesPerSec c2c_bandwidth;
  std::vector<PcieSwitch> pcie_switches;
  std::vector<CpuSocket> cpus;
  BytesPerSec cpu_interconnect;  // socket to socket (UPI / Infinity Fabric), per direction
  std::vector<Nic> nics;

  BytesPerSec pcie_bandwidth() const;  // per direction, per GPU link
  bool has_c2c() const { return c2c_bandwidth > BytesPerSec(0); }
  // Per direction between a GPU and its CPU: NVLink-C2C where the node has it, else PCIe.
  BytesPerSec host_link_bandwidth() const;
  // A GPU's share of the node's host memory (the sockets' over the GPUs); zero without CPUs.
  Bytes host_memory_per_gpu() const;
  int cpu_of_gpu(int gpu) const;
  int switch_of_gpu(int gpu) const;
  int nic_of_gpu(int gpu) const;  // -1 if no NIC serves it
};

struct ClusterSpec {
  std::string name;
  std::string description;
  int num_nodes = 0;
  NodeSpec node;
  Seconds intra_node_latency = Seconds(2e-6);  // per message, NVLink or PCIe
  Seconds inter_node_latency = Seconds(5e-6);  // per message, through the NICs
  int switch_radix = 0;                        // ports of the scale-out switch tier; 0: unknown

  int num_gpus() const { return num_nodes * node.num_gpus; }
  // Aggregate NIC bandwidth a node has, per direction.
  BytesPerSec node_network_bandwidth() const;
  // Bandwidth one GPU gets through its NIC when all GPUs sharing it send at once.
  BytesPerSec gpu_network_bandwidth() const;
};

// Throws ConfigError for a GPU wired to a missing NIC or switch, a switch under a missing CPU,
// a GPU under no switch, etc.
void validate(const ClusterSpec& c);

// PCIe theoretical bandwidth per direction, per lane (PCI-SIG: 8/16/32/64 GT/s, 128b/130b
// encoding for Gen3-5; Gen6 FLIT mode taken at the same 98.5 % payload).
BytesPerSec pcie_lane_bandwidth(int generation);

}  // namespace moe
