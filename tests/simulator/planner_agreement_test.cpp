// DESIGN.md's contract: the planner's cost functions are the simulator's leaf durations, and
// without contention the two agree.
#include <gtest/gtest.h>

#include "planner/io/loaders.h"
#include "planner/time_model.h"
#include "simulator/collectives.h"
#include "test_paths.h"

namespace moe::sim {

namespace {
Efficiencies perfect() {
  Efficiencies e = efficiencies();
  const EfficiencyCurve one = EfficiencyCurve::constant(1.0);
  e.allgather_intra = e.allgather_inter = e.alltoall_intra = e.alltoall_inter = one;
  return e;
}
}  // namespace

TEST(PlannerAgreement, RingOnAFreeNodeMatchesTheClosedForm) {
  const ModelSpec m = io::load_model(std::string(MOEPLAN_SOURCE_DIR) + "/models/mixtral-8x7b.json");
  const ClusterSpec c =
      io::load_cluster(std::string(MOEPLAN_SOURCE_DIR) + "/topologies/h100-sxm-8.json");
  const TimeContext ctx = make_time_context(m, c, perfect(), RoutingSkew{}, 4096);
  for (double total : {1e6, 6.4e7, 1e9}) {
    for (int n : {2, 4, 8}) {
      EventQueue q;
      FlowNetwork net(q);
      // Each GPU's NVLink port toward the switch, one direction per link.
      std::vector<std::vector<int>> links;
      for (int r = 0; r < n; ++r) links.push_back({net.add_link(c.node.nvlink_bandwidth)});
      SimTime finished;
      ring_collective(q, net, links, Bytes(total), to_sim_time(c.intra_node_latency),
                      [&](SimTime t) { finished = t; });
      q.run();
      const double planner = ring_time(ctx, Bytes(total), n, n).value();
      EXPECT_NEAR(to_seconds(finished).value() / planner, 1.0, 1e-6)
          << total << " bytes over " << n;
    }
  }
}

TEST(PlannerAgreement, ContentionOnlySlowsTheSimulator) {
  // Two rings over the same ports: each takes about twice the closed form, never less.
  const ClusterSpec c =
      io::load_cluster(std::string(MOEPLAN_SOURCE_DIR) + "/topologies/h100-sxm-8.json");
  EventQueue q;
  FlowNetwork net(q);
  std::vector<std::vector<int>> links;
  for (int r = 0; r < 8; ++r) links.push_back({net.add_link(c.node.nvlink_bandwidth)});
  std::vector<SimTime> done;
  for (int k = 0; k < 2; ++k)
    ring_collective(q, net, links, Bytes(1e9), SimTime{0}, [&](SimTime t) { done.push_back(t); });
  q.run();
  const double alone = 7.0 / 8.0 * 1e9 / c.node.nvlink_bandwidth.value();
  ASSERT_EQ(done.size(), 2u);
  for (SimTime t : done) EXPECT_NEAR(to_seconds(t).value(), 2 * alone, 1e-9);
}

TEST(Collectives, AllToAllOnDistinctPathsTakesOneTransfer) {
  EventQueue q;
  FlowNetwork net(q);
  const int n = 4;
  std::vector<std::vector<std::vector<int>>> paths(n, std::vector<std::vector<int>>(n));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j) paths[i][j] = {net.add_link(gigabytes_per_sec(10))};
    }
  }
  SimTime done;
  alltoall(q, net, paths, Bytes(1e9), SimTime{0}, [&](SimTime t) { done = t; });
  q.run();
  EXPECT_NEAR(to_seconds(done).value(), 0.1, 1e-9);
}

}  // namespace moe::sim

namespace moe::sim {

TEST(PlannerAgreement, NothingToMoveCostsNothing) {
  // A stage of dense layers has no expert gradients: its expert-DP sync moves zero bytes, which
  // must cost zero (the efficiency curves are not defined at zero; once this was 0/0 = NaN and
  // the simulator waited forever on a flow of NaN bytes).
  const ModelSpec m = io::load_model(std::string(MOEPLAN_SOURCE_DIR) + "/models/mixtral-8x7b.json");
  const ClusterSpec c =
      io::load_cluster(std::string(MOEPLAN_SOURCE_DIR) + "/topologies/megascale-h800-240.json");
  const TimeContext ctx = make_time_context(m, c, efficiencies(), RoutingSkew{}, 4096);
  EXPECT_EQ(ring_time(ctx, Bytes(0), 8, 64).value(), 0.0);
  EXPECT_EQ(alltoall_time(ctx, Bytes(0), 8, 1).value(), 0.0);
}

}  // namespace moe::sim
