// The efficiency curves the time model reads, by name, with documented defaults.
//
// Names match the curves a calibration file carries: gemm (by FLOPs of one GEMM), alltoall_intra,
// alltoall_inter, allgather_intra, allgather_inter, d2d_copy (by bytes). Two scalars complete
// them: fused attention's share of peak, and the share of HBM bandwidth memory-bound operators
// (norms, permutation, activation functions) reach.
#pragma once

#include <map>
#include <string>

#include "planner/efficiency_curve.h"
#include "planner/units.h"

namespace moe {

struct Efficiencies {
  EfficiencyCurve gemm;
  EfficiencyCurve alltoall_intra, alltoall_inter;
  EfficiencyCurve allgather_intra, allgather_inter;
  EfficiencyCurve d2d_copy;
  // FlashAttention-2 on A100/H100 reaches 50-73 % of peak forward (Dao 2023, Fig. 4); we take
  // the lower end since backward is slower.
  double attention_core = 0.5;
  // Element-wise kernels reach ~70-80 % of HBM bandwidth; MegaScale-MoE Sec. 6.1 names them the
  // reason MFU falls on faster GPUs.
  double memory_bound = 0.7;
  // Per chunk of a MoNTA O2/O3 pipeline (see monta::Problem::chunk_overhead). 150 us puts the
  // 8K-sequence crossover where MoNTA Fig. 14 measured it (O1 best at <= 16K); calibrate it with
  // the pipelined AllToAll on the user's cluster.
  Seconds pipeline_chunk_overhead = Seconds(150e-6);
  // Intra-operator overlap (MegaScale-MoE Sec. 4.2) gives "a few SMs" to communication: 8 of an
  // H800's 132, so a fused GEMM runs 6 % slower while its communication is in flight; a fused
  // pair pays one tile wave of the shorter side before the two overlap (tiles: waves of the
  // fused kernel).
  double intra_overlap_comm_sm_share = 8.0 / 132.0;
  double intra_overlap_tiles = 8;
};

// Defaults: planner/default_efficiency.h; any named curve in `curves` replaces its default.
Efficiencies efficiencies(const std::map<std::string, EfficiencyCurve>& curves = {});

}  // namespace moe
