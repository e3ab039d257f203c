#include "planner/cluster_graph.h"

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

namespace moe {

TEST(LinkRates, GroupsThatDoNotTileA72GpuRackStraddleTwo) {
  // GB200 NVL72: 72 GPUs a NVLink domain. Groups of 64 consecutive ranks leave one rack only
  // once the plan spans several: the second is ranks 64-127, 8 in rack 0 and 56 in rack 1.
  LinkRates r = link_rates(topology("gb200-nvl72-4x72.json"));
  EXPECT_EQ(r.gpus_per_node, 72);
  EXPECT_EQ(r.world, 288);
  EXPECT_TRUE(r.crosses_nodes(64));
  EXPECT_EQ(r.local_peers(64, 1), 8);
  EXPECT_EQ(r.local_peers(32, 1), 8);    // ranks 64-95: 8 and 24
  EXPECT_EQ(r.local_peers(32, 2), 4);    // every second rank of 64-127: 4 in rack 0
  EXPECT_EQ(r.local_peers(144, 1), 72);  // whole racks
  EXPECT_FALSE(r.crosses_nodes(8));
  EXPECT_EQ(r.local_peers(8, 1), 8);
  r.world = 72;  // one rack: nothing leaves it
  EXPECT_FALSE(r.crosses_nodes(64));
  // 64 GPUs a rack, as NVIDIA's runs schedule them: groups of 64 tile the racks.
  const LinkRates tiled = link_rates(topology("gb200-nvl72-4x64.json"));
  EXPECT_FALSE(tiled.crosses_nodes(64));
  EXPECT_EQ(tiled.local_peers(128, 1), 64);
}

TEST(ClusterGraph, GraceSuperchipsReachTheirCpuOverNvlinkC2c) {
  // Two GPUs share a Grace over NVLink-C2C (450 GB/s per direction); the NICs stay on PCIe.
  const ClusterSpec c = topology("gb200-nvl72-4x72.json");
  EXPECT_DOUBLE_EQ(c.node.host_link_bandwidth().value(), 450e9);
  const ClusterGraph g(c);
  const auto host = g.host_path(3);
  ASSERT_EQ(host.size(), 2u);
  for (const Link& l : host) {
    EXPECT_EQ(l.kind, LinkKind::kC2c);
    EXPECT_DOUBLE_EQ(l.bandwidth.value(), 450e9);
  }
  // A PCIe node keeps PCIe.
  const ClusterSpec h100 = topology("h100-sxm-8.json");
  EXPECT_DOUBLE_EQ(h100.node.host_link_bandwidth().value(), h100.node.pcie_bandwidth().value());
}

}  // namespace moe
