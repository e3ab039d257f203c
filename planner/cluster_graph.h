// ClusterGraph: a ClusterSpec as a Boost.Graph graph of devices and links, so that later stages
// can ask which links a transfer between two GPUs (or a GPU and host memory) crosses. Kept apart
// from cluster_spec.h, which nearly every file includes: Boost.Graph costs 1.7 s to parse.
#pragma once

#include <boost/graph/adjacency_list.hpp>
#include <vector>

#include "planner/cluster_spec.h"
#include "planner/units.h"

namespace moe {

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
