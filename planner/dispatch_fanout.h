// How far one token's routed copies travel: the expected number of distinct EP ranks and nodes
// its top-k experts sit on. A dispatcher that sends a token once per destination (DeepEP:
// once per rank inside a node, once per node over RDMA and then on over NVLink) moves that
// many copies, where NCCL's all-to-all moves one per expert.
//
// Routing is taken as uniform, as the balanced skew is: the k experts are drawn without
// replacement from the model's experts, or, with group-limited routing, from the experts of
// router_group_topk groups drawn from router_groups. Experts sit on ranks in order (rank r
// holds experts [rE/ep, (r+1)E/ep)), as Megatron places them, so a rank, a node and a router
// group are each a block of consecutive experts.
#pragma once

#include <cstdint>

#include "planner/model_spec.h"

namespace moe {

// Probability that none of a token's experts lies in an aligned block of `block` consecutive
// experts (a rank's or a node's). Group limits count when a block lies inside one group or is
// a whole number of groups; otherwise they are ignored (routing over all experts: fewer
// misses, so more copies, the conservative side).
double block_miss_probability(const ModelSpec& m, int64_t block);

struct DispatchFanout {
  double ranks = 0;  // other EP ranks a token's experts are on
  double nodes = 0;  // other nodes they are on (0 inside one node)
};

// For experts over `ep` ranks, `ranks_per_node` of them to a node. Requires the experts to
// divide over the ranks.
DispatchFanout dispatch_fanout(const ModelSpec& m, int64_t ep, int64_t ranks_per_node);

}  // namespace moe
