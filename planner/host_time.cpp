#include "planner/host_time.h"

namespace moe {

LayerHostTime layer_host_time(const TimeContext& ctx, const PlanChoice& c, bool moe_layer) {
  const Efficiencies::HostCosts& h = ctx.eff.host;
  const bool graphed = c.cuda_graph != CudaGraph::kNone;
  const bool whole = c.cuda_graph == CudaGraph::kFullIteration;
  Seconds experts;
  switch (c.dispatcher) {
    case megascale::Dispatcher::kAllToAll:
      experts = h.experts_alltoall;
      break;
    case megascale::Dispatcher::kDeepEp:
      experts = h.experts_flex;
      break;
    case megascale::Dispatcher::kAllGather:
      experts = h.experts_allgather;
      break;
  }
  const Seconds attention = graphed ? Seconds(0) : h.attention;
  // The attention scope captures the router with it; the experts stay eager until the whole
  // iteration is captured.
  const Seconds router = moe_layer && !graphed ? h.router : Seconds(0);
  const Seconds mlp = whole ? Seconds(0) : moe_layer ? experts : h.dense_ffn;
  LayerHostTime out;
  out.forward = (attention + router + mlp) * 0.5;
  out.backward = out.forward;
  if (c.recompute == Recompute::kFull) {
    out.recompute = out.forward;
  } else if (c.recompute == Recompute::kSelective) {
    // The moe and mlp modules replay their block; the others (norms, activations, core
    // attention, MLA up-projections) are a few ops each.
    const uint32_t block = moe_layer ? kRecomputeMoe : kRecomputeMlp;
    if (c.recompute_modules & block) out.recompute = (router + mlp) * 0.5;
  }
  return out;
}

}  // namespace moe
