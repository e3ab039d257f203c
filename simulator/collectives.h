// Collectives expanded into flows on a FlowNetwork.
//
// A ring all-gather or reduce-scatter of `total` bytes over n ranks runs n - 1 steps; in each,
// every rank sends total / n to its successor over its own outgoing link, and the next step
// starts when the slowest transfer of the step lands (NCCL's ring is pipelined more finely;
// at step granularity it costs the same when nothing else shares the links). Without
// contention this is exactly the planner's ring_time with an efficiency of 1, which a test
// checks: the simulator adds only what needs time to resolve.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "simulator/flow_network.h"

namespace moe::sim {

// rank_links[i]: the links rank i's transfer to rank (i + 1) % n crosses.
void ring_collective(EventQueue& queue, FlowNetwork& net, std::vector<std::vector<int>> rank_links,
                     Bytes total, SimTime step_latency, std::function<void(SimTime)> done);

// Pairwise all-to-all: rank i sends per_pair bytes to every other rank j at once over
// paths[i][j]; done runs when the last byte lands.
void alltoall(EventQueue& queue, FlowNetwork& net,
              const std::vector<std::vector<std::vector<int>>>& paths, Bytes per_pair,
              SimTime latency, std::function<void(SimTime)> done);

}  // namespace moe::sim
