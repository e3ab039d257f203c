#include "simulator/port_loads.h"

#include <gtest/gtest.h>

#include <vector>

namespace moe::sim {
namespace {

constexpr double kB = 1e9;

// n GPUs per node over `nodes` nodes, rank order, with these weights (1 if empty).
std::vector<PortMember> group(int64_t nodes, int64_t per_node, std::vector<double> w = {}) {
  std::vector<PortMember> m;
  for (int64_t node = 0; node < nodes; ++node)
    for (int64_t r = 0; r < per_node; ++r) {
      const size_t i = m.size();
      m.push_back({node, r, Bytes(kB), w.empty() ? 1.0 : w[i]});
    }
  return m;
}

// Every member's ports carry these bytes.
void expect_every_member(const std::vector<PortLoad>& loads, double nvlink_out, double nvlink_in,
                         double nic_out, double nic_in) {
  for (size_t i = 0; i < loads.size(); ++i) {
    EXPECT_DOUBLE_EQ(loads[i].nvlink_out.value(), nvlink_out) << "member " << i;
    EXPECT_DOUBLE_EQ(loads[i].nvlink_in.value(), nvlink_in) << "member " << i;
    EXPECT_DOUBLE_EQ(loads[i].nic_out.value(), nic_out) << "member " << i;
    EXPECT_DOUBLE_EQ(loads[i].nic_in.value(), nic_in) << "member " << i;
  }
}

TEST(PortLoads, ABalancedAllToAllInsideANodeLoadsEveryNvlinkPortWithTheTasksBytes) {
  for (Exchange e : {Exchange::kAllToAllIntoHeavy, Exchange::kAllToAllFromHeavy})
    expect_every_member(port_loads(e, group(1, 4), false, true), kB, kB, 0, 0);
}

TEST(PortLoads, SkewLoadsTheHotRanksIngressOnDispatchAndItsEgressOnCombine) {
  const std::vector<double> w = {1.0, 0.5, 0.5, 0.5};
  const auto into = port_loads(Exchange::kAllToAllIntoHeavy, group(1, 4, w), false, true);
  const auto from = port_loads(Exchange::kAllToAllFromHeavy, group(1, 4, w), false, true);
  for (size_t i = 0; i < w.size(); ++i) {
    // Dispatch: every rank sends each peer its share of that peer's load.
    EXPECT_DOUBLE_EQ(into[i].nvlink_in.value(), kB * w[i]);
    // Combine: the outputs go back, so the hot rank sends the most.
    EXPECT_DOUBLE_EQ(from[i].nvlink_out.value(), kB * w[i]);
  }
  EXPECT_DOUBLE_EQ(into[0].nvlink_out.value(), kB * 0.5);                    // to three at 0.5
  EXPECT_DOUBLE_EQ(into[1].nvlink_out.value(), kB * (1.0 + 0.5 + 0.5) / 3);  // 1 and two 0.5
  EXPECT_DOUBLE_EQ(from[0].nvlink_in.value(), kB * 0.5);
}

TEST(PortLoads, AcrossNodesEachNicCarriesTheTaskAndLocalPeersTakeNvlink) {
  // Two nodes of four: each GPU's share is counted over its four remote peers (the planner's
  // time is the NIC's); its three local peers get the same share over NVLink.
  expect_every_member(port_loads(Exchange::kAllToAllIntoHeavy, group(2, 4), true, false),
                      kB * 3 / 4, kB * 3 / 4, kB, kB);
}

TEST(PortLoads, PxnForwardsOverNvlinkToTheReceiversRailWithoutChangingNicBytes) {
  // Balanced: every NIC still sends and receives the task's bytes; NVLink carries the local
  // share plus the messages forwarded to the three other rails' GPUs.
  expect_every_member(port_loads(Exchange::kAllToAllIntoHeavy, group(2, 4), true, true), kB * 6 / 4,
                      kB * 6 / 4, kB, kB);
  // A hot sender (the combine out of a hot EP rank): without PXN its own NIC sends all of its
  // outputs; with PXN they leave by the four rails' NICs, so no NIC sends more than the node's
  // mean.
  const std::vector<double> w = {1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
  const auto direct = port_loads(Exchange::kAllToAllFromHeavy, group(2, 4, w), true, false);
  const auto pxn = port_loads(Exchange::kAllToAllFromHeavy, group(2, 4, w), true, true);
  EXPECT_DOUBLE_EQ(direct[0].nic_out.value(), kB);
  for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(pxn[i].nic_out.value(), kB * 2.5 / 4);
  // A hot receiver's NIC takes all that comes to it either way.
  const auto into = port_loads(Exchange::kAllToAllIntoHeavy, group(2, 4, w), true, true);
  EXPECT_DOUBLE_EQ(into[0].nic_in.value(), kB);
}

TEST(PortLoads, PxnFallsBackToTheSendersNicWhereTheRailHasNoMember) {
  // Node 0 holds rails 0-1, node 1 rails 2-3 (a group strided over rails): no GPU on the
  // sender's node sits on the receiver's rail.
  std::vector<PortMember> m = {
      {0, 0, Bytes(kB), 1}, {0, 1, Bytes(kB), 1}, {1, 2, Bytes(kB), 1}, {1, 3, Bytes(kB), 1}};
  const auto pxn = port_loads(Exchange::kAllToAllIntoHeavy, m, true, true);
  const auto direct = port_loads(Exchange::kAllToAllIntoHeavy, m, true, false);
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_DOUBLE_EQ(pxn[i].nic_out.value(), direct[i].nic_out.value());
    EXPECT_DOUBLE_EQ(pxn[i].nvlink_out.value(), direct[i].nvlink_out.value());
    EXPECT_DOUBLE_EQ(pxn[i].nic_out.value(), kB);
  }
}

TEST(PortLoads, ARingHopsToTheNextRankOverNvlinkOrEveryNicWhenItCrossesNodes) {
  const std::vector<double> w = {1.0, 0.25, 0.5, 0.75};
  const auto inside = port_loads(Exchange::kRing, group(1, 4, w), false, true);
  const auto across = port_loads(Exchange::kRing, group(2, 2, w), true, true);
  for (size_t p = 0; p < 4; ++p) {
    const size_t prev = (p + 3) % 4;
    EXPECT_DOUBLE_EQ(inside[p].nvlink_out.value(), kB * w[p]);
    EXPECT_DOUBLE_EQ(inside[p].nvlink_in.value(), kB * w[prev]);
    EXPECT_EQ(inside[p].nic_out.value(), 0.0);
    // NCCL spreads a multi-node ring's channels so every GPU's NIC carries its share.
    EXPECT_DOUBLE_EQ(across[p].nic_out.value(), kB * w[p]);
    EXPECT_DOUBLE_EQ(across[p].nic_in.value(), kB * w[prev]);
    EXPECT_EQ(across[p].nvlink_out.value(), 0.0);
  }
  // One member: nothing to exchange.
  for (const PortLoad& l : port_loads(Exchange::kRing, group(1, 1), false, true))
    EXPECT_EQ(l.nvlink_out.value() + l.nic_out.value(), 0.0);
}

}  // namespace
}  // namespace moe::sim

namespace moe::sim {

TEST(PortLoads, AStraddlingGroupMovesThePlannersShareOnEveryPair) {
  // One member on node 0 and three on node 1; the bytes were sized for three remote peers (the
  // worst-placed member's). Each pair moves a third of a member's bytes: the lone member sends
  // and receives all of its bytes over the NIC; the others one third over the NIC and two
  // thirds over NVLink.
  std::vector<PortMember> m = {{0, 5, Bytes(kB), 1.0},
                               {1, 0, Bytes(kB), 1.0},
                               {1, 1, Bytes(kB), 1.0},
                               {1, 2, Bytes(kB), 1.0}};
  const auto loads = port_loads(Exchange::kAllToAllIntoHeavy, m, true, false, 3.0);
  EXPECT_DOUBLE_EQ(loads[0].nic_out.value(), kB);
  EXPECT_DOUBLE_EQ(loads[0].nic_in.value(), kB);
  EXPECT_DOUBLE_EQ(loads[0].nvlink_out.value(), 0.0);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(loads[i].nic_out.value(), kB / 3) << i;
    EXPECT_DOUBLE_EQ(loads[i].nvlink_out.value(), 2 * kB / 3) << i;
    EXPECT_DOUBLE_EQ(loads[i].nvlink_in.value(), 2 * kB / 3) << i;
  }
  // Sized by each member's own remote peers instead, the node-1 side of a combine would send
  // a whole member's bytes to the lone GPU, which then takes three.
  const auto own = port_loads(Exchange::kAllToAllFromHeavy, m, true, false);
  EXPECT_DOUBLE_EQ(own[1].nic_out.value(), kB);
  EXPECT_DOUBLE_EQ(own[0].nic_in.value(), 3 * kB);
  const auto shared = port_loads(Exchange::kAllToAllFromHeavy, m, true, false, 3.0);
  EXPECT_DOUBLE_EQ(shared[0].nic_in.value(), kB);
}

}  // namespace moe::sim
