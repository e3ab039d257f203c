// Rows of `moeplan reproduce`: a paper's number beside moeplan's, and the runs behind the
// end-to-end ones (planner searches and simulations of the papers' experiments).
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "planner/efficiencies.h"

namespace moe::cli {

struct Row {
  std::string source, quantity;
  double paper = NAN, ours = NAN;
  std::string unit, note;
};

// MegaScale-MoE Table 3 (both systems and the speedup), Fig. 11 (weak scaling), Fig. 12 (MFU on
// H800, A100 and H20), Fig. 13 (SP+EP over TP+TP on one node for the six models of Table 2) and
// Fig. 15 / Sec. 6.2 (intra-operator overlap).
std::vector<Row> megascale_end_to_end(const std::string& root);

// The papers' systems are priced as their era ran (planner/efficiencies.h: paper_era_efficiencies).
// MoNTA Fig. 14 (the AllToAll strategy the planner picks from 8K to 256K tokens) and Fig. 11
// (the EP all-to-all's wait under communication priorities).
std::vector<Row> monta_end_to_end(const std::string& root);
// MemFine's alpha (eq. 3), which the paper does not state. Table 4 bounds it: MACT's c = 2 fits
// Model I (43.0 + 11.9 GB) only from 54.9 / 64 = 0.858, and MACT picks c = 2 for Model II too
// (11.9 GB) only below 62.4 / 64 = 0.975, where method 1's 62.4 GB is past the budget yet
// "trains": the budget is what training plans to, the GPU what it cannot pass. We take 0.9.
constexpr double kMemFineTable4Alpha = 0.9;

// MemFine Fig. 4-5: methods 1-3 over simulated iterations (OOM, TGS, MACT's chunks).
std::vector<Row> memfine_end_to_end(const std::string& root);
// APTMoE Fig. 11, 13 and 14 (simulated throughput against Mobius, per topology, over GPUs),
// Sec. III-B (the predictor's accuracy) and Sec. IV-D3 (MoE-L-8).
std::vector<Row> aptmoe_end_to_end(const std::string& root);

}  // namespace moe::cli
