// APTMoE (002_a33f16d749db619a): CPU/GPU computation affinity for offloaded MoE fine-tuning.
//
// Experts that few tokens visit are cheaper to run on the CPU where their weights already live
// than to load over PCIe; popular experts are worth loading. Eq. (2) measures skew as
// G = (1/L) sum_l sum_e (p_l^e)^2 (1/E when uniform, 1 when one expert takes every token).
// Eq. (1) decides how many experts to load: rank experts by intensity, load from the most
// popular down, and stop once
//     R = sum_{low..high} Comp_cpu / (Load_MHA + Load_Gate + sum_{high..low} Load_expert) <= 1,
// i.e. once the CPU work left over no longer exceeds the loading it would hide behind.
//
// Decision: the paper states the rule as a threshold without the loop. We load greedily, one
// expert at a time, while R > 1 before the load; the trace records R after every step so the
// CLI can show where it crossed 1. Forward uses predicted popularity, backward the actual one
// (Sec. III-C.5) with backward CPU time twice forward (two GEMMs per forward GEMM).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/efficiency_curve.h"
#include "planner/units.h"

namespace moe::aptmoe {

// Eq. (2) over a popularity matrix [layer][expert] of token proportions (rows sum to 1).
double popularity_metric(const std::vector<std::vector<double>>& proportions);
// Proportions of E experts with a Zipf-like skew (p_e ~ 1/(e+1)^z) chosen so that G = target
// (bisection on z); target must be in [1/E, 1].
std::vector<double> proportions_for_g(int64_t experts, double target_g);

struct ExpertCost {
  int expert = 0;
  double tokens = 0;  // tokens routed to it over the micro-batches considered
  Seconds cpu;        // run on the CPU where the weights are
  Seconds gpu;        // run on the GPU once loaded
  Seconds load;       // PCIe load of its weights
};

enum class Pass { kForward, kBackward };

struct Allocation {
  std::vector<ExpertCost> experts;  // in decreasing intensity
  std::vector<bool> on_gpu;         // parallel to experts
  std::vector<double> r_trace;      // R before the first load and after each load
  Seconds cpu_time;                 // sum over experts left on the CPU
  Seconds load_time;                // MHA + gate + loaded experts
  double final_r = 0;
};

struct Fixed {
  Seconds load_mha;
  Seconds load_gate;
};

// Eq. (1) with the R = 1 stopping rule.
Allocation allocate(std::vector<ExpertCost> experts, const Fixed& fixed);

// Cost of one expert at `tokens` tokens: FLOPs of a plain or gated FFN (2 x weights x tokens,
// x3 for the backward pass) over the given rates, and its weights over the PCIe rate.
struct Rates {
  FlopsPerSec cpu;
  FlopsPerSec gpu;
  BytesPerSec pcie;
  // Efficiency by work size (FLOPs) or transfer size (bytes) from a calibration file (the
  // paper's profiler tables); unset means the rates are reached at every size.
  const EfficiencyCurve* cpu_efficiency = nullptr;
  const EfficiencyCurve* gpu_efficiency = nullptr;
  const EfficiencyCurve* pcie_efficiency = nullptr;
  // The tokens run as this many calls (micro-batches), each over its share: the curves are read
  // at one call's forward FLOPs, and the GPU's times `gpu_curve_scale` where its curve is
  // another precision's (a BF16 curve read for FP32 GEMMs at their BF16-equivalent size, so
  // that a small GEMM keeps the same launch floor at a sixteenth of the peak).
  double calls = 1;
  double gpu_curve_scale = 1;
  // The CPU's memory bandwidth, its share of the socket's. Without a measured CPU curve an
  // expert's call on the CPU takes at least the time to stream its weights (three times in
  // backward: read for the input gradient, the weight gradient read and written): a call of
  // few tokens is memory-bound (MoE-S-64's 33.5 MB FP32 experts at 102 GB/s: 0.33 ms, as long
  // as 12 tokens' FLOPs at 600 GFLOP/s). A measured curve has that in it already.
  BytesPerSec cpu_memory{};
  // A copy of `bytes` over PCIe at the efficiency its size reaches.
  Seconds load_time(Bytes bytes) const {
    if (!(bytes.value() > 0)) return Seconds(0);
    return bytes / (pcie * (pcie_efficiency ? pcie_efficiency->at(bytes.value()) : 1.0));
  }
};
ExpertCost expert_cost(int expert, double tokens, double expert_params, double bytes_per_param,
                       const Rates& rates, Pass pass);

}  // namespace moe::aptmoe
