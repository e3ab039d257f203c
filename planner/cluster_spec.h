// ClusterSpec: the hardware a plan runs on, and the graph of devices and links routed over.
//
// A cluster is `num_nodes` identical nodes. A node has GPUs of one model, an intra-node fabric
// (NVLink through NVSwitch, or PCIe only), PCIe switches that hang off CPU sockets (root
// complexes), CPU sockets with cores and host memory, and NICs that serve a subset of GPUs.
// ClusterGraph turns this into a Boost.Graph graph so that later stages can ask which links a
// transfer between two GPUs (or a GPU and host memory) crosses.
#pragma once

#include <boost/graph/adjacency_list.hpp>
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

struct GpuSpec {
  std::string model;
  std::map<Dtype, FlopsPerSec> peak;  // dense peak per dtype
  Bytes hbm_capacity;
  BytesPerSec hbm_bandwidth;
  // Streaming multiprocessors (cudaDeviceProp::multiProcessorCount): what communication
  // kernels running beside compute take their share of. 0: not given, and none is taken.
  int sms = 0;

  // Throws ConfigError when the file did not give this dtype.
  FlopsPerSec peak_for(Dtype d) const;
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

enum class DeviceKind { kGpu, kNvSwitch, kPcieSwitch, kCpu, kNic, kNetwork };
enum class LinkKind { kNvLink, kPcie, kC2c, kCpuInterconnect, kNetwork };
const char* device_kind_name(DeviceKind k);
const char* link_kind_name(LinkKind k);

struct Device {
  DeviceKind kind = DeviceKind::kGpu;
  int node = -1;  // -1 for the network
  int index = 0;  // within the node and kind
};

struct Link {
  LinkKind kind = LinkKind::kPcie;
  BytesPerSec bandwidth;  // per direction
  int id = 0;
};

class ClusterGraph {
 public:
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, Device, Link>;
  using Vertex = Graph::vertex_descriptor;

  explicit ClusterGraph(const ClusterSpec& spec);

  // Links crossed from one GPU to another (global GPU ranks), fewest hops first and, among
  // those, the widest path. Empty for a GPU to itself.
  std::vector<Link> gpu_path(int from_gpu, int to_gpu) const;
  // Links crossed between a GPU and its own socket's host memory.
  std::vector<Link> host_path(int gpu) const;
  // The narrowest link on a path (what bounds a single flow).
  static BytesPerSec bottleneck(const std::vector<Link>& path);

  size_t num_devices() const { return boost::num_vertices(graph_); }
  size_t num_links() const { return boost::num_edges(graph_); }
  const Graph& graph() const { return graph_; }
  Vertex gpu_vertex(int global_gpu) const { return gpu_vertices_.at(global_gpu); }

 private:
  std::vector<Link> path_between(Vertex from, Vertex to) const;
  Vertex add_device(DeviceKind kind, int node, int index);
  void add_link(Vertex a, Vertex b, LinkKind kind, BytesPerSec bw);

  Graph graph_;
  std::vector<Vertex> gpu_vertices_;
  std::vector<std::vector<Vertex>> cpu_vertices_;  // [node][socket]
};

}  // namespace moe
