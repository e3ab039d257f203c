// The bandwidths a parallel group sees, read once from the cluster graph.
//
// Megatron-Core orders ranks TP innermost, then CP, then DP (experts: ETP, EP, EDP), then PP, so
// a group of n ranks at stride k spans n*k consecutive ranks: inside one node when that fits,
// otherwise through the NICs. Collectives on a node-spanning group are bound by the per-GPU NIC
// share; inside a node by the NVSwitch port (or the PCIe path between the farthest GPUs).
#pragma once

#include <cstdint>

#include "planner/cluster_spec.h"
#include "planner/units.h"

namespace moe {

struct LinkRates {
  int gpus_per_node = 1;
  BytesPerSec intra;  // narrowest link between two GPUs of a node
  BytesPerSec inter;  // per GPU through its NIC when every GPU sends at once
  Seconds intra_latency;
  Seconds inter_latency;
  BytesPerSec hbm;

  // Whether a group spanning `span` consecutive ranks leaves its node.
  bool crosses_nodes(int64_t span) const { return span > gpus_per_node; }
  BytesPerSec bandwidth(int64_t span) const { return crosses_nodes(span) ? inter : intra; }
  Seconds latency(int64_t span) const {
    return crosses_nodes(span) ? inter_latency : intra_latency;
  }
};

LinkRates link_rates(const ClusterSpec& c);

}  // namespace moe
