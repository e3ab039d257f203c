// Efficiency curves used when no calibration file is given.
//
// Each is a documented default, not a measurement of the user's cluster: run `moeplan
// calibrate` (calibration issue) to replace them. Shapes follow MoNTA Fig. 13 (near zero at tiny
// volumes where latency dominates, a plateau at hundreds of MiB); plateaus come from
// nccl-tests doc/PERFORMANCE.md (inter-node all-to-all ~46-49 GB/s on a 50 GB/s NIC; NVLink
// ring all-gather ~360-370 GB/s busbw of 450 GB/s) and from the D2D copy measured on the lent
// H100 (~3.0 TB/s counting read + write, i.e. 1.5 TB/s of copied bytes against 3.35 TB/s HBM).
#pragma once

#include "planner/efficiency_curve.h"

namespace moe::defaults {

EfficiencyCurve alltoall_inter_node();   // r1, plateau 0.92
EfficiencyCurve allgather_intra_node();  // r2, plateau 0.80
EfficiencyCurve d2d_copy();              // r3, plateau 0.45
// Pinned host-to-device copies by bytes, against the cluster file's PCIe (or C2C) rate: the
// lent H100 (Gen5 x16, calibrate/data/h100-aptmoe-moe-s-8.json) reached 0.87 from 16 MiB up in
// either direction (0.017 at 4 KiB, 0.73 at 1 MiB). A Gen4 A100/A800 host gets 24-26 GB/s of
// its 31.5, about as much. What APTMoE's and Mobius' weight loads and gradient offloads reach.
EfficiencyCurve pcie_h2d();
// NVLink all-to-all: nccl-tests report ~340 GB/s busbw of 450 on 8xH100, plateau 0.75.
EfficiencyCurve alltoall_intra_node();
// Ring all-gather/reduce-scatter across nodes: bound by the NIC, plateau 0.90.
EfficiencyCurve allgather_inter_node();
// BF16 GEMM by FLOPs per call: 8192^3 (1.1 TFLOP) reached 798 of 989 TFLOP/s on the lent H100
// (0.81); small GEMMs fall off as wave quantization and launch overhead dominate.
EfficiencyCurve gemm();
// FP8 GEMMs by FLOPs per call against the FP8 peak: the BF16 curve times what FP8 kept of BF16's
// efficiency at the same shapes on the lent H100 and H200 (cuBLASLt, calibrate/data): one scale
// per tensor 0.72 of it at 1e10 FLOPs, 0.85 at 1e11, 0.91 at 1.1e12 (1.84x BF16's speed at
// 8192^3, not the peaks' 2x); per-block scales (DeepSeek-V3's recipe) 0.60, 0.79, 0.85 (1.69x).
EfficiencyCurve gemm_fp8();
EfficiencyCurve gemm_fp8_block();
EfficiencyCurve gemm_mxfp8();
// Fused causal attention by one call's forward FLOPs (b a/t s^2 (d_qk + d_v)), forward plus a
// backward counted as twice it, against the BF16 peak: cuDNN 9.19 through PyTorch on a lent
// H200 (calibrate/data/h200-attention.json; tools/attention_probe.py). 128-dim heads: 16 heads
// at 1K tokens 0.04, 2K 0.17, 4K 0.32, 8K 0.44, 16K-64K 0.48; 32 heads at 4K 0.39; DeepSeek-V3's
// 192/128-dim heads a little lower (64 heads at 4K 0.39, 16K 0.43). The curve before this
// measurement was a constant 0.5 (FlashAttention-2's forward on A100, Dao 2023).
EfficiencyCurve attention_core();

}  // namespace moe::defaults
