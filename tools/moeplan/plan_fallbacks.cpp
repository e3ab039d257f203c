#include "tools/moeplan/plan_fallbacks.h"

#include <fmt/format.h>

#include <cmath>

#include "planner/errors.h"
#include "planner/memory_model.h"
#include "planner/offload.h"

namespace moe::cli {

PlanOutcome search_with_fallbacks(const TimeContext& ctx, const ClusterSpec& c,
                                  const SearchRequest& req, const PlanSearch& search,
                                  SearchResult first) {
  // Nothing fits in GPU memory as it is: Megatron's activation offloading first, which runs as
  // the arguments say, where a candidate needs it (unless the user fixed the modules). For MoE
  // models APTMoE's plans come next, which keep the weights in host memory; the optimizer's CPU
  // offload only where those leave nothing (--optimizer-offload asks for it directly).
  PlanOutcome out;
  SearchResult& r = out.result;
  r = std::move(first);
  if (r.ranked.empty() && !req.search_offload && req.offload_modules == 0) {
    SearchRequest again = req;
    again.search_offload = true;
    SearchResult a = search(again);
    out.tried_activations = true;
    if (!a.ranked.empty()) {
      a.stats.seconds += r.stats.seconds;
      r = std::move(a);
      out.activations_offloaded = true;
    } else if (a.closest && (!r.closest || a.closest->needed < r.closest->needed)) {
      r.closest = a.closest;  // what offloading activations too leaves short
    }
  }
  // Nothing fits in GPU memory as it is: two ways remain. Megatron's optimizer CPU offload (all
  // of the states, activations offloaded where needed too) keeps the weights on the GPUs;
  // APTMoE's plans keep them in host memory and run cold experts on the CPU. The faster leads
  // and the other gets a line below the plans.
  if (r.ranked.empty()) {
    std::vector<Plan> aptmoe = offload_plans(ctx, c, req);
    std::optional<SearchResult> cpu_optimizer;
    if (req.optimizer_offload == 0 && !c.node.cpus.empty()) {
      SearchRequest again = req;
      again.optimizer_offload = 1.0;
      again.search_offload = req.offload_modules == 0;
      cpu_optimizer = search(again);
      if (cpu_optimizer->ranked.empty()) cpu_optimizer.reset();
    }
    const bool cpu_optimizer_leads =
        cpu_optimizer &&
        (aptmoe.empty() ||
         (req.objective == Objective::kMemory
              ? cpu_optimizer->ranked.front().score.peak_bytes < aptmoe.front().score.peak_bytes
              : cpu_optimizer->ranked.front().score.time.iteration <
                    aptmoe.front().score.time.iteration));
    if (cpu_optimizer_leads) {
      cpu_optimizer->stats.seconds += r.stats.seconds;
      r = std::move(*cpu_optimizer);
      out.optimizer_offloaded = true;
      if (!aptmoe.empty()) out.aptmoe_alternative = aptmoe.front();
    } else if (!aptmoe.empty()) {
      r.ranked = std::move(aptmoe);
      out.aptmoe_offloaded = true;
      if (cpu_optimizer) out.megatron_alternative = cpu_optimizer->ranked.front();
    }
  }
  return out;
}

void throw_no_fit(const TimeContext& ctx, const ClusterSpec& c, const SearchRequest& req,
                  const PlanOutcome& outcome, const std::string& free_fits) {
  const SearchResult& r = outcome.result;
  const ModelSpec& m = *ctx.model;
  if (!r.closest) throw NoFitError("nothing fits and no candidate was scored");
  const NoFit& n = *r.closest;
  // How many such GPUs the weights, gradients and optimizer states alone would fill, sharded
  // over all of them (ZeRO-3), and with the optimizer's states on the host: a floor on the
  // cluster to ask for.
  PlanChoice sharded;
  sharded.precision = req.precision;
  sharded.adam = req.adam;
  // The leaner gradients where the search may pick them (a BF16 buffer, 2 bytes a parameter).
  sharded.dp_bf16_compression = req.dp_bf16_compression.value_or(true);
  const Bytes room = c.node.gpu.hbm_capacity * req.alpha;
  const memfine::StaticBytesPerParam b =
      memory_request(ctx, sharded, c.node.gpu.hbm_capacity, req.alpha).static_bytes;
  auto gpus_for = [&](double bytes_per_param) {
    return std::ceil(ctx.params.total() * bytes_per_param / room.value());
  };
  const double all = gpus_for(b.per_param()), offloaded = gpus_for(b.param + b.grad);
  const std::string floor =
      all > static_cast<double>(req.num_gpus)
          ? fmt::format(
                "; its weights, gradients and optimizer states alone ({:.0f} bytes a "
                "parameter) fill {:.0f} such GPUs sharded over all of them ({:.0f} with "
                "the optimizer's states in host memory)",
                b.per_param(), all, offloaded)
          : std::string();
  throw NoFitError(fmt::format(
      "nothing fits: needs {:.1f} GB on stage {} at {} (binding: {}{}); {} has {:.1f} GB{}{}{}",
      n.needed.value() / 1e9, n.stage, n.layout, n.binding,
      outcome.tried_activations ? ", activations offloaded where Megatron can" : "", n.holder,
      n.capacity.value() / 1e9,
      m.is_moe() ? " (and no APTMoE offload plan fits GPU and host memory)" : "", floor,
      free_fits.empty() ? "" : "; " + free_fits));
}

}  // namespace moe::cli
