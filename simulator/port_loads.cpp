#include "simulator/port_loads.h"

#include <cstddef>
#include <map>
#include <utility>

namespace moe::sim {

namespace {

std::vector<PortLoad> ring_loads(const std::vector<PortMember>& m, bool across) {
  std::vector<PortLoad> out(m.size());
  if (m.size() < 2) return out;
  for (size_t p = 0; p < m.size(); ++p) {
    const size_t next = (p + 1) % m.size();
    const Bytes b = m[p].bytes * m[p].weight;
    if (across) {
      out[p].nic_out += b;
      out[next].nic_in += b;
    } else {
      out[p].nvlink_out += b;
      out[next].nvlink_in += b;
    }
  }
  return out;
}

std::vector<PortLoad> alltoall_loads(const std::vector<PortMember>& m, bool into_heavy, bool across,
                                     bool pxn, double remote_peers) {
  const size_t n = m.size();
  std::vector<PortLoad> out(n);
  if (!across) {
    // Inside a node, in closed form (the every-GPU simulation runs thousands of these): with W
    // the weights' sum, a dispatch sends B (W - w_i) / (n - 1) and receives B w_i; a combine
    // the reverse.
    double total = 0;
    for (const PortMember& x : m) total += x.weight;
    const double peers = static_cast<double>(n - 1);
    for (size_t i = 0; i < n; ++i) {
      const Bytes own = m[i].bytes * m[i].weight;
      const Bytes rest = m[i].bytes * ((total - m[i].weight) / peers);
      out[i].nvlink_out = into_heavy ? rest : own;
      out[i].nvlink_in = into_heavy ? own : rest;
    }
    return out;
  }
  // Across nodes each member's share is counted over its remote peers (the planner's time is
  // the NIC's).
  std::vector<double> peers(n, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (m[j].node != m[i].node) peers[i] += 1.0;
  if (remote_peers > 0) peers.assign(n, remote_peers);
  std::map<std::pair<int64_t, int64_t>, size_t> by_rail;  // (node, rail) -> member
  for (size_t k = 0; k < n; ++k) by_rail.emplace(std::pair{m[k].node, m[k].rail}, k);
  auto rail_gpu = [&](int64_t node, int64_t rail) -> size_t {
    const auto it = by_rail.find({node, rail});
    return it == by_rail.end() ? n : it->second;  // n: leaves by the sender's own NIC
  };
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      const size_t heavy = into_heavy ? j : i;
      const double share = peers[heavy] > 0 ? m[heavy].weight / peers[heavy] : 0.0;
      const Bytes b = m[i].bytes * share;
      if (m[i].node == m[j].node) {
        out[i].nvlink_out += b;
        out[j].nvlink_in += b;
        continue;
      }
      size_t exit = i;
      if (pxn) {
        const size_t r = rail_gpu(m[i].node, m[j].rail);
        if (r < n) exit = r;
      }
      if (exit != i) {
        out[i].nvlink_out += b;
        out[exit].nvlink_in += b;
      }
      out[exit].nic_out += b;
      out[j].nic_in += b;
    }
  }
  return out;
}

}  // namespace

std::vector<PortLoad> port_loads(Exchange exchange, const std::vector<PortMember>& members,
                                 bool across, bool pxn, double remote_peers) {
  switch (exchange) {
    case Exchange::kRing:
      return ring_loads(members, across);
    case Exchange::kAllToAllIntoHeavy:
      return alltoall_loads(members, true, across, pxn, remote_peers);
    case Exchange::kAllToAllFromHeavy:
      return alltoall_loads(members, false, across, pxn, remote_peers);
  }
  return {};
}

}  // namespace moe::sim
