// MoNTA (003_4e1468090f85ebf1): network-traffic-aware AllToAll optimization for MoE with TP.
//
// With tensor parallelism every TP rank holds the same tokens, so the expert AllToAll can send
// only 1/t of them across nodes and rebuild the rest with an intra-node AllGather (O1, eq. 11).
// O2 pipelines the inter-node AllToAll of chunk j+1 with the AllGather of chunk j (Algorithm 1);
// O3 also pipelines the AllGather with the D2D copy that restores token order (Algorithm 2).
// Per-chunk costs are eq. (8)-(10); efficiencies r1, r2, r3 come from size -> efficiency curves.
//
// Decisions:
// - Algorithms 1 and 2, line 19, assign T = T_min; the intent is to keep the best (N, T) seen,
//   which is what we do.
// - The per-chunk loop stops when a chunk falls below I_minimal or at max_chunks.
// - Algorithm 3 picks the fastest of O1, O2, O3; ties go to the simpler strategy.
// - Table 3's ZeRO rows and Table 4's activation rows are garbled in the text. We use the
//   standard forms they reduce to (see weight_bytes and activation_bytes).
#pragma once

#include <cstdint>
#include <string>

#include "planner/efficiency_curve.h"
#include "planner/units.h"

namespace moe::monta {

// Eq. (3): I = b s h BPE.
Bytes alltoall_volume(int64_t micro_batch, int64_t seq_len, int64_t hidden,
                      double bytes_per_element);

struct Links {
  BytesPerSec inter_alltoall;   // B1
  BytesPerSec intra_allgather;  // B2
  BytesPerSec d2d_copy;         // B3
};

struct Curves {
  EfficiencyCurve alltoall;   // r1, by AllToAll chunk volume
  EfficiencyCurve allgather;  // r2, by AllGather chunk volume
  EfficiencyCurve d2d;        // r3, by copy volume
};

struct Problem {
  Bytes volume;    // I
  int64_t tp = 1;  // t
  int64_t ep = 1;  // e
  Links links;
  Curves curves;
  Bytes min_chunk = mebibytes(1);  // I_minimal
  int64_t max_chunks = 64;
  // Fixed cost each pipelined chunk adds (stream events, kernel launches, hosts dispatching out
  // of step): MoNTA's Discussion blames these for O2/O3 losing to O1 at 8K. Zero reproduces the
  // theoretical Table 8; the planner sets Efficiencies::pipeline_chunk_overhead.
  Seconds chunk_overhead;
};

struct ChunkCosts {
  Seconds alltoall;   // AA_j, eq. (8)
  Seconds allgather;  // AG_j, eq. (9)
  Seconds d2d;        // D2D_j, eq. (10)
  double r1 = 0, r2 = 0, r3 = 0;
  Bytes alltoall_bytes, allgather_bytes;
};

// Baseline AllToAll: I (e-1)/e / (B1 r1(I)).
Seconds baseline_time(const Problem& p);
// Eq. (11): I/t (e-1)/e / (B1 r1(I/t)) + I (t-1)/t / (B2 r2(I)).
Seconds o1_time(const Problem& p);
// Eq. (8)-(10) for N chunks.
ChunkCosts chunk_costs(const Problem& p, int64_t chunks);
// Algorithm 1, lines 13-17, for N chunks.
Seconds o2_time(const ChunkCosts& c, int64_t chunks);
// Algorithm 2, lines 13-17, for N chunks.
Seconds o3_time(const ChunkCosts& c, int64_t chunks);

struct ChunkChoice {
  int64_t chunks = 0;
  Seconds time;
  ChunkCosts per_chunk;
};
enum class Pipelining { kO2, kO3 };
// Algorithms 1/2 with the defect fixed: the best N and its T.
ChunkChoice best_chunking(const Problem& p, Pipelining kind);
// The same strategy at a fixed N (for tables that fix N, like MoNTA Table 8).
ChunkChoice at_chunks(const Problem& p, Pipelining kind, int64_t chunks);

enum class Strategy { kBaseline, kO1, kO2, kO3 };
const char* strategy_name(Strategy s);
// One AllToAll under strategy `s` (O2 and O3 at N = `chunks`; O1 sends whole, N = 1) and the
// pieces its streams run: N all-to-alls across the nodes (each with `overhead`, the per-chunk
// cost when N > 1), N all-gathers inside the node and, for O2 and O3, N D2D copies. The
// baseline has no pieces (per_chunk left zero).
struct StrategyRun {
  int64_t chunks = 1;
  ChunkCosts per_chunk;
  Seconds overhead;
  Seconds time;
};
StrategyRun run_strategy(const Problem& p, Strategy s, int64_t chunks);
// Algorithm 3.
Strategy select_strategy(Seconds o1, Seconds o2, Seconds o3);

// Eq. (12): AA_j / AG_j = (e-1) B2 r2 / (e (t-1) B1 r1).
double alltoall_to_allgather_ratio(int64_t tp, int64_t ep, double bw_ratio_b2_over_b1, double r1,
                                   double r2);
// Eq. (13): the O3 limit T_O3 / T_base as N -> infinity when AllGather dominates: the per-chunk
// AllToAll vanishes and what remains is the whole AllGather, I (t-1)/t / (B2 r2), over the
// baseline I (e-1)/e / (B1 r1).
double o3_limit_ratio(int64_t tp, int64_t ep, double bw_ratio_b2_over_b1, double r1, double r2);

// Cluster expansion for long context (Sec. 5, Fig. 12): with TP inside the node, CP and EP
// groups both cross nodes. Horizontal: orthogonal groups, every (cp, ep) pair reachable, so the
// scale-out switch network must span cp x ep endpoints; it keeps each EP group's micro-batch
// whole when the sequence is shorter than one EP group handles (cp < ep). Vertical: CP and EP
// in the same dimension, network scale max(cp, ep); the rule for cp >= ep, and the fallback
// when the switch is too small for cp x ep.
enum class CpExpansion { kNone, kHorizontal, kVertical };
const char* cp_expansion_name(CpExpansion e);
struct CpExpansionChoice {
  CpExpansion expansion = CpExpansion::kNone;
  int64_t network_scale = 0;  // scale-out endpoints one CP x EP block needs
  bool fits_switch = true;    // network_scale <= radix (or the radix is unknown)
  std::string reason;
};
// switch_radix: ports of the cluster's scale-out switch tier; 0 when the cluster file omits it.
CpExpansionChoice choose_cp_expansion(int64_t cp, int64_t ep, int64_t switch_radix);

// Table 3: weight and optimizer bytes per GPU. The text's ZeRO rows are garbled; we use the
// forms they stand for: 16 bytes per parameter (2 weight + 2 gradient + 12 fp32 optimizer) over
// p t (non-MoE) or p t e (MoE), with ZeRO-1 sharding the 12 optimizer bytes, ZeRO-2 also the 2
// gradient bytes, ZeRO-3 all 16, over the data-parallel degree d.
enum class Zero { kNone = 0, kStage1 = 1, kStage2 = 2, kStage3 = 3 };
Bytes weight_bytes(double params, int64_t model_parallel, int64_t data_parallel, Zero zero);

// Table 4: activation bytes per GPU for l layers. The text prints 59a/h where eq. (2) and
// Megatron have 5as/h, and its TP-without-SP row is garbled; we use
//   none:        b s h l (13 + 21k + 5as/h)
//   TP+EP:       b s h l (5 + 5k + (8 + 16k)/t + 5as/(ht))  (norm/dropout parts replicated)
//   TP+EP+SP:    b s h l ((13 + 21k)/t + 5as/(ht))
//   +selective:  b s h l (13 + 21k)/t
//   +full:       2 b s h l / t
enum class ActivationConfig { kNoParallelism, kTpEp, kTpEpSp, kTpEpSpSelective, kTpEpSpFull };
const char* activation_config_name(ActivationConfig c);
Bytes activation_bytes(ActivationConfig c, int64_t b, int64_t s, int64_t h, int64_t a,
                       int64_t layers, int64_t top_k, int64_t tp);

}  // namespace moe::monta
