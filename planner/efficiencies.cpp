#include "planner/efficiencies.h"

#include "planner/default_efficiency.h"

namespace moe {

Efficiencies efficiencies(const std::map<std::string, EfficiencyCurve>& curves) {
  auto pick = [&](const char* name, EfficiencyCurve fallback) {
    auto it = curves.find(name);
    return it == curves.end() ? fallback : it->second;
  };
  Efficiencies e;
  e.gemm = pick("gemm", defaults::gemm());
  e.alltoall_intra = pick("alltoall_intra", defaults::alltoall_intra_node());
  e.alltoall_inter = pick("alltoall_inter", defaults::alltoall_inter_node());
  e.allgather_intra = pick("allgather_intra", defaults::allgather_intra_node());
  e.allgather_inter = pick("allgather_inter", defaults::allgather_inter_node());
  e.d2d_copy = pick("d2d_copy", defaults::d2d_copy());
  return e;
}

}  // namespace moe
