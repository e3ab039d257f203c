#include "planner/link_rates.h"

namespace moe {

LinkRates link_rates(const ClusterSpec& c) {
  const ClusterGraph g(c);
  LinkRates r;
  r.gpus_per_node = c.node.num_gpus;
  r.hbm = c.node.gpu.hbm_bandwidth;
  r.intra_latency = c.intra_node_latency;
  r.inter_latency = c.inter_node_latency;
  // The worst pair inside a node (across sockets on a PCIe-only node).
  BytesPerSec intra(1e30);
  for (int g1 = 1; g1 < c.node.num_gpus; ++g1)
    intra = std::min(intra, ClusterGraph::bottleneck(g.gpu_path(0, g1)));
  r.intra = c.node.num_gpus > 1 ? intra : c.node.gpu.hbm_bandwidth;
  r.inter = c.num_nodes > 1 ? c.gpu_network_bandwidth() : r.intra;
  return r;
}

}  // namespace moe
