// MegaScale-MoE (004_858b4f0d67a519a2): communication volumes and the compute/communication
// ratio behind its parallelism choices.
//
// Volumes are per GPU in elements of the activation (multiply by bytes per element): eq. (1) TP
// attention, eq. (2) Ulysses SP attention, eq. (3) EP FFN, eq. (4) TP FFN; the all-to-all vs
// all-gather/reduce-scatter dispatcher choice (Sec. 3.2); R = comp_time / comm_time, eq. (5)-(9);
// selective activation rematerialization (App. A.2); hierarchical parameter sync (App. A.1 and
// eq. 10); BF16 DP gradient compression and FP8 TP communication (Sec. 5).
#pragma once

#include <cstdint>

#include "planner/units.h"

namespace moe::megascale {

// Eq. (1): 2 b s h (n-1)/n.
double tp_attention_volume(int64_t b, int64_t s, int64_t h, int64_t n);
// Eq. (2): 2 b s h (n-1)/n x (2 + 2/m)/n, m = query heads / KV heads.
double sp_attention_volume(int64_t b, int64_t s, int64_t h, int64_t n, double m);
// Eq. (3): 2k/n x b s h (n-1)/n.
double ep_ffn_volume(int64_t b, int64_t s, int64_t h, int64_t n, int64_t top_k);
// Eq. (4): 2 b s h (n-1)/n.
double tp_ffn_volume(int64_t b, int64_t s, int64_t h, int64_t n);

// The MoE token dispatcher. kDeepEp is Megatron-Core's flex dispatcher on DeepEP (or HybridEP):
// a token goes once to each rank, and across nodes once to each node, that holds one of its
// experts (planner/dispatch_fanout.h), where the all-to-all sends one copy per expert. Not a
// MegaScale-MoE mechanism; it lives here beside the two it is chosen against.
enum class Dispatcher { kAllToAll, kAllGather, kDeepEp };
const char* dispatcher_name(Dispatcher d);
// Whether the time model prices `d` for experts over `ep` ranks split `etp` ways: all-to-all
// everywhere; all-gather (Sec. 3.2: gather the EP group's tokens, reduce-scatter the outputs)
// with etp = 1, or ep = 1 where experts split like TP gather around a ring either way; DeepEP
// with etp = 1 (its buffers hold whole tokens for whole experts). Expert TP across EP takes
// MoNTA's all-to-all.
bool dispatcher_priced(Dispatcher d, int64_t ep, int64_t etp);
// Where `d` is priced, in words for an error ("with etp = 1").
const char* dispatcher_priced_where(Dispatcher d);
// All-gather + reduce-scatter moves the TP volume, eq. (4); all-to-all moves eq. (3) but runs at
// a lower efficiency. Choose the one with the lower time: all-to-all iff
// (2k/n) / eff_a2a < 2 / eff_ag. MegaScale Fig. 7 (Mixtral, n = 8) crosses over at top-k > 6,
// i.e. eff_a2a / eff_ag = 6/8; that is the default ratio.
constexpr double kAllToAllOverAllGatherEfficiency = 0.75;  // MegaScale-MoE Fig. 7
Dispatcher choose_dispatcher(int64_t top_k, int64_t n,
                             double a2a_over_ag_efficiency = kAllToAllOverAllGatherEfficiency);

// Eq. (5)-(8). bytes_per_element converts eq. (5)'s element count to bytes on the wire.
struct RatioInputs {
  int64_t ffn_hidden = 0;  // h_ffn
  BytesPerSec bandwidth;
  FlopsPerSec peak;
  int64_t n = 8;
  double bytes_per_element = 2;
};
// Eq. (8): 3/2 h_ffn bandwidth/peak n/(n-1), with bandwidth in elements per second.
double compute_comm_ratio(const RatioInputs& in);
// Eq. (9): the same without n/(n-1).
double compute_comm_ratio_approx(const RatioInputs& in);

// App. A.2: activation of one MoE layer in units of b s h / n (f = h_ffn / h).
double activation_units_full(int64_t n, int64_t top_k, double f, double m);  // 2n+2k+3kf+12+5/m
double activation_units_remat(int64_t top_k, double f, double m);            // 2kf+4+2/m
Bytes activation_bytes(double units, int64_t b, int64_t s, int64_t h, int64_t n,
                       double bytes_per_element);

// App. A.1: gradient/parameter synchronization volumes of attention weights P (elements).
struct SyncVolume {
  double inter_node = 0;  // per GPU
  double intra_node = 0;
};
SyncVolume tp_attention_sync(double params, int64_t n, int64_t d);  // 2P/n (d-1)/d inter
SyncVolume sp_attention_sync(double params, int64_t n, int64_t d);  // + 2P (n-1)/n intra
// Eq. (10): inter-node latency over intra-node latency of the hierarchical SP sync.
double hierarchical_sync_latency_ratio(int64_t n, int64_t d, double intra_over_inter_bandwidth);

// Sec. 5: DP gradient reduce-scatter in FP32 vs BF16 all-to-all of the same shards (bytes per
// GPU for `params` gradients over d ranks); the compressed form moves half.
Bytes dp_gradient_bytes(double params, int64_t d, bool bf16_compression);
// Sec. 5: FP8 TP communication: the BF16 reduce-scatter (forward) becomes an FP8 all-to-all
// and the backward all-gather is FP8; bytes per GPU for `elements` of activation over n ranks.
Bytes tp_reduce_scatter_bytes(double elements, int64_t n, bool fp8);

}  // namespace moe::megascale
