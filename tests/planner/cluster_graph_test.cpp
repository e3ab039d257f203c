#include <gtest/gtest.h>

#include "planner/cluster_spec.h"
#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/link_rates.h"
#include "test_paths.h"

namespace moe {

namespace {
ClusterSpec topology(const std::string& name) {
  return io::load_cluster(std::string(MOEPLAN_SOURCE_DIR) + "/topologies/" + name);
}
}  // namespace

TEST(ClusterGraph, NvSwitchNodeRoutesThroughTheSwitch) {
  const ClusterSpec c = topology("h100-sxm-8.json");
  const ClusterGraph g(c);
  const auto path = g.gpu_path(0, 7);
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(path[0].kind, LinkKind::kNvLink);
  EXPECT_EQ(path[1].kind, LinkKind::kNvLink);
  EXPECT_DOUBLE_EQ(ClusterGraph::bottleneck(path).value(), 450e9);
  EXPECT_TRUE(g.gpu_path(3, 3).empty());
}

TEST(ClusterGraph, InterNodePathCrossesTheGpusOwnNics) {
  const ClusterSpec c = topology("monta-2x8-a800.json");
  const ClusterGraph g(c);
  const auto path = g.gpu_path(2, 8 + 5);
  // GPU -> NIC -> network -> NIC -> GPU.
  ASSERT_EQ(path.size(), 4u);
  EXPECT_EQ(path[1].kind, LinkKind::kNetwork);
  EXPECT_EQ(path[2].kind, LinkKind::kNetwork);
  EXPECT_DOUBLE_EQ(ClusterGraph::bottleneck(path).value(), 25e9);  // 200 Gb/s
}

TEST(ClusterGraph, PcieNodeCrossesSocketsOnlyBetweenSwitches) {
  const ClusterSpec c = topology("aptmoe-4x-a800-40gb-c1g4.json");
  const ClusterGraph g(c);
  // Same switch: GPU -> switch -> GPU.
  EXPECT_EQ(g.gpu_path(0, 3).size(), 2u);
  // Other socket: GPU -> switch -> CPU -> CPU -> switch -> GPU.
  const auto across = g.gpu_path(0, 4);
  ASSERT_EQ(across.size(), 5u);
  EXPECT_EQ(across[2].kind, LinkKind::kCpuInterconnect);
  // Host memory: GPU -> switch -> CPU, at PCIe Gen4 x16.
  const auto host = g.host_path(5);
  ASSERT_EQ(host.size(), 2u);
  EXPECT_NEAR(ClusterGraph::bottleneck(host).value(), 31.5e9, 0.1e9);
}

TEST(LinkRates, PcieGroupsShareTheSwitchUplinks) {
  // Four GPUs under each switch share its x16 uplink (31.5 GB/s a direction) and the sockets a
  // 41.6 GB/s link. Pairs across the sockets (n = 2, stride 4: 0-4, 1-5, 2-6, 3-7) put four
  // flows each way on an uplink; one ring over all eight crosses it once each way; groups under
  // one switch never touch it. An all-to-all of eight sends 16 of its 56 messages a direction
  // over each uplink: per_rank (7/8) takes as long as at 7 / 16 of 31.5 GB/s.
  const LinkRates r = link_rates(topology("aptmoe-4x-a800-40gb-c1g4.json"));
  const double pcie = r.intra.value();
  EXPECT_NEAR(pcie, 31.5e9, 0.1e9);
  EXPECT_DOUBLE_EQ(r.ring_bandwidth(2, 4).value(), pcie / 4);
  EXPECT_DOUBLE_EQ(r.ring_bandwidth(4, 2).value(), pcie / 2);
  EXPECT_DOUBLE_EQ(r.ring_bandwidth(8, 1).value(), pcie);
  EXPECT_DOUBLE_EQ(r.ring_bandwidth(4, 1).value(), pcie);
  EXPECT_DOUBLE_EQ(r.alltoall_bandwidth(4, 1).value(), pcie);
  EXPECT_DOUBLE_EQ(r.alltoall_bandwidth(8, 1).value(), pcie * 7 / 16);
  // Leaving the node: the NIC share, whatever the table says.
  EXPECT_DOUBLE_EQ(r.ring_link(2, 16).value(), r.inter.value());
  // NVSwitch ports are a GPU's own: no table, every group at the port rate.
  const LinkRates nv = link_rates(topology("h100-sxm-8.json"));
  EXPECT_TRUE(nv.shared_groups.empty());
  EXPECT_DOUBLE_EQ(nv.ring_bandwidth(2, 4).value(), nv.intra.value());
  EXPECT_DOUBLE_EQ(nv.alltoall_bandwidth(8, 1).value(), nv.intra.value());
}

TEST(ClusterGraph, LargeClusterBuilds) {
  const ClusterSpec c = topology("megascale-h800-1440.json");
  EXPECT_EQ(c.num_gpus(), 1440);
  const ClusterGraph g(c);
  EXPECT_EQ(g.gpu_path(0, 1439).size(), 4u);
}

TEST(PcieBandwidth, MatchesTheSpecification) {
  // Gen4: 16 GT/s x 128/130 / 8 = 1.969 GB/s per lane; Gen5 twice that.
  EXPECT_NEAR(pcie_lane_bandwidth(4).value() * 16, 31.51e9, 0.01e9);
  EXPECT_NEAR(pcie_lane_bandwidth(5).value() * 16, 63.02e9, 0.01e9);
  EXPECT_THROW(pcie_lane_bandwidth(9), ConfigError);
}

}  // namespace moe
