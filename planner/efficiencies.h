// The efficiency curves the time model reads, by name, with documented defaults.
//
// Names match the curves a calibration file carries: gemm (BF16, by FLOPs of one GEMM), gemm_fp8,
// gemm_fp8_block and gemm_mxfp8 (FP8 with one scale per tensor, per block, per 32 elements), attention_core (fused
// attention, by a call's forward FLOPs), alltoall_intra, alltoall_inter, allgather_intra,
// allgather_inter, d2d_copy, pcie_h2d (by bytes). A scalar completes them: the share of HBM
// bandwidth memory-bound operators (norms, permutation, activation functions) reach.
#pragma once

#include <array>
#include <map>
#include <string>

#include "planner/efficiency_curve.h"
#include "planner/units.h"

namespace moe {

struct Efficiencies {
  EfficiencyCurve gemm;                      // BF16 (and FP32 plans', against their own peak)
  EfficiencyCurve gemm_fp8, gemm_fp8_block, gemm_mxfp8;  // against the FP8 peak
  EfficiencyCurve alltoall_intra, alltoall_inter;
  EfficiencyCurve allgather_intra, allgather_inter;
  EfficiencyCurve d2d_copy;
  EfficiencyCurve pcie_h2d;  // pinned copies between host memory and the GPU, by bytes
  // Fused causal attention, forward and backward, as a share of the BF16 peak by one call's
  // forward FLOPs (causal blocks skipped; the backward counted as twice the forward): cuDNN's
  // kernel, as Transformer Engine runs it, measured on a lent H200 (planner/default_efficiency.h).
  EfficiencyCurve attention_core;
  // What multi-latent attention (192-dim queries and keys, 128-dim values) keeps of that curve:
  // DeepSeek-V3's heads measured 0.875-0.89 of it at 4K-16K tokens on the same H200 (its
  // backward is the slower pass). Set 1 where the attention curve was calibrated on MLA itself.
  double attention_latent = 0.88;
  // Fused attention's share of the peak for one call of `call_flops` forward FLOPs, with
  // attention_latent applied for multi-latent attention: what every caller that prices fused
  // attention (layer_ops, the offload plans) reads.
  double attention_share(double call_flops, bool latent) const {
    return attention_core.at(call_flops) * (latent ? attention_latent : 1.0);
  }
  // Element-wise kernels reach ~70-80 % of HBM bandwidth; MegaScale-MoE Sec. 6.1 names them the
  // reason MFU falls on faster GPUs.
  double memory_bound = 0.7;
  // Per chunk of a MoNTA O2/O3 pipeline (see monta::Problem::chunk_overhead). 150 us puts the
  // 8K-sequence crossover where MoNTA Fig. 14 measured it (O1 best at <= 16K); calibrate it with
  // the pipelined AllToAll on the user's cluster.
  Seconds pipeline_chunk_overhead = Seconds(150e-6);
  // Per further round of MemFine's FCDA (a chunk's dispatch, experts and combine) beyond the
  // collectives' latency: Megatron's token dispatcher runs its preprocessing again each round
  // (the count exchange over the EP group, a device-to-host copy of the split sizes that
  // drains the stream, then the round's kernel launches). On one H100 `execute` measured a
  // Mixtral layer at 8 chunks 1.1 ms above what the GEMM curve explains, over 21 further rounds
  // (forward, recompute, backward): 0.05 ms each for launches alone, with no collective and no
  // host sync in them; 300 us is our estimate with the count exchange and the sync. A
  // calibration file's constants can set it (calibrate/data/memfine-fcda-round.json).
  Seconds dispatch_round_overhead = Seconds(300e-6);
  // One retry of PyTorch's caching allocator: an allocation that finds no cached block and no
  // free HBM frees the cache (cudaFree synchronizes the device) and calls cudaMalloc again. The
  // simulator charges it to each allocation past alpha x capacity (MemFine eq. 3's budget)
  // that still fits the GPU. On a lent H100 (PyTorch 2.11, tools/allocator_probe.py,
  // calibrate/data/h100-runs/allocator-probe.json) one retry with 82 GB cached took 39-50 ms
  // whether in 19 segments or 310, the device idle before it; a busy device adds the wait for
  // its queued work. Calibration constant allocator_retry_us.
  Seconds allocator_retry = Seconds(45e-3);
  // Intra-operator overlap (MegaScale-MoE Sec. 4.2) gives "a few SMs" to communication: 8 of
  // the GPU's (GpuSpec::sms; an H800's 132 where the cluster file gives none), so a fused GEMM
  // on an H800 runs 6 % slower while its communication is in flight; a fused pair pays one tile
  // wave of the shorter side before the two overlap (tiles: waves of the fused kernel).
  double intra_overlap_comm_sms = 8;
  double intra_overlap_tiles = 8;
  // SMs the expert dispatch and combine kernels hold while inter-operator overlap runs them
  // beside compute (GpuSpec::sms is the whole): DeepEP's 20, Megatron-Core's
  // --moe-deepep-num-sms default; NCCL's all-to-all and all-gather/reduce-scatter 16, the CTAs
  // NCCL issue 1598 counts for an all_to_all_single on one node. Calibration constants
  // ep_comm_sms_deepep and ep_comm_sms_nccl.
  double ep_comm_sms_deepep = 20;
  double ep_comm_sms_nccl = 16;
  // What the framework's CPU thread spends issuing one layer's kernels for one micro-batch
  // (Python, PyTorch dispatch, Transformer Engine, the launches), forward and backward
  // together (planner/host_time.h). Fitted to Megatron-Core runs without CUDA graphs whose
  // layers at micro-batch 1 take longer than their GPU work: Qwen3-235B-A22B on 256 H100 and
  // 256 H800 (tools/validate_moe.sh), whose layer passes come to 15 ms with the all-to-all
  // dispatcher and 9.5 ms with DeepEP while micro-batch 4 runs them at the GEMMs' pace. The
  // split across parts is our reading of where the ops are, not a measurement.
  struct HostCosts {
    Seconds attention = Seconds(3.5e-3);  // norm, QKV, rotary, core attention, projection
    Seconds router = Seconds(1.5e-3);     // router GEMM, top-k, auxiliary loss, token counts
    Seconds dense_ffn = Seconds(1.5e-3);
    // Dispatch, permutation, grouped GEMMs, activation and combine, by token dispatcher: the
    // all-to-all one's preprocessing copies split sizes to the host and sorts chunks by
    // expert; DeepEP's kernels permute as they send.
    Seconds experts_alltoall = Seconds(10e-3);
    Seconds experts_flex = Seconds(4.5e-3);
    Seconds experts_allgather = Seconds(4.5e-3);
    // Every cost above, for what treats them alike (zeroing, anchoring).
    std::array<Seconds*, 6> all() {
      return {&attention,        &router,       &dense_ffn,
              &experts_alltoall, &experts_flex, &experts_allgather};
    }
  } host;
};

// The scalars a calibration file may set ("constants": {name: value}): attention_core (one
// share at every size, in place of the curve), attention_latent and memory_bound (fractions in
// (0, 1]),
// ep_comm_sms_deepep and ep_comm_sms_nccl (SM counts, >= 0),
// pipeline_chunk_overhead_us, dispatch_round_overhead_us, allocator_retry_us and the host costs
// host_attention_us,
// host_router_us, host_dense_ffn_us, host_experts_alltoall_us, host_experts_flex_us,
// host_experts_allgather_us (microseconds,
// >= 0). Throws ConfigError for an unknown name or a value out of range.
void set_constant(Efficiencies& e, const std::string& name, double value);

// Defaults: planner/default_efficiency.h; any named curve in `curves` replaces its default, then
// `constants` are set as set_constant() does.
Efficiencies efficiencies(const std::map<std::string, EfficiencyCurve>& curves = {},
                          const std::map<std::string, double>& constants = {});

// `e` with no host costs: for the seed papers' systems, whose reported gains (MegaScale-MoE
// Fig. 13's 15-33 % for SP+EP at micro-batch 1 on one node, say) could not show were their
// layers host-bound at Megatron-Core's 2025 costs, and which report no host-bound behaviour.
Efficiencies without_host_time(Efficiencies e);

// The seed papers' systems (2023-2024) as their reproductions price them: no host costs
// (without_host_time), and fused attention (multi-latent too) at the constant half of the BF16 peak
// the reproductions were built on (FlashAttention-2's forward on A100, Dao 2023), not the cuDNN
// curve measured in 2026: their kernels predate it (a 2026 FlashAttention-2 reaches 0.18-0.32
// on an H200), and APTMoE's FP32 fine-tuning never ran a fused BF16 kernel. Then `constants`
// (a calibration file's) are set as efficiencies() sets them.
Efficiencies paper_era_efficiencies(const std::map<std::string, EfficiencyCurve>& curves = {},
                                    const std::map<std::string, double>& constants = {});

// The inverse, by the same names: what efficiencies(curves_of(e), constants_of(e)) gives back
// as e (the calibration file `moeplan anchor` writes).
std::map<std::string, EfficiencyCurve> curves_of(const Efficiencies& e);
std::map<std::string, double> constants_of(const Efficiencies& e);

}  // namespace moe
