// How many ranks and nodes a token's experts reach (DeepEP's copies): closed forms against
// hand-computed values and against sampled routing.
#include "planner/dispatch_fanout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "test_models.h"

namespace moe {
namespace {

ModelSpec routed(int64_t experts, int64_t top_k, int64_t groups = 1, int64_t group_topk = 1) {
  ModelSpec m = testing_models::mixtral_8x7b();
  m.num_routed_experts = experts;
  m.top_k = top_k;
  m.router_groups = groups;
  m.router_group_topk = group_topk;
  return m;
}

// Other nodes a token reaches, sampled: groups drawn uniformly, then experts uniformly from
// theirs; the sender sits on a uniformly drawn node.
double sampled_nodes(const ModelSpec& m, int64_t ep, int64_t local, int samples) {
  std::mt19937_64 rng(7);
  const int64_t e = m.num_routed_experts, group = e / m.router_groups;
  const int64_t per_node = e / ep * local, nodes = ep / local;
  std::vector<int64_t> groups(static_cast<size_t>(m.router_groups));
  std::iota(groups.begin(), groups.end(), 0);
  double total = 0;
  for (int i = 0; i < samples; ++i) {
    std::shuffle(groups.begin(), groups.end(), rng);
    std::vector<int64_t> pool;
    for (int64_t g = 0; g < m.router_group_topk; ++g)
      for (int64_t x = 0; x < group; ++x)
        pool.push_back(groups[static_cast<size_t>(g)] * group + x);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::set<int64_t> hit;
    for (int64_t j = 0; j < m.top_k; ++j) hit.insert(pool[static_cast<size_t>(j)] / per_node);
    const int64_t own = std::uniform_int_distribution<int64_t>(0, nodes - 1)(rng);
    total += static_cast<double>(hit.size() - hit.count(own));
  }
  return total / samples;
}

}  // namespace

TEST(DispatchFanout, OneExpertPerRankSendsWhatTheAllToAllSends) {
  // Mixtral on 8 ranks: two distinct experts are two distinct ranks, k (n - 1)/n = 1.75 copies.
  const DispatchFanout f = dispatch_fanout(routed(8, 2), 8, 8);
  EXPECT_NEAR(f.ranks, 1.75, 1e-12);
  EXPECT_EQ(f.nodes, 0.0);
}

TEST(DispatchFanout, FineGrainedExpertsReachFewerNodesThanCopies) {
  // Qwen3-235B (128 experts, top-8) over EP 32 on 4 nodes: 2.72 other nodes a token, where
  // the all-to-all sends 8 x 24/32 = 6 copies over the NIC.
  const DispatchFanout f = dispatch_fanout(routed(128, 8), 32, 8);
  EXPECT_NEAR(f.nodes, 2.7217581933, 1e-9);
  EXPECT_NEAR(f.ranks, 7.1293897638, 1e-9);
  EXPECT_NEAR(f.nodes, sampled_nodes(routed(128, 8), 32, 8, 40000), 0.03);
}

TEST(DispatchFanout, GroupLimitedRoutingCapsTheNodes) {
  // DeepSeek-V3 (256 experts, 8 groups, the best 4 per token) over EP 64 on 8 nodes: a node is
  // one group, so at most 4 nodes, 3.18 others on average (7 copies over the NIC by all-to-all).
  const ModelSpec v3 = routed(256, 8, 8, 4);
  const DispatchFanout f = dispatch_fanout(v3, 64, 8);
  EXPECT_NEAR(f.nodes, 3.1753845589, 1e-9);
  EXPECT_NEAR(f.ranks, 7.2443799213, 1e-9);
  EXPECT_NEAR(f.nodes, sampled_nodes(v3, 64, 8, 40000), 0.03);
  // A node of four whole groups (EP 8, 4 ranks a node): missed only when none of its groups is
  // chosen (1 in 70) or none of the 8 draws lands in its chosen ones.
  EXPECT_NEAR(block_miss_probability(v3, 128), 0.0370789304, 1e-9);
  EXPECT_NEAR(dispatch_fanout(v3, 8, 4).nodes, sampled_nodes(v3, 8, 4, 40000), 0.01);
  // Without the group limit the same token reaches more nodes.
  EXPECT_GT(dispatch_fanout(routed(256, 8), 64, 8).nodes, f.nodes + 1.0);
}

TEST(DispatchFanout, RejectsExpertsThatDoNotDivide) {
  EXPECT_THROW(dispatch_fanout(routed(128, 8), 48, 8), std::invalid_argument);
}

}  // namespace moe
