#include "planner/cluster_graph.h"

#include <algorithm>
#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <boost/property_map/function_property_map.hpp>
#include <limits>

#include "planner/errors.h"

namespace moe {

const char* device_kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::kGpu:
      return "gpu";
    case DeviceKind::kNvSwitch:
      return "nvswitch";
    case DeviceKind::kPcieSwitch:
      return "pcie-switch";
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kNic:
      return "nic";
    case DeviceKind::kNetwork:
      return "network";
  }
  return "?";
}

const char* link_kind_name(LinkKind k) {
  switch (k) {
    case LinkKind::kNvLink:
      return "nvlink";
    case LinkKind::kPcie:
      return "pcie";
    case LinkKind::kC2c:
      return "nvlink-c2c";
    case LinkKind::kCpuInterconnect:
      return "cpu-interconnect";
    case LinkKind::kNetwork:
      return "network";
  }
  return "?";
}

ClusterGraph::Vertex ClusterGraph::add_device(DeviceKind kind, int node, int index) {
  return boost::add_vertex(Device{kind, node, index}, graph_);
}

void ClusterGraph::add_link(Vertex a, Vertex b, LinkKind kind, BytesPerSec bw) {
  const int id = static_cast<int>(boost::num_edges(graph_));
  boost::add_edge(a, b, Link{kind, bw, id}, graph_);
}

ClusterGraph::ClusterGraph(const ClusterSpec& spec) {
  const NodeSpec& n = spec.node;
  const Vertex network = spec.num_nodes > 1 ? add_device(DeviceKind::kNetwork, -1, 0) : Vertex{};
  const BytesPerSec pcie = n.pcie_bandwidth();
  const BytesPerSec host = n.host_link_bandwidth();
  const LinkKind host_kind = n.has_c2c() ? LinkKind::kC2c : LinkKind::kPcie;
  cpu_vertices_.resize(spec.num_nodes);
  for (int node = 0; node < spec.num_nodes; ++node) {
    std::vector<Vertex> gpus;
    for (int g = 0; g < n.num_gpus; ++g) {
      gpus.push_back(add_device(DeviceKind::kGpu, node, g));
      gpu_vertices_.push_back(gpus.back());
    }
    auto& cpus = cpu_vertices_[node];
    for (size_t c = 0; c < n.cpus.size(); ++c) {
      cpus.push_back(add_device(DeviceKind::kCpu, node, static_cast<int>(c)));
    }
    // Sockets are fully connected by their interconnect.
    for (size_t a = 0; a < cpus.size(); ++a) {
      for (size_t b = a + 1; b < cpus.size(); ++b) {
        add_link(cpus[a], cpus[b], LinkKind::kCpuInterconnect, n.cpu_interconnect);
      }
    }
    std::vector<Vertex> switches;
    for (size_t s = 0; s < n.pcie_switches.size(); ++s) {
      const PcieSwitch& sw = n.pcie_switches[s];
      switches.push_back(add_device(DeviceKind::kPcieSwitch, node, static_cast<int>(s)));
      // One x16 uplink to the root complex (or a superchip's C2C), shared by every GPU under it.
      add_link(switches.back(), cpus[sw.cpu], host_kind, host);
      for (int g : sw.gpus) add_link(gpus[g], switches.back(), host_kind, host);
    }
    if (n.fabric == Fabric::kNvSwitch) {
      const Vertex nvswitch = add_device(DeviceKind::kNvSwitch, node, 0);
      for (Vertex g : gpus) add_link(g, nvswitch, LinkKind::kNvLink, n.nvlink_bandwidth);
    }
    for (size_t k = 0; k < n.nics.size(); ++k) {
      const Nic& nic = n.nics[k];
      const Vertex v = add_device(DeviceKind::kNic, node, static_cast<int>(k));
      const int sw = nic.pcie_switch >= 0 ? nic.pcie_switch : n.switch_of_gpu(nic.gpus.front());
      add_link(v, switches[sw], LinkKind::kPcie, pcie);
      // GPUDirect RDMA: the GPUs a NIC serves reach it through their switch; the direct edge
      // keeps their traffic on their own NIC rather than the nearest one.
      for (int g : nic.gpus) add_link(gpus[g], v, LinkKind::kPcie, std::min(pcie, nic.bandwidth));
      if (spec.num_nodes > 1) add_link(v, network, LinkKind::kNetwork, nic.bandwidth);
    }
  }
}

std::vector<Link> ClusterGraph::path_between(Vertex from, Vertex to) const {
  if (from == to) return {};
  const size_t nv = boost::num_vertices(graph_);
  std::vector<Vertex> pred(nv);
  std::vector<double> dist(nv, std::numeric_limits<double>::infinity());
  // Fewest hops first; a tie goes to the wider links (the epsilon term stays below one hop). A
  // network hop costs as much as a whole intra-node detour, so traffic between two GPUs of one
  // node never leaves it through the NICs.
  auto weight = boost::make_function_property_map<Graph::edge_descriptor, double>(
      [this](Graph::edge_descriptor e) {
        const Link& l = graph_[e];
        return (l.kind == LinkKind::kNetwork ? 8.0 : 1.0) + 1e-3 * kGiga / l.bandwidth.value();
      });
  boost::dijkstra_shortest_paths(
      graph_, from,
      boost::predecessor_map(
          boost::make_iterator_property_map(pred.begin(), boost::get(boost::vertex_index, graph_)))
          .distance_map(boost::make_iterator_property_map(dist.begin(),
                                                          boost::get(boost::vertex_index, graph_)))
          .weight_map(weight));
  if (dist[to] == std::numeric_limits<double>::infinity()) {
    throw ConfigError("no path between the two devices in the cluster graph");
  }
  std::vector<Link> path;
  for (Vertex v = to; v != from; v = pred[v]) {
    const Vertex u = pred[v];
    // Among parallel edges take the widest.
    const Link* best = nullptr;
    auto [it, end] = boost::out_edges(u, graph_);
    for (; it != end; ++it) {
      if (boost::target(*it, graph_) != v) continue;
      const Link& l = graph_[*it];
      if (best == nullptr || l.bandwidth > best->bandwidth) best = &l;
    }
    path.push_back(*best);
  }
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<Link> ClusterGraph::gpu_path(int from_gpu, int to_gpu) const {
  return path_between(gpu_vertices_.at(from_gpu), gpu_vertices_.at(to_gpu));
}

std::vector<Link> ClusterGraph::host_path(int gpu) const {
  const Device& d = graph_[gpu_vertices_.at(gpu)];
  // Host memory of the socket the GPU's switch hangs off: the shortest path finds that socket.
  Vertex best_cpu = cpu_vertices_.at(d.node).front();
  size_t best_len = std::numeric_limits<size_t>::max();
  for (Vertex cpu : cpu_vertices_.at(d.node)) {
    const size_t len = path_between(gpu_vertices_[gpu], cpu).size();
    if (len < best_len) {
      best_len = len;
      best_cpu = cpu;
    }
  }
  return path_between(gpu_vertices_[gpu], best_cpu);
}

BytesPerSec ClusterGraph::bottleneck(const std::vector<Link>& path) {
  BytesPerSec bw(std::numeric_limits<double>::infinity());
  for (const Link& l : path) bw = std::min(bw, l.bandwidth);
  return bw;
}

}  // namespace moe
