// The bandwidths a parallel group sees, read once from the cluster graph.
//
// Megatron-Core orders ranks TP innermost, then CP, then DP (experts: ETP, EP, EDP), then PP, so
// a group of n ranks at stride k spans n*k consecutive ranks: inside one node when that fits,
// otherwise through the NICs. Collectives on a node-spanning group are bound by the per-GPU NIC
// share; inside a node by the NVSwitch port (or the PCIe path between the farthest GPUs).
// A span that does not tile the node (64 ranks in a 72-GPU NVL72 rack) leaves some groups
// straddling two nodes once the plan runs on more than one: the slowest group sets the pace.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/cluster_spec.h"
#include "planner/units.h"

namespace moe {

class ClusterGraph;

// On a PCIe-only node the GPUs under one switch share its uplink to the CPU, and the sockets
// share their interconnect: when every group of a kind runs its collective at once (as every
// data-parallel replica does), groups that cross switches split those links. Each entry holds
// the rate a ring step or an all-to-all then sees, per GPU, for groups of n ranks at a stride.
struct GroupRate {
  int64_t n = 0, stride = 0;
  BytesPerSec ring;      // each member to the next, all groups at once
  BytesPerSec alltoall;  // what per_rank (n - 1) / n bytes take, all groups at once
};

struct LinkRates {
  int gpus_per_node = 1;
  // GPUs the plan runs on (the cluster's first `world`): the whole cluster unless set.
  int64_t world = 1;
  BytesPerSec intra;  // narrowest link between two GPUs of a node
  BytesPerSec inter;  // per GPU through its NIC when every GPU sends at once
  Seconds intra_latency;
  Seconds inter_latency;
  BytesPerSec hbm;
  // Between a GPU and host memory when every GPU of the node copies at once: its PCIe link, or
  // its share of a switch uplink it shares, or its NVLink-C2C link to a Grace CPU.
  BytesPerSec host;
  // A GPU's share of its CPU socket's memory bandwidth, the socket's GPUs working at once
  // (zero where the cluster file lists no CPUs).
  BytesPerSec host_memory;
  // PCIe-only nodes: groups that share a switch uplink or the socket link (NVSwitch ports are
  // never shared between groups, so NVSwitch nodes list none).
  std::vector<GroupRate> shared_groups;

  // Whether a group spanning `span` consecutive ranks leaves its node (some group of them does,
  // when the span does not tile the node).
  bool crosses_nodes(int64_t span) const {
    return span > gpus_per_node || (world > gpus_per_node && gpus_per_node % span != 0);
  }
  // Whether groups spanning `span` ranks split unevenly over nodes somewhere in the world.
  bool straddles(int64_t span) const {
    return world > gpus_per_node && gpus_per_node % span != 0 && span % gpus_per_node != 0;
  }
  // The fewest members of one group of n ranks at `stride` that share a node, over the groups
  // of the world: what the worst-placed member reaches over NVLink (n inside one node).
  int64_t local_peers(int64_t n, int64_t stride) const;
  BytesPerSec bandwidth(int64_t span) const { return crosses_nodes(span) ? inter : intra; }
  Seconds latency(int64_t span) const {
    return crosses_nodes(span) ? inter_latency : intra_latency;
  }
  // Inside a node: a ring or all-to-all of n ranks at `stride` while every such group runs.
  BytesPerSec ring_bandwidth(int64_t n, int64_t stride) const;
  // A ring of n ranks at `stride` wherever it runs: through the NICs when it leaves the node.
  BytesPerSec ring_link(int64_t n, int64_t stride) const {
    return crosses_nodes(n * stride) ? inter : ring_bandwidth(n, stride);
  }
  BytesPerSec alltoall_bandwidth(int64_t n, int64_t stride) const;
  // The table's entry for n ranks at `stride`; null when they share no link (or not PCIe).
  const GroupRate* shared_group(int64_t n, int64_t stride) const;
};

LinkRates link_rates(const ClusterSpec& c);
// The table above for a PCIe-only node (every n and stride whose blocks tile the node).
std::vector<GroupRate> shared_group_rates(const ClusterSpec& c, const ClusterGraph& g);

}  // namespace moe
