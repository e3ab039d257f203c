// Golden values from MegaScale-MoE (004_858b4f0d67a519a2): eq. (1)-(4), eq. (8)-(9), App. A.1
// and A.2, Sec. 3.2 and Sec. 5.
#include <gtest/gtest.h>

#include "planner/megascale.h"

namespace moe::megascale {

TEST(MegaScaleGolden, SpOverTpAttentionIsAboutOneFourth) {
  // Eq. (2) / eq. (1) = (2 + 2/m)/n = 0.3125 for n = 8, m = 4.
  EXPECT_DOUBLE_EQ(sp_attention_volume(1, 8192, 4096, 8, 4) / tp_attention_volume(1, 8192, 4096, 8),
                   0.3125);
}

TEST(MegaScaleGolden, EpOverTpFfn) {
  // Eq. (3) / eq. (4) = k/n = 0.25 for k = 2, n = 8.
  EXPECT_DOUBLE_EQ(ep_ffn_volume(1, 8192, 4096, 8, 2) / tp_ffn_volume(1, 8192, 4096, 8), 0.25);
}

TEST(MegaScaleGolden, VolumesAreTwoBshScaled) {
  // Eq. (1): 2 b s h (n-1)/n elements.
  EXPECT_DOUBLE_EQ(tp_attention_volume(2, 10, 100, 4), 2.0 * 2 * 10 * 100 * 0.75);
}

TEST(MegaScaleGolden, ComputeCommRatioEq8And9) {
  // h_ffn = 14336 (Mixtral), 400 GB/s NVLink, 989 TFLOP/s H800, n = 8: R = 9.94 (8.70 by eq. 9).
  RatioInputs in{14336, gigabytes_per_sec(400), teraflops_per_sec(989), 8, 2};
  EXPECT_NEAR(compute_comm_ratio(in), 9.94, 0.005);
  EXPECT_NEAR(compute_comm_ratio_approx(in), 8.70, 0.005);
  // Over 50 GB/s RDMA: 1.24 (1.09).
  in.bandwidth = gigabytes_per_sec(50);
  EXPECT_NEAR(compute_comm_ratio(in), 1.24, 0.005);
  EXPECT_NEAR(compute_comm_ratio_approx(in), 1.09, 0.005);
}

TEST(MegaScaleGolden, SelectiveRematerializationA2) {
  // Mixtral-8x7B: n = 8, k = 2, f = h_ffn/h = 3.5, m = 4.
  EXPECT_DOUBLE_EQ(activation_units_full(8, 2, 3.5, 4), 54.25);
  EXPECT_DOUBLE_EQ(activation_units_remat(2, 3.5, 4), 18.5);
  // In bytes: units x b s h / n x bytes per element.
  EXPECT_DOUBLE_EQ(activation_bytes(18.5, 1, 8192, 4096, 8, 2).value(), 18.5 * 8192 * 4096 / 8 * 2);
}

TEST(MegaScaleGolden, DispatcherFollowsFigure7) {
  // Mixtral on n = 8: all-gather wins once top-k > 6.
  EXPECT_EQ(choose_dispatcher(2, 8), Dispatcher::kAllToAll);
  EXPECT_EQ(choose_dispatcher(6, 8), Dispatcher::kAllToAll);
  EXPECT_EQ(choose_dispatcher(7, 8), Dispatcher::kAllGather);
  EXPECT_EQ(choose_dispatcher(8, 8), Dispatcher::kAllGather);
  // Top-k above n always favours all-gather (Sec. 3.2), whatever the efficiencies.
  EXPECT_EQ(choose_dispatcher(9, 8, 1.0), Dispatcher::kAllGather);
}

TEST(MegaScaleGolden, HierarchicalSyncA1) {
  // TP: 2P/n (d-1)/d inter-node. SP: the same inter-node plus 2P (n-1)/n intra-node.
  const SyncVolume tp = tp_attention_sync(800, 8, 4);
  const SyncVolume sp = sp_attention_sync(800, 8, 4);
  EXPECT_DOUBLE_EQ(tp.inter_node, 2.0 * 800 / 8 * 0.75);
  EXPECT_DOUBLE_EQ(sp.inter_node, tp.inter_node);
  EXPECT_DOUBLE_EQ(sp.intra_node, 2.0 * 800 * 7 / 8);
  // Eq. (10) for H100, 450 GB/s NVLink over a 50 GB/s NIC (ratio 9), n = 8:
  // (1/n) x 9 x n(d-1)/(d(n-1)) = 9 (d-1)/(d (n-1)).
  EXPECT_NEAR(hierarchical_sync_latency_ratio(8, 1000, 9.0), 9.0 * 999 / (1000 * 7), 1e-12);
}

TEST(MegaScaleGolden, CompressionHalvesTheBytes) {
  // Sec. 5: BF16 gradients over all-to-all move half of an FP32 reduce-scatter.
  EXPECT_DOUBLE_EQ(dp_gradient_bytes(1e9, 4, true) / dp_gradient_bytes(1e9, 4, false), 0.5);
  // FP8 TP all-to-all in place of the BF16 reduce-scatter: half again.
  EXPECT_DOUBLE_EQ(tp_reduce_scatter_bytes(1e6, 8, true) / tp_reduce_scatter_bytes(1e6, 8, false),
                   0.5);
}

}  // namespace moe::megascale
