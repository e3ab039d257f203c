// What one collective puts on each member GPU's ports (every-GPU simulation).
//
// A GPU has four ports: NVLink out and in, NIC out and in (each a link of one direction). A
// collective of a group becomes, per member, the bytes each port carries; each port's bytes are
// one flow on that link, and the collective ends when the last lands. Port flows rather than
// one flow per pair keep an all-to-all over n ranks at 4n flows, not n(n - 1), and leave the
// contention that matters at flow level: a hot rank's ingress under skewed routing, the NIC a
// data-parallel ring and an expert all-to-all share in one direction and not the other.
//
// Members are in rank order, each with the bytes it moves (the task's bytes sized so that alone
// on one port they take the planner's time) and its load weight (1 on the busiest EP rank):
//   ring      member p sends bytes x weight to p + 1 (NCCL's pipelined ring: every hop at once)
//             over NVLink, or, for a ring the planner routes across nodes, over the NIC ports:
//             NCCL spreads a multi-node ring's channels so that every GPU's NIC carries its
//             share, not just the GPUs at node boundaries.
//   all-to-all  member i sends each peer j an equal share; under skew the share scales with
//             the receiver's weight for a dispatch (tokens go to the hot experts' rank) and with
//             the sender's for a combine (their outputs come back). The shares are counted over
//             the peers on other nodes when the group spans nodes, since the planner's time is
//             the NIC's, and over every peer otherwise; the peers on the sender's own node get
//             the same share over NVLink.
//   PXN       (NCCL's default for all-to-all across nodes) a message for GPU j on another node
//             first crosses NVLink to the sender node's GPU on j's rail (same local index) and
//             leaves through that GPU's NIC, so each NIC only sends to its own rail; it costs
//             an NVLink hop and moves which NIC a message leaves by, not how many bytes a NIC
//             carries in all. Without it each GPU's messages leave through its own NIC.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/units.h"

namespace moe::sim {

enum class Exchange : uint8_t { kRing, kAllToAllIntoHeavy, kAllToAllFromHeavy };

struct PortMember {
  int64_t node = 0;  // which node the GPU is on
  int64_t rail = 0;  // its local index there (the NIC rail it sits on)
  Bytes bytes;
  double weight = 1.0;
};

struct PortLoad {
  Bytes nvlink_out, nvlink_in, nic_out, nic_in;
};

// `across`: the planner routes this communication over the NIC (its group spans nodes); hops
// inside a node still take NVLink. `remote_peers`: the peers on other nodes the bytes were sized
// for (the planner's worst-placed member, where groups straddle nodes unevenly, as 64-rank
// groups do in 72-GPU racks): every pair then moves the same share, whatever this group's own
// split. Zero: each member's own count (groups that tile nodes). Returns one load per member,
// in the same order.
std::vector<PortLoad> port_loads(Exchange exchange, const std::vector<PortMember>& members,
                                 bool across, bool pxn, double remote_peers = 0);

}  // namespace moe::sim
