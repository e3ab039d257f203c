#include "planner/link_rates.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "planner/cluster_graph.h"

namespace moe {

namespace {
// The GPUs of node 0's groups of n ranks at `stride`, Megatron's way: blocks of n x stride
// consecutive ranks, `stride` interleaved groups in each.
std::vector<std::vector<int>> node_groups(int gpus, int64_t n, int64_t stride) {
  std::vector<std::vector<int>> groups;
  for (int64_t block = 0; block < gpus; block += n * stride) {
    for (int64_t offset = 0; offset < stride; ++offset) {
      std::vector<int>& g = groups.emplace_back();
      for (int64_t i = 0; i < n; ++i) g.push_back(static_cast<int>(block + offset + i * stride));
    }
  }
  return groups;
}

// Per direction, how many of the flows cross each link when every group runs at once, over
// the link's bandwidth: the largest ratio is the seconds a flow's byte takes. Rings and
// all-to-alls send as much each way across any link of the node's tree, so half the flows
// through a link go each way.
using PairPaths = std::vector<std::vector<std::vector<Link>>>;  // [from][to]

double busiest_link(const PairPaths& paths, const std::vector<std::pair<int, int>>& flows) {
  std::map<int, std::pair<double, double>> load;  // link id -> (flows, bandwidth)
  for (auto [from, to] : flows) {
    for (const Link& l : paths[static_cast<size_t>(from)][static_cast<size_t>(to)]) {
      auto& [count, bw] = load[l.id];
      count += 0.5;
      bw = l.bandwidth.value();
    }
  }
  double worst = 0;
  for (const auto& [id, lb] : load) worst = std::max(worst, lb.first / lb.second);
  return worst;
}
}  // namespace

std::vector<GroupRate> shared_group_rates(const ClusterSpec& c, const ClusterGraph& g) {
  std::vector<GroupRate> out;
  const int gpus = c.node.num_gpus;
  // Each pair's route once (a search of the whole cluster graph); every n and stride reuses it.
  PairPaths paths(static_cast<size_t>(gpus), std::vector<std::vector<Link>>(gpus));
  for (int a = 0; a < gpus; ++a)
    for (int b = 0; b < gpus; ++b)
      if (a != b) paths[static_cast<size_t>(a)][static_cast<size_t>(b)] = g.gpu_path(a, b);
  for (int64_t n = 2; n <= gpus; ++n) {
    for (int64_t stride = 1; n * stride <= gpus; ++stride) {
      if (gpus % (n * stride) != 0) continue;
      std::vector<std::pair<int, int>> ring, all;
      for (const std::vector<int>& group : node_groups(gpus, n, stride)) {
        for (size_t i = 0; i < group.size(); ++i) {
          ring.emplace_back(group[i], group[(i + 1) % group.size()]);
          for (int peer : group)
            if (peer != group[i]) all.emplace_back(group[i], peer);
        }
      }
      // A ring step moves one message a member; an all-to-all n - 1 messages of per_rank / n.
      out.push_back({n, stride, BytesPerSec(1.0 / busiest_link(paths, ring)),
                     BytesPerSec(static_cast<double>(n - 1) / busiest_link(paths, all))});
    }
  }
  return out;
}

LinkRates link_rates(const ClusterSpec& c) {
  const ClusterGraph g(c);
  LinkRates r;
  r.gpus_per_node = c.node.num_gpus;
  r.world = c.num_gpus();
  r.hbm = c.node.gpu.hbm_bandwidth;
  r.intra_latency = c.intra_node_latency;
  r.inter_latency = c.inter_node_latency;
  // The worst pair inside a node (across sockets on a PCIe-only node).
  BytesPerSec intra(1e30);
  for (int g1 = 1; g1 < c.node.num_gpus; ++g1)
    intra = std::min(intra, ClusterGraph::bottleneck(g.gpu_path(0, g1)));
  r.intra = c.node.num_gpus > 1 ? intra : c.node.gpu.hbm_bandwidth;
  r.inter = c.num_nodes > 1 ? c.gpu_network_bandwidth() : r.intra;
  if (c.node.fabric == Fabric::kPcie) r.shared_groups = shared_group_rates(c, g);
  int sharing = 1;
  for (const PcieSwitch& s : c.node.pcie_switches)
    sharing = std::max(sharing, static_cast<int>(s.gpus.size()));
  r.host = c.node.host_link_bandwidth() / static_cast<double>(c.node.has_c2c() ? 1 : sharing);
  std::vector<int> on_socket(c.node.cpus.size(), 0);
  for (int gpu = 0; gpu < c.node.num_gpus; ++gpu) {
    const int cpu = c.node.cpu_of_gpu(gpu);
    if (cpu >= 0 && static_cast<size_t>(cpu) < on_socket.size()) ++on_socket[cpu];
  }
  for (size_t s = 0; s < on_socket.size(); ++s) {
    if (on_socket[s] == 0) continue;
    const BytesPerSec share = c.node.cpus[s].memory_bandwidth / static_cast<double>(on_socket[s]);
    r.host_memory = r.host_memory.value() > 0 ? std::min(r.host_memory, share) : share;
  }
  return r;
}

int64_t LinkRates::local_peers(int64_t n, int64_t stride) const {
  const int64_t span = n * stride, gpn = gpus_per_node;
  if (!crosses_nodes(span)) return n;
  if (span % gpn == 0 && gpn % stride == 0) return gpn / stride;
  if (stride % gpn == 0) return 1;
  // Groups fill blocks of `span` ranks, `stride` interleaved in each; node boundaries cut the
  // blocks alike every lcm(span, gpn) ranks. Count each group's members node by node.
  const int64_t period = std::min(std::max(world, span), std::lcm(span, gpn));
  int64_t fewest = n;
  for (int64_t block = 0; block + span <= period; block += span) {
    for (int64_t offset = 0; offset < stride; ++offset) {
      const int64_t first = block + offset, last = first + (n - 1) * stride;
      for (int64_t node = first / gpn; node <= last / gpn; ++node) {
        const int64_t lo = std::max(first, node * gpn), hi = std::min(last, node * gpn + gpn - 1);
        const int64_t members = (hi - first) / stride - (lo - first + stride - 1) / stride + 1;
        if (members > 0) fewest = std::min(fewest, members);
      }
    }
  }
  return fewest;
}

const GroupRate* LinkRates::shared_group(int64_t n, int64_t stride) const {
  for (const GroupRate& gr : shared_groups)
    if (gr.n == n && gr.stride == stride) return &gr;
  return nullptr;
}

BytesPerSec LinkRates::ring_bandwidth(int64_t n, int64_t stride) const {
  const GroupRate* gr = shared_group(n, stride);
  return gr ? gr->ring : intra;
}

BytesPerSec LinkRates::alltoall_bandwidth(int64_t n, int64_t stride) const {
  const GroupRate* gr = shared_group(n, stride);
  return gr ? gr->alltoall : intra;
}

}  // namespace moe
