// APTMoE's comparison (Sec. IV, Fig. 11) as events: on 4 x A800-40GB PCIe with four GPUs per
// CPU socket (the C1+G4 file: two GPUs per PCIe switch, so loading is the bottleneck, the
// regime the paper assumes), Mobius beats GPipeOffload, APTMoE beats Mobius once routing is
// skewed, and its gain grows with G.
#include "simulator/offload_sim.h"

#include <gtest/gtest.h>

#include "planner/aptmoe.h"
#include "planner/io/loaders.h"
#include "test_paths.h"

namespace moe::sim {

namespace {

struct Fixture {
  ModelSpec model =
      io::load_model(std::string(MOEPLAN_SOURCE_DIR) + "/models/aptmoe-moe-s-16.json");
  ClusterSpec cluster = io::load_cluster(std::string(MOEPLAN_SOURCE_DIR) +
                                         "/topologies/aptmoe-4x-a800-40gb-c1g4.json");

  double tokens_per_second(double g, OffloadSystem system) const {
    RoutingSkew skew;
    skew.kind = RoutingSkew::Kind::kPopularity;
    skew.proportions = {aptmoe::proportions_for_g(model.num_routed_experts, g)};
    const TimeContext ctx = make_time_context(model, cluster, efficiencies(), skew, 512);
    OffloadRun run;
    run.gpus = 4;
    run.stages = 16;
    run.global_batch = 16;
    run.system = system;
    return simulate_offload(ctx, cluster, run).tokens_per_second;
  }
};

}  // namespace

TEST(OffloadSim, MobiusBeatsGPipeOffloadAtEverySkew) {
  const Fixture f;
  for (double g : {0.0625, 0.3, 0.8}) {
    EXPECT_GT(f.tokens_per_second(g, OffloadSystem::kMobius),
              f.tokens_per_second(g, OffloadSystem::kGPipeOffload) * 1.3)
        << "G = " << g;
  }
}

TEST(OffloadSim, AptMoeGainOverMobiusGrowsWithSkew) {
  const Fixture f;
  double last = -1;
  for (double g : {0.3, 0.5, 0.8}) {
    const double gain = f.tokens_per_second(g, OffloadSystem::kAptMoe) /
                            f.tokens_per_second(g, OffloadSystem::kMobius) -
                        1.0;
    EXPECT_GT(gain, 0.0) << "G = " << g;
    EXPECT_GT(gain, last) << "G = " << g;
    last = gain;
  }
  EXPECT_GT(last, 0.3);  // G = 0.8: the paper's largest gains are ~33 %
}

TEST(OffloadSim, RejectsImpossibleRuns) {
  const Fixture f;
  const TimeContext ctx = make_time_context(f.model, f.cluster, efficiencies(), RoutingSkew{}, 512);
  OffloadRun run;
  run.gpus = 8;
  run.stages = 4;  // fewer stages than GPUs
  EXPECT_THROW(simulate_offload(ctx, f.cluster, run), std::invalid_argument);
}

}  // namespace moe::sim
