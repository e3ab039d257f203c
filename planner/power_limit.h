// What a GPU's power limit leaves of its compute clock over a training step.
//
// On a lent H100 (700 W limit; tools/power_probe.py, calibrate/data/h100-runs/power-probe.json)
// an 8192^3 BF16 GEMM loop that ran a share of every 20 ms drew 347 W at 25 % and 529 W at 50 %
// with the clock at 1,980 MHz: 165 W + 728 W x share. At 77 % it reached the limit (697 W) and
// the clock fell to 1,755 MHz, the GEMMs to 0.98 of their cool rate; all the time, 1,380 MHz and
// 0.87. GEMMs half the time and element-wise adds in the rest held it at the limit too (0.89):
// what draws is the compute stream being busy, not GEMMs alone. The same GPU's GEMM sweep, each
// size held 2 s (calibrate/data/h100-sustained.json), kept 0.77-0.84 of the cool curve from 6e10
// to 2e12 FLOPs, and a Mixtral layer's GEMMs run back to back by `execute` 0.85-0.93
// (calibrate/data/h100-runs/execute-*): the H100 and H800 cluster files take 0.85 at b = 1.
//
// The model (GpuPower's fields): a step whose compute stream would be busy a share b of it at
// full clock draws idle + (busy - idle) b. Up to the limit the clock holds; past it the clock
// falls until the dynamic power is back within the limit, the dynamic power going as the compute
// rate to a power k (voltage falls with the clock):
//   rate(b) = min(1, ((limit - idle) / ((busy - idle) b))^(1/k))
//   k = ln((rated - idle) / (busy - idle)) / ln(sustained_rate)
// so that a stream busy all the time under the limit the rate was measured at (rated) keeps
// sustained_rate: the H100's 700 W leaves 0.735 of the 728 W, and 0.85 of the rate, k = 1.9.
// A lower cap (whatif's power-limit-W) slows it further: 500 W leaves 0.66 at b = 1, and the
// clock falls from b = 0.46. Between the knee and b = 1 the curve is within 0.01 of a straight
// line. The rate divides compute-bound work (GEMMs and fused attention, their FLOPs over the
// peak); memory-bound work runs at HBM's clock and keeps its time. The probe's shares were
// counted at the cool rate, so b is read at full clock: the rate needs no fixed point, and the
// iteration at full clock bounds the one at the rate from below (the search prunes with it).
#pragma once

#include <optional>
#include <vector>

#include "planner/cluster_spec.h"
#include "planner/plan.h"
#include "planner/time_model.h"

namespace moe {

// A power cap below (or above) the board's rated limit: `limit` moves, the curve (k) stays.
// Throws ConfigError for a GPU with no power entry, or a cap not above its idle draw.
void cap_power_limit(GpuSpec& gpu, double watts);

// The board as a plan runs it: its limit lowered to the plan's own cap (PlanChoice::power_cap_w)
// where that is below it, the curve (k) kept.
GpuPower power_under_cap(const GpuPower& board, const PlanChoice& c);

// b_knee = (limit - idle) / (busy - idle): the busy share at which the board reaches its limit
// at full clock (0.735 on the H100 files).
double busy_at_limit(const GpuPower& p);
// rate(b) above; 1 for a GPU whose file gives no power limit.
double clock_under_power_limit(const GpuPower& p, double busy);

// The board's mean draw over a step whose compute stream runs `busy` of it at `clock`: the
// limit where the clock fell, else idle + (busy - idle) x busy; 0 without a power entry. The
// GPU board alone (no host, network or cooling).
double gpu_power_w(const GpuPower& p, double busy, double clock);
// What a board draws whose compute stream was busy `busy_at_clock` of a step at `clock` (as a
// simulation measures it): computing at rate r it draws r^k of the dynamic power, so
// idle + (busy - idle) x busy_at_clock x r^k, up to the limit. At clock 1, gpu_power_w's; on a
// stage busy all the time at the clock its limit leaves, the limit.
double stage_power_w(const GpuPower& p, double busy_at_clock, double clock);
// A scored plan's boards: what each draws (gpu_power_w at the plan's busy share and clock, under
// its cap) and the tokens the plan trains a joule of what all of them draw; zeros without a
// power entry.
struct BoardEnergy {
  double watts = 0, tokens_per_joule = 0;
};
BoardEnergy board_energy(const GpuPower& p, const Plan& plan);

// The share of the iteration the busiest stage's compute stream runs: its compute, recompute and
// the compute EP's kernels slowed by holding SMs, over the iteration.
double compute_busy_share(const TimeBreakdown& t);

// `c` priced at full clock gave `full_clock`; sets c.compute_clock from its busy share and, where
// that is under 1, prices c again at it. Nothing when the iteration at the clock reaches `bound`
// (the search's); otherwise the time at c's clock. Offload plans keep clock 1 (their GPUs wait on
// PCIe and the CPU).
std::optional<TimeBreakdown> at_power_limit(const TimeContext& ctx, PlanChoice& c,
                                            const TimeBreakdown& full_clock, TimeContext& scratch,
                                            Seconds bound);
// `c` priced at full clock and then as at_power_limit does, with no bound: what a single plan's
// evaluation (a what-if, an anchor fit) reads, its c.compute_clock set.
TimeBreakdown estimate_time_at_power_limit(const TimeContext& ctx, PlanChoice& c);

// The caps the energy objective weighs below a board's limit: 95 % of it down to 50 % in steps
// of 5 %, whole watts, those above its idle draw. At 50 % an H100 (k = 1.9) busy all the time
// keeps 0.48 of its rate, where its joules per token bottom out: the dynamic energy of a FLOP
// falls as rate^(k - 1) while the idle draw runs longer, so the least energy is at
// rate^k = idle / ((k - 1) x (busy - idle)), 348 W. Lower caps only cost time and energy.
// The draw counts the compute stream alone: communication kernels (their SMs and HBM traffic)
// were not measured, so a step whose compute hides behind communication draws more than this
// model says, and a cap slows it more than the model's few percent; and the curve below the
// rated limit is extrapolated from measurements at it.
std::vector<double> energy_power_caps(const GpuPower& board);

// One cap on a plan's boards, priced: what `plan --objective energy` tabulates for its best plan.
struct CapPoint {
  double cap_w = 0;  // the board's limit for the first point
  double compute_clock = 1;
  Seconds iteration;
  double tokens_per_second = 0, watts = 0, tokens_per_joule = 0;
};
// The choice `c` under the board's own limit and under each of `caps` (an iteration of `tokens`).
std::vector<CapPoint> energy_by_cap(const TimeContext& ctx, const PlanChoice& c, double tokens,
                                    const std::vector<double>& caps);

// The energy objective's cap for a choice `c` (cap 0) priced at full clock (`full_clock`), whose
// boards draw `joules` a token at their own limit over an iteration of `tokens`: each cap of
// `caps`, highest first, that slows the clock is priced while the joules per token keep falling
// and the time stays within `time_limit` (0: none; each pricing is bounded by it and by the time
// that would draw as many joules as the best so far). Sets
// c.power_cap_w and c.compute_clock to the best cap's and returns its time; nothing when no cap
// draws fewer joules per token than the board's limit.
std::optional<TimeBreakdown> at_energy_power_cap(const TimeContext& ctx, PlanChoice& c,
                                                 const TimeBreakdown& full_clock, double joules,
                                                 double tokens, const std::vector<double>& caps,
                                                 Seconds time_limit, TimeContext& scratch);

}  // namespace moe
