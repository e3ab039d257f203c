#include "planner/dispatch_fanout.h"

#include <algorithm>
#include <stdexcept>

namespace moe {

namespace {

// P(none of k draws without replacement from n items falls among the b marked ones).
double none_drawn(int64_t n, int64_t b, int64_t k) {
  if (b <= 0) return 1.0;
  if (n - b < k) return 0.0;
  double p = 1.0;
  for (int64_t i = 0; i < k; ++i) p *= static_cast<double>(n - b - i) / static_cast<double>(n - i);
  return p;
}

// Binomial coefficient as a double (small arguments: group counts).
double choose(int64_t n, int64_t r) {
  if (r < 0 || r > n) return 0.0;
  double c = 1.0;
  for (int64_t i = 1; i <= r; ++i) c *= static_cast<double>(n - r + i) / static_cast<double>(i);
  return c;
}

}  // namespace

double block_miss_probability(const ModelSpec& m, int64_t block) {
  const int64_t e = m.num_routed_experts, k = m.top_k;
  const int64_t groups = m.router_groups, picked = m.router_group_topk;
  if (groups <= 1 || picked >= groups) return none_drawn(e, block, k);
  const int64_t group = e / groups;
  const int64_t pool = picked * group;  // the experts of the chosen groups
  if (block <= group && group % block == 0) {
    // Inside one group: missed when its group is not chosen, or chosen and not drawn.
    const double chosen = static_cast<double>(picked) / static_cast<double>(groups);
    return (1.0 - chosen) + chosen * none_drawn(pool, block, k);
  }
  if (block > group && block % group == 0) {
    // Whole groups: j of its s groups chosen (hypergeometric), then none drawn from them.
    const int64_t s = block / group;
    double miss = 0;
    for (int64_t j = 0; j <= std::min(s, picked); ++j) {
      const double p = choose(s, j) * choose(groups - s, picked - j) / choose(groups, picked);
      miss += p * none_drawn(pool, j * group, k);
    }
    return miss;
  }
  return none_drawn(e, block, k);
}

DispatchFanout dispatch_fanout(const ModelSpec& m, int64_t ep, int64_t ranks_per_node) {
  if (ep < 1 || m.num_routed_experts % ep != 0)
    throw std::invalid_argument("dispatch_fanout: experts do not divide over the EP ranks");
  const int64_t per_rank = m.num_routed_experts / ep;
  const int64_t local = std::clamp<int64_t>(ranks_per_node, 1, ep);
  DispatchFanout f;
  f.ranks = static_cast<double>(ep - 1) * (1.0 - block_miss_probability(m, per_rank));
  const int64_t nodes = (ep + local - 1) / local;  // a partial last node counts as one
  if (nodes > 1)
    f.nodes = static_cast<double>(nodes - 1) * (1.0 - block_miss_probability(m, per_rank * local));
  return f;
}

}  // namespace moe
