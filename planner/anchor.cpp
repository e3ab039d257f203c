#include "planner/anchor.h"

#include <algorithm>
#include <cmath>

#include "planner/errors.h"
#include "planner/power_limit.h"

namespace moe {

namespace {
EfficiencyCurve scaled(const EfficiencyCurve& c, double f) {
  std::vector<EfficiencyCurve::Point> points = c.points();
  for (EfficiencyCurve::Point& p : points) p.efficiency = std::min(1.5, p.efficiency * f);
  return EfficiencyCurve(std::move(points), c.reference());
}
}  // namespace

Efficiencies scale_efficiencies(const Efficiencies& e, double f, bool communication) {
  Efficiencies out = e;
  out.gemm = scaled(e.gemm, f);
  out.gemm_fp8 = scaled(e.gemm_fp8, f);
  out.gemm_fp8_block = scaled(e.gemm_fp8_block, f);
  out.gemm_mxfp8 = scaled(e.gemm_mxfp8, f);
  out.attention_core = scaled(e.attention_core, f);
  out.memory_bound = std::min(1.0, e.memory_bound * f);
  // The host issues its ops f times as fast too: a host-bound run anchors as any other.
  for (Seconds* s : out.host.all()) *s = *s / f;
  if (communication) {
    out.alltoall_intra = scaled(e.alltoall_intra, f);
    out.alltoall_inter = scaled(e.alltoall_inter, f);
    out.allgather_intra = scaled(e.allgather_intra, f);
    out.allgather_inter = scaled(e.allgather_inter, f);
    out.d2d_copy = scaled(e.d2d_copy, f);
    out.pcie_h2d = scaled(e.pcie_h2d, f);
  }
  return out;
}

AnchorFit fit_anchor(const TimeContext& ctx, const PlanChoice& plan, Seconds measured,
                     bool communication) {
  if (!(measured.value() > 0) || !std::isfinite(measured.value()))
    throw ConfigError("measured iteration: must be a positive number of seconds");
  TimeContext at = ctx;
  // The clock the power limit leaves follows the curves: slower compute is busier compute.
  PlanChoice clocked = plan;
  auto predict = [&](double f) {
    at.eff = scale_efficiencies(ctx.eff, f, communication);
    return estimate_time_at_power_limit(at, clocked).iteration;
  };
  AnchorFit fit;
  fit.before = estimate_time_at_power_limit(ctx, clocked).iteration;
  // In log space: f spans two orders of magnitude.
  double lo = std::log(0.02), hi = std::log(4.0);
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (predict(std::exp(mid)) > measured ? lo : hi) = mid;
  }
  fit.scale = std::exp(0.5 * (lo + hi));
  fit.after = predict(fit.scale);
  fit.compute_clock = clocked.compute_clock;
  fit.converged = std::abs(fit.after / measured - 1.0) < 1e-3;
  return fit;
}

}  // namespace moe
