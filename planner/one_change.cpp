#include "planner/one_change.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "planner/errors.h"
#include "planner/megascale.h"
#include "planner/parallel.h"

namespace moe {

namespace {

// A change's label and how it turns the run; apply returns false where the run cannot take it.
struct Candidate {
  std::string change;
  std::function<bool(PlanChoice&)> apply;
};

std::string recompute_flags(Recompute r, uint32_t modules) {
  switch (r) {
    case Recompute::kNone:
      return "no recompute";
    case Recompute::kFull:
      return "--recompute-granularity full";
    case Recompute::kSelective:
    case Recompute::kRematerialize:
      break;
  }
  return fmt::format("--recompute-granularity selective --recompute-modules {}",
                     fmt::join(recompute_module_names(modules), " "));
}

std::string zero_flags(int stage) {
  switch (stage) {
    case 0:
      return "plain DDP (no --use-distributed-optimizer)";
    case 1:
      return "--use-distributed-optimizer";
    case 2:
      return "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads";
    default:
      return "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params";
  }
}

std::string dispatcher_flags(megascale::Dispatcher d) {
  return d == megascale::Dispatcher::kDeepEp
             ? "--moe-token-dispatcher-type flex (DeepEP)"
             : fmt::format("--moe-token-dispatcher-type {}", megascale::dispatcher_name(d));
}

std::vector<Candidate> candidates(const TimeContext& ctx, const PlanChoice& run) {
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& p = run.parallel;
  const bool moe = m.is_moe();
  const MegatronOverlapFlags overlap = megatron_overlap_flags(m, run);
  std::vector<Candidate> out;
  // Communication overlap: Megatron's EP and TP overlap flags together.
  if (overlap.any()) {
    std::string flags;
    if (overlap.expert) flags = "--overlap-moe-expert-parallel-comm";
    if (overlap.tensor) flags += std::string(flags.empty() ? "" : " ") + "--tp-comm-overlap";
    out.push_back({run.overlap ? "without " + flags : flags, [](PlanChoice& c) {
                     c.overlap = !c.overlap;
                     return true;
                   }});
  }
  if (moe && !run.permute_fusion)
    out.push_back({"--moe-permute-fusion", [](PlanChoice& c) {
                     c.permute_fusion = true;
                     return true;
                   }});
  out.push_back({run.cross_entropy == CrossEntropy::kTe
                     ? "--cross-entropy-fusion-impl native"
                     : "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te",
                 [](PlanChoice& c) {
                   c.cross_entropy = c.cross_entropy == CrossEntropy::kTe ? CrossEntropy::kNative
                                                                          : CrossEntropy::kTe;
                   return true;
                 }});
  for (const auto& [graph, flags] :
       {std::pair{CudaGraph::kNone, "no CUDA graphs"},
        {CudaGraph::kAttention, "--cuda-graph-impl transformer_engine --cuda-graph-scope attn"},
        {CudaGraph::kFullIteration, "--cuda-graph-impl local --cuda-graph-scope full_iteration"}}) {
    if (graph != run.cuda_graph)
      out.push_back({flags, [graph = graph](PlanChoice& c) {
                       c.cuda_graph = graph;
                       return true;
                     }});
  }
  if (moe) {
    for (megascale::Dispatcher d :
         {megascale::Dispatcher::kAllToAll, megascale::Dispatcher::kAllGather,
          megascale::Dispatcher::kDeepEp}) {
      if (d != run.dispatcher && megascale::dispatcher_priced(d, *p.ep, *p.etp))
        out.push_back({dispatcher_flags(d), [d](PlanChoice& c) {
                         c.dispatcher = d;
                         return true;
                       }});
    }
  }
  // Selective recompute of the element-wise work (Megatron's performance recipes' modules).
  const uint32_t modules = moe ? kDefaultRecomputeModules : kRecomputeLayernorm;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    if (r == run.recompute && (r != Recompute::kSelective || run.recompute_modules == modules))
      continue;
    out.push_back({recompute_flags(r, modules), [r, modules](PlanChoice& c) {
                     if (c.offload_modules != 0 && !offload_allowed(r)) return false;
                     c.recompute = r;
                     c.recompute_modules = modules;
                     return true;
                   }});
  }
  out.push_back({run.dp_bf16_compression ? "FP32 gradient reduction (no --grad-reduce-in-bf16)"
                                         : "--grad-reduce-in-bf16",
                 [](PlanChoice& c) {
                   c.dp_bf16_compression = !c.dp_bf16_compression;
                   return true;
                 }});
  // BF16 Adam moments (DeepSeek-V3's), or back to Megatron's FP32 Adam.
  if (run.precision != Precision::kFp32 && run.zero_stage >= 1) {
    const bool bf16 =
        run.adam.exp_avg == StateDtype::kBf16 && run.adam.exp_avg_sq == StateDtype::kBf16;
    out.push_back(
        {bf16 || run.adam.precision_aware
             ? "FP32 Adam states (no --use-precision-aware-optimizer)"
             : "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16",
         [bf16, aware = run.adam.precision_aware](PlanChoice& c) {
           c.adam = adam_states_for(bf16 || aware ? StateDtype::kFp32 : StateDtype::kBf16);
           return true;
         }});
  }
  if (run.precision == Precision::kBf16 && ctx.gpu.peak.count(Dtype::kFp8))
    out.push_back({"--fp8-format hybrid --fp8-recipe tensorwise", [](PlanChoice& c) {
                     c.precision = Precision::kFp8;
                     c.fp8_recipe = Fp8Recipe::kTensorwise;
                     return true;
                   }});
  if (run.precision == Precision::kFp8)
    out.push_back({"BF16 (no --fp8-format)", [](PlanChoice& c) {
                     c.precision = Precision::kBf16;
                     return true;
                   }});
  for (int64_t mbs : {*p.mbs * 2, *p.mbs / 2}) {
    if (mbs < 1) continue;
    out.push_back({fmt::format("--micro-batch-size {}", mbs), [mbs](PlanChoice& c) {
                     c.parallel.mbs = mbs;
                     return true;
                   }});
  }
  // Virtual stages, where the layers split evenly (no layout or uneven end stages to keep).
  if (*p.pp > 1 && p.layout.empty() && !p.pp_first && !p.pp_last) {
    for (int64_t vpp : {*p.vpp * 2, *p.vpp / 2}) {
      if (vpp < 1) continue;
      out.push_back(
          {fmt::format("--num-virtual-stages-per-pipeline-rank {}", vpp), [vpp](PlanChoice& c) {
             if (c.gpipe) return false;
             c.parallel.vpp = vpp;
             return true;
           }});
    }
  }
  for (int stage = 0; stage <= 3; ++stage) {
    if (stage != run.zero_stage)
      out.push_back({stage == 0 && run.adam.precision_aware
                         ? "plain DDP (no --use-distributed-optimizer) with FP32 Adam states"
                         : zero_flags(stage),
                     [stage](PlanChoice& c) {
                       c.zero_stage = stage;
                       // Without the distributed optimizer Megatron keeps FP32 Adam states.
                       if (stage == 0) c.adam = AdamStates{};
                       return true;
                     }});
  }
  if (run.attention_kernel == AttentionKernel::kUnfused)
    out.push_back({"fused attention (no --attention-backend unfused)", [](PlanChoice& c) {
                     c.attention_kernel = AttentionKernel::kFused;
                     return true;
                   }});
  if (run.optimizer_offload > 0)
    out.push_back({"no --optimizer-cpu-offload", [](PlanChoice& c) {
                     c.optimizer_offload = 0;
                     return true;
                   }});
  if (run.offload_modules != 0)
    out.push_back({"no --fine-grained-activation-offloading", [](PlanChoice& c) {
                     c.offload_modules = 0;
                     return true;
                   }});
  return out;
}

}  // namespace

std::vector<OneChange> one_change_at_a_time(const TimeContext& ctx, const PlanChoice& run,
                                            Bytes capacity, double alpha,
                                            std::optional<Bytes> static_override) {
  std::vector<OneChange> out;
  if (run.offload) return out;
  for (const Candidate& k : candidates(ctx, run)) {
    PlanChoice c = run;
    if (!k.apply(c)) continue;
    try {
      check(c.parallel, *ctx.model);
      check_sequence(c.parallel, ctx.seq_len);
    } catch (const ConfigError&) {
      continue;  // the layout cannot take it
    }
    out.push_back({k.change, c, score_plan(ctx, c, capacity, alpha, static_override)});
  }
  std::stable_sort(out.begin(), out.end(), [](const OneChange& a, const OneChange& b) {
    if (a.score.memory.fits != b.score.memory.fits) return a.score.memory.fits;
    return a.score.time.iteration < b.score.time.iteration;
  });
  return out;
}

}  // namespace moe
