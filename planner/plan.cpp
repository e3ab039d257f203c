#include "planner/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace moe {

const char* attention_mode_name(AttentionMode a) {
  return a == AttentionMode::kTensor ? "tp" : "ulysses";
}
std::span<const EnumName<Precision>> precision_names() {
  static constexpr EnumName<Precision> names[] = {
      {"bf16", Precision::kBf16}, {"fp32", Precision::kFp32}, {"fp8", Precision::kFp8}};
  return names;
}
std::span<const EnumName<Fp8Recipe>> fp8_recipe_names() {
  static constexpr EnumName<Fp8Recipe> names[] = {{"delayed", Fp8Recipe::kDelayed},
                                                  {"tensorwise", Fp8Recipe::kTensorwise},
                                                  {"blockwise", Fp8Recipe::kBlockwise},
                                                  {"mxfp8", Fp8Recipe::kMxfp8}};
  return names;
}
std::span<const EnumName<CudaGraph>> cuda_graph_names() {
  static constexpr EnumName<CudaGraph> names[] = {{"none", CudaGraph::kNone},
                                                  {"attn", CudaGraph::kAttention},
                                                  {"full", CudaGraph::kFullIteration}};
  return names;
}
std::span<const EnumName<AttentionKernel>> attention_kernel_names() {
  static constexpr EnumName<AttentionKernel> names[] = {{"fused", AttentionKernel::kFused},
                                                        {"unfused", AttentionKernel::kUnfused}};
  return names;
}
const char* attention_kernel_name(AttentionKernel k) {
  return name_in(attention_kernel_names(), k);
}
std::span<const EnumName<CrossEntropy>> cross_entropy_names() {
  static constexpr EnumName<CrossEntropy> names[] = {{"te", CrossEntropy::kTe},
                                                     {"native", CrossEntropy::kNative}};
  return names;
}
const char* cross_entropy_name(CrossEntropy k) {
  return name_in(cross_entropy_names(), k);
}
std::span<const EnumName<StateDtype>> state_dtype_names() {
  static constexpr EnumName<StateDtype> names[] = {{"fp32", StateDtype::kFp32},
                                                   {"bf16", StateDtype::kBf16},
                                                   {"fp16", StateDtype::kFp16},
                                                   {"fp8", StateDtype::kFp8}};
  return names;
}
const char* state_dtype_name(StateDtype d) {
  return name_in(state_dtype_names(), d);
}
double state_dtype_bytes(StateDtype d) {
  switch (d) {
    case StateDtype::kFp32:
      return 4;
    case StateDtype::kBf16:
    case StateDtype::kFp16:
      return 2;
    case StateDtype::kFp8:
      return 1;  // Transformer Engine keeps FP8 moments as bytes with a scale per tensor
  }
  return 4;
}
const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kOneFOneB:
      return "1f1b";
    case Schedule::kInterleaved:
      return "interleaved-1f1b";
    case Schedule::kGPipe:
      return "gpipe";
  }
  return "?";
}
const char* precision_name(Precision p) {
  return name_in(precision_names(), p);
}

const char* fp8_recipe_name(Fp8Recipe r) {
  return name_in(fp8_recipe_names(), r);
}

const char* cuda_graph_name(CudaGraph g) {
  return name_in(cuda_graph_names(), g);
}

ActivationBytes activation_bytes(const PlanChoice& c) {
  ActivationBytes b;
  if (c.precision == Precision::kFp32) b.per_element = 4;
  if (c.precision == Precision::kFp8) b.gemm_input = 1;
  if (c.attention_kernel == AttentionKernel::kUnfused) b.score = kUnfusedAttentionScoreBytes;
  return b;
}

memfine::LayerShape activation_shape(const ModelSpec& m, const PlanChoice& c, int64_t seq_len) {
  const ActivationBytes b = activation_bytes(c);
  memfine::LayerShape s = moe_layer_shape(m, c.parallel, seq_len, b.per_element,
                                          c.attention == AttentionMode::kUlysses);
  s.gemm_input_bytes = b.gemm_input;
  s.score_bytes = b.score;
  return s;
}

bool fp8_param_gather(const PlanChoice& c) {
  return c.precision == Precision::kFp8 &&
         !(c.optimizer_offload > 0 && c.fp8_recipe != Fp8Recipe::kDelayed);
}

double optimizer_state_bytes(const PlanChoice& c) {
  const AdamStates& a = c.adam;
  if (!a.precision_aware) return 12;
  // store_param_remainders: the FP32 master is the BF16 weight plus a 16-bit remainder. It needs
  // BF16 weights (not FP32 ones, nor FP8 ones gathered as such) and a GPU-side FusedAdam.
  const bool remainders = a.main_params == StateDtype::kFp32 && c.precision != Precision::kFp32 &&
                          !fp8_param_gather(c) && c.optimizer_offload == 0;
  return (remainders ? 2.0 : state_dtype_bytes(a.main_params)) + state_dtype_bytes(a.exp_avg) +
         state_dtype_bytes(a.exp_avg_sq);
}

std::string adam_states_problem(const PlanChoice& c) {
  const AdamStates& a = c.adam;
  if ((a.precision_aware || c.optimizer_offload > 0) && c.zero_stage < 1)
    return c.optimizer_offload > 0
               ? "Megatron's optimizer CPU offload runs on its precision-aware optimizer, which "
                 "needs the distributed optimizer (ZeRO 1-3)"
               : "the precision-aware optimizer needs the distributed optimizer (ZeRO 1-3)";
  if (!a.precision_aware)
    return a == AdamStates{} ? ""
                             : "narrower Adam states need Megatron's precision-aware optimizer";
  if (c.precision == Precision::kFp32) return "FP32 training keeps its Adam states in FP32";
  if (a.main_params != StateDtype::kFp32 && a.main_params != StateDtype::kFp16)
    return fmt::format("master weights are fp32 or fp16, not {}", state_dtype_name(a.main_params));
  return "";
}

AdamStates adam_states_for(StateDtype moments) {
  if (moments == StateDtype::kFp32) return {};
  return {true, StateDtype::kFp32, moments, moments};
}

double gradient_bytes(const PlanChoice& c) {
  return c.dp_bf16_compression && c.precision != Precision::kFp32 ? 2 : 4;
}

void settle_mact_chunks(PlanChoice& c, const MemoryReport& memory) {
  c.stage_chunks.clear();
  if (!c.mact) return;
  c.fcda_chunks = std::max<int64_t>(memory.mact_chunks, 1);
  // A stage with no MoE layer has nothing to chunk; one no bin fits runs at the largest, as
  // the simulator's MACT does (StageMemory::chunks).
  for (const StageMemory& st : memory.stages)
    c.stage_chunks.push_back(st.num_moe_layers > 0 ? std::max<int64_t>(st.chunks, 1)
                                                   : c.fcda_chunks);
  const bool uniform = std::all_of(c.stage_chunks.begin(), c.stage_chunks.end(),
                                   [&](int64_t n) { return n == c.fcda_chunks; });
  if (uniform || c.stage_chunks.size() != static_cast<size_t>(c.parallel.pp.value_or(1)))
    c.stage_chunks.clear();
}

std::string PlanChoice::describe() const {
  if (offload) {
    return fmt::format("offload (APTMoE): {} stages on {} GPUs, mbs={}, gbs={}, {}",
                       parallel.pp.value_or(1), offload_gpus, parallel.mbs.value_or(1),
                       parallel.gbs.value_or(0), precision_name(precision));
  }
  std::string out = fmt::format("{} recompute={} attn={}", parallel.to_string(),
                                recompute_name(recompute), attention_mode_name(attention));
  if (recompute == Recompute::kSelective && recompute_modules != kDefaultRecomputeModules)
    out.insert(out.find(" attn="),
               fmt::format("({})", fmt::join(recompute_module_names(recompute_modules), ",")));
  if (offload_modules != 0)
    out += fmt::format(" act-offload={}", fmt::join(offload_module_names(offload_modules), ","));
  if (optimizer_offload > 0) out += fmt::format(" opt-offload={}", optimizer_offload);
  if (parallel.ep.value_or(1) > 1)
    out += fmt::format(" dispatch={}", megascale::dispatcher_name(dispatcher));
  if (parallel.etp.value_or(1) > 1 && parallel.ep.value_or(1) > 1) {
    out += fmt::format(" a2a={}", monta::strategy_name(alltoall));
    if (alltoall == monta::Strategy::kO2 || alltoall == monta::Strategy::kO3)
      out += fmt::format("x{}", alltoall_chunks);
  }
  if (mact) out += fmt::format(" mact={}", fcda_chunks);
  if (dp_bf16_compression) out += " dp-bf16";
  if (adam.precision_aware) {
    out += fmt::format(" adam={}", state_dtype_name(adam.exp_avg));
    if (adam.exp_avg_sq != adam.exp_avg)
      out += fmt::format("/{}", state_dtype_name(adam.exp_avg_sq));
    if (adam.main_params != StateDtype::kFp32)
      out += fmt::format(",master={}", state_dtype_name(adam.main_params));
  }
  if (intra_overlap) out += " intra-overlap";
  if (!permute_fusion) out += " unfused-permute";
  if (attention_kernel == AttentionKernel::kUnfused) out += " unfused-attention";
  if (cross_entropy != CrossEntropy::kTe)
    out += fmt::format(" ce={}", cross_entropy_name(cross_entropy));
  if (gpipe) out += " gpipe";
  if (zero_stage != 1) out += fmt::format(" zero={}", zero_stage);
  if (!overlap) out += " no-overlap";
  if (cuda_graph != CudaGraph::kNone) out += fmt::format(" graphs={}", cuda_graph_name(cuda_graph));
  if (precision == Precision::kFp8) out += fmt::format(" fp8={}", fp8_recipe_name(fp8_recipe));
  if (power_cap_w > 0) out += fmt::format(" cap={:.0f}W", power_cap_w);
  return out;
}

namespace {
// The list form of a per-layer pattern (1 for a marked layer) as Megatron's moe_freq_type takes
// it: a Python expression it evaluates, runs as [v]*k and the shortest repeating unit raised to
// its count ("([0]*3+[1]*58)" for DeepSeek-V3's MoE layers, "([1]*3+[0])*12"), single-quoted
// so that the shell does not glob its brackets.
std::string list_pattern(const std::vector<bool>& marked) {
  const size_t n = marked.size();
  size_t period = n;
  for (size_t p = 1; p < n; ++p) {
    if (n % p != 0) continue;
    bool repeats = true;
    for (size_t i = p; i < n && repeats; ++i) repeats = marked[i] == marked[i % p];
    if (repeats) {
      period = p;
      break;
    }
  }
  std::vector<std::string> runs;
  for (size_t i = 0; i < period;) {
    size_t j = i;
    while (j < period && marked[j] == marked[i]) ++j;
    const int v = marked[i] ? 1 : 0;
    runs.push_back(j - i == 1 ? fmt::format("[{}]", v) : fmt::format("[{}]*{}", v, j - i));
    i = j;
  }
  const std::string unit = fmt::format("({})", fmt::join(runs, "+"));
  return fmt::format("'{}{}'", unit, n / period > 1 ? fmt::format("*{}", n / period) : "");
}

// Megatron's per-layer pattern flags (--window-attn-skip-freq, --linear-attention-freq): N when
// every N-th layer (1-based) is the odd one out, else the list form.
std::string layer_pattern(const std::vector<bool>& marked) {
  const int64_t layers = static_cast<int64_t>(marked.size());
  for (int64_t n = 2; n <= layers; ++n) {
    if (ModelSpec::window_map(layers, n) == marked) return std::to_string(n);
  }
  return list_pattern(marked);
}
}  // namespace

MegatronOverlapFlags megatron_overlap_flags(const ModelSpec& m, const PlanChoice& c) {
  const ParallelConfig& p = c.parallel;
  return {m.is_moe() && p.ep.value_or(1) > 1,
          p.tp.value_or(1) > 1 && c.attention == AttentionMode::kTensor};
}

std::vector<std::string> megatron_arguments(const Plan& plan, const ModelSpec& m,
                                            int nvlink_domain) {
  const PlanChoice& c = plan.choice;
  if (c.offload) return {};  // Megatron-LM cannot run experts on the CPU
  const ParallelConfig& p = c.parallel;
  // MegaScale-MoE's SP attention over the t ranks (attn=ulysses) is Megatron-Core's all-to-all
  // context parallelism: nothing tensor-split, the sequence over t x cp ranks, an all-to-all
  // among t adjacent ones (heads for sequence, as Ulysses) and the K/V ring across cp.
  const bool ulysses = c.attention == AttentionMode::kUlysses && *p.tp > 1;
  std::vector<std::string> a = {
      fmt::format("--tensor-model-parallel-size {}", ulysses ? 1 : *p.tp),
      fmt::format("--pipeline-model-parallel-size {}", *p.pp),
      fmt::format("--context-parallel-size {}", ulysses ? *p.tp * *p.cp : *p.cp),
      fmt::format("--micro-batch-size {}", *p.mbs),
      fmt::format("--global-batch-size {}", p.gbs.value_or(*p.mbs * *p.dp)),
      fmt::format("--seq-length {}", c.seq_len),
      "--overlap-grad-reduce",
  };
  // ZeRO-0 is plain DDP: optimizer states replicated, so no distributed optimizer and no
  // parameter all-gather to overlap.
  if (c.zero_stage >= 1) {
    a.push_back("--use-distributed-optimizer");
    a.push_back("--overlap-param-gather");
  }
  a.push_back(c.precision == Precision::kFp32 ? "--fp32" : "--bf16");
  // MegaScale-MoE's BF16 gradient communication is Megatron's BF16 gradient reduction.
  if (c.dp_bf16_compression) a.push_back("--grad-reduce-in-bf16");
  if (c.precision == Precision::kFp8) {
    // The block-scaled recipes run E4M3 both ways (Megatron's DeepSeek-V3 and MXFP8 recipes);
    // per-tensor scaling keeps E5M2 gradients (hybrid).
    const bool blocks = c.fp8_recipe == Fp8Recipe::kBlockwise || c.fp8_recipe == Fp8Recipe::kMxfp8;
    a.push_back(fmt::format("--fp8-format {}", blocks ? "e4m3" : "hybrid"));
    a.push_back(fmt::format("--fp8-recipe {}", fp8_recipe_name(c.fp8_recipe)));
    if (fp8_param_gather(c)) a.push_back("--fp8-param-gather");
  }
  if (c.zero_stage >= 2) {
    // Megatron-FSDP's sharding strategies: optim (ZeRO-1), optim_grads (2), optim_grads_params (3).
    // Its user guide's required flags: the distributed optimizer (above), no gradient-
    // accumulation fusion (FSDP owns the main gradients), the DTensor checkpoint format.
    a.push_back("--use-megatron-fsdp");
    a.push_back(c.zero_stage == 2 ? "--data-parallel-sharding-strategy optim_grads"
                                  : "--data-parallel-sharding-strategy optim_grads_params");
    a.push_back("--no-gradient-accumulation-fusion");
    a.push_back("--ckpt-format fsdp_dtensor");
  }
  if (*p.tp > 1 && c.attention == AttentionMode::kTensor) a.push_back("--sequence-parallel");
  if (ulysses && *p.cp == 1) a.push_back("--cp-comm-type a2a");
  if (ulysses && *p.cp > 1) {
    a.push_back("--cp-comm-type a2a+p2p");
    a.push_back(fmt::format("--hierarchical-context-parallel-sizes {} {}", *p.tp, *p.cp));
  }
  if (p.pp_first) a.push_back(fmt::format("--decoder-first-pipeline-num-layers {}", *p.pp_first));
  if (p.pp_last) a.push_back(fmt::format("--decoder-last-pipeline-num-layers {}", *p.pp_last));
  if (!p.layout.empty()) {
    // Quoted for the shell: the layout's | ( ) * are its metacharacters. Megatron derives the
    // virtual stages from it and takes no other split flag beside it.
    a.push_back(
        fmt::format("--pipeline-model-parallel-layout '{}'", format_pipeline_layout(p.layout)));
  } else if (*p.vpp > 1) {
    a.push_back(
        fmt::format("--num-layers-per-virtual-pipeline-stage {}", m.num_layers / (*p.pp * *p.vpp)));
  }
  if (c.recompute == Recompute::kFull) {
    a.insert(a.end(), {"--recompute-granularity full", "--recompute-method uniform",
                       "--recompute-num-layers 1"});
  } else if (c.recompute == Recompute::kSelective || c.recompute == Recompute::kRematerialize) {
    // Megatron does not rematerialize communication; the closest runnable form of MegaScale's
    // SAR recomputes the default element-wise modules.
    uint32_t mods =
        c.recompute == Recompute::kSelective ? c.recompute_modules : kDefaultRecomputeModules;
    // A dense model has no MoE block to replay; Megatron is told only what it runs.
    if (!m.is_moe()) mods &= ~(kRecomputeMoe | kRecomputeMoeAct);
    if (mods != 0) {
      a.push_back("--recompute-granularity selective");
      a.push_back(
          fmt::format("--recompute-modules {}", fmt::join(recompute_module_names(mods), " ")));
    }
  }
  if (c.optimizer_offload > 0) {
    a.insert(a.end(), {"--optimizer-cpu-offload",
                       fmt::format("--optimizer-offload-fraction {}", c.optimizer_offload)});
  }
  if (c.optimizer_offload > 0 || c.adam.precision_aware)
    a.push_back("--use-precision-aware-optimizer");
  if (c.adam.main_params != StateDtype::kFp32)
    a.push_back(fmt::format("--main-params-dtype {}", state_dtype_name(c.adam.main_params)));
  if (c.adam.exp_avg != StateDtype::kFp32)
    a.push_back(fmt::format("--exp-avg-dtype {}", state_dtype_name(c.adam.exp_avg)));
  if (c.adam.exp_avg_sq != StateDtype::kFp32)
    a.push_back(fmt::format("--exp-avg-sq-dtype {}", state_dtype_name(c.adam.exp_avg_sq)));
  if (c.optimizer_offload > 0) a.push_back("--overlap-cpu-optimizer-d2h-h2d");
  if (c.offload_modules != 0) {
    a.push_back("--fine-grained-activation-offloading");
    a.push_back(fmt::format("--offload-modules {}",
                            fmt::join(offload_module_names(c.offload_modules), " ")));
  }
  if (m.is_moe()) {
    a.push_back(fmt::format("--num-experts {}", m.num_routed_experts));
    a.push_back(fmt::format("--moe-ffn-hidden-size {}", m.expert_ffn_size));
    a.push_back(fmt::format("--moe-router-topk {}", m.top_k));
    a.push_back(fmt::format("--expert-model-parallel-size {}", *p.ep));
    a.push_back(fmt::format("--expert-tensor-parallel-size {}", *p.etp));
    if (m.shared_ffn_total() > 0) {
      a.push_back(fmt::format("--moe-shared-expert-intermediate-size {}", m.shared_ffn_total()));
    }
    if (m.num_dense_layers() > 0) {
      a.push_back(fmt::format("--moe-layer-freq {}", list_pattern(m.moe_layer)));
    }
    if (c.dispatcher == megascale::Dispatcher::kDeepEp) {
      a.push_back("--moe-token-dispatcher-type flex");
      a.push_back(nvlink_domain > 8 ? "--moe-flex-dispatcher-backend hybridep"
                                    : "--moe-flex-dispatcher-backend deepep");
    } else {
      a.push_back(fmt::format(
          "--moe-token-dispatcher-type {}",
          c.dispatcher == megascale::Dispatcher::kAllGather ? "allgather" : "alltoall"));
    }
    if (m.router_groups > 1) {
      a.push_back(fmt::format("--moe-router-num-groups {}", m.router_groups));
      a.push_back(fmt::format("--moe-router-group-topk {}", m.router_group_topk));
    }
    a.push_back("--moe-grouped-gemm");
    if (c.permute_fusion) a.push_back("--moe-permute-fusion");
    if (c.overlap && megatron_overlap_flags(m, c).expert)
      a.push_back("--overlap-moe-expert-parallel-comm");
  }
  if (c.overlap && megatron_overlap_flags(m, c).tensor) a.push_back("--tp-comm-overlap");
  if (c.attention_kernel == AttentionKernel::kUnfused) a.push_back("--attention-backend unfused");
  a.push_back("--cross-entropy-loss-fusion");
  a.push_back(fmt::format("--cross-entropy-fusion-impl {}", cross_entropy_name(c.cross_entropy)));
  if (c.cuda_graph == CudaGraph::kAttention) {
    a.push_back("--cuda-graph-impl transformer_engine");
    a.push_back(m.is_moe() ? "--cuda-graph-scope attn moe_router moe_preprocess"
                           : "--cuda-graph-scope attn");
  } else if (c.cuda_graph == CudaGraph::kFullIteration) {
    a.push_back("--cuda-graph-impl local");
    a.push_back("--cuda-graph-scope full_iteration");
  }
  // The model's multi-token-prediction modules train, on the last stage, as they are priced.
  if (m.mtp_layers > 0) a.push_back(fmt::format("--mtp-num-layers {}", m.mtp_layers));
  const AttentionSpec& att = m.attention;
  if (att.kind == AttentionKind::kLatent) {
    a.push_back("--multi-latent-attention");
    if (att.q_lora_rank > 0) a.push_back(fmt::format("--q-lora-rank {}", att.q_lora_rank));
    a.push_back(fmt::format("--kv-lora-rank {}", att.kv_lora_rank));
    a.push_back(fmt::format("--qk-head-dim {}", att.qk_nope_head_dim));
    a.push_back(fmt::format("--qk-pos-emb-head-dim {}", att.qk_rope_head_dim));
    a.push_back(fmt::format("--v-head-dim {}", att.v_head_dim));
    if (att.sparse()) {
      // Megatron-Core's DeepSeek Sparse Attention (experimental), with the indexer's sizes.
      a.push_back("--experimental-attention-variant dsa");
      a.push_back(fmt::format("--dsa-indexer-n-heads {}", att.indexer_heads));
      a.push_back(fmt::format("--dsa-indexer-head-dim {}", att.indexer_head_dim));
      a.push_back(fmt::format("--dsa-indexer-topk {}", att.sparse_topk));
    }
  } else if (att.num_kv_heads != att.num_heads) {
    a.push_back("--group-query-attention");
    a.push_back(fmt::format("--num-query-groups {}", att.num_kv_heads));
  }
  // Llama 4's chunked attention has no Megatron-LM argument: only sliding windows are written.
  if (att.sliding_window > 0 && !att.chunked_window) {
    // --window-attn-skip-freq N: every N-th layer attends fully; a pattern no N gives goes as
    // Megatron's list form, 1 for a windowed layer.
    a.push_back(fmt::format("--window-size {},0", att.sliding_window));
    if (m.num_windowed_layers() < m.num_layers) {
      a.push_back("--window-attn-skip-freq " + layer_pattern(m.windowed_layer));
    }
  }
  if (!m.linear_layer.empty() && m.linear_attention.kind == LinearAttentionKind::kGatedDeltaNet) {
    // Megatron-Core's Gated DeltaNet (experimental): --linear-attention-freq as the window's
    // skip frequency, 1 for a linear layer in its list form.
    const LinearAttentionSpec& l = m.linear_attention;
    a.push_back("--experimental-attention-variant gated_delta_net");
    a.push_back("--linear-attention-freq " + layer_pattern(m.linear_layer));
    a.push_back(fmt::format("--linear-conv-kernel-dim {}", l.conv_kernel));
    a.push_back(fmt::format("--linear-key-head-dim {}", l.key_head_dim));
    a.push_back(fmt::format("--linear-value-head-dim {}", l.value_head_dim));
    a.push_back(fmt::format("--linear-num-key-heads {}", l.key_heads));
    a.push_back(fmt::format("--linear-num-value-heads {}", l.value_heads));
  }
  if (att.output_gate) a.push_back("--attention-output-gate");
  return a;
}

std::vector<std::string> megatron_gaps(const Plan& plan, const ModelSpec& m) {
  std::vector<std::string> gaps;
  if (plan.choice.offload) return gaps;
  auto layers = [](const std::vector<bool>& marked) {
    std::vector<int> listed;  // 1-based, as the model cards count
    for (size_t i = 0; i < marked.size(); ++i)
      if (marked[i]) listed.push_back(static_cast<int>(i) + 1);
    return fmt::format("{}", fmt::join(listed, ","));
  };
  if (m.attention.sliding_window > 0 && m.attention.chunked_window) {
    gaps.push_back(fmt::format(
        "chunked attention ({} keys, layers {}) has no Megatron-LM argument: those layers need "
        "a custom attention mask",
        m.attention.sliding_window, layers(m.windowed_layer)));
  }
  if (!m.linear_layer.empty() && m.linear_attention.kind == LinearAttentionKind::kKimiDelta) {
    gaps.push_back(fmt::format(
        "Megatron-Core has no Kimi Delta Attention: layers {} need a custom layer spec ({} heads "
        "of {}, conv {}); the arguments build them as the others",
        layers(m.linear_layer), m.linear_attention.value_heads, m.linear_attention.value_head_dim,
        m.linear_attention.conv_kernel));
  }
  // MegaScale-MoE's own mechanisms, which the search may pick: Megatron runs something else.
  if (plan.choice.recompute == Recompute::kRematerialize) {
    gaps.push_back(
        "MegaScale-MoE's selective activation rematerialization has no Megatron-LM argument: "
        "the arguments recompute moe_act and layernorm instead, which keeps more activations "
        "and replays less communication than this plan prices (plan with --recompute selective "
        "for what Megatron runs)");
  }
  if (plan.choice.mact || plan.choice.fcda_chunks > 1) {
    gaps.push_back(
        "MemFine's chunked dispatch-compute-combine (FCDA) has no Megatron-LM argument: Megatron "
        "dispatches each MoE layer's tokens at once, which needs the unchunked activation memory "
        "(plan with --megatron-only for what it runs)");
  }
  if (plan.choice.intra_overlap) {
    gaps.push_back(
        "MegaScale-MoE's intra-operator overlap (communication fused into the GEMMs) has no "
        "Megatron-LM kernel: Megatron runs those collectives apart (plan with --intra-overlap "
        "off for what it runs)");
  }
  // Overlap no flag states: Megatron always overlaps its context-parallel ring with attention,
  // and never its all-to-all context parallelism (SP attention), where the EP and TP flags do
  // not turn the switch.
  const PlanChoice& c = plan.choice;
  if (!c.overlap && *c.parallel.cp > 1) {
    gaps.push_back(
        "Megatron overlaps its context-parallel ring's K/V exchange with attention whatever its "
        "flags say, where this plan prices it exposed (no-overlap): Megatron runs it faster "
        "than priced (plan with --overlap on for what it runs)");
  }
  if (c.overlap && !megatron_overlap_flags(m, c).any() && c.attention == AttentionMode::kUlysses &&
      *c.parallel.tp > 1) {
    gaps.push_back(
        "Megatron's all-to-all context parallelism (this plan's SP attention) runs its "
        "all-to-all apart from attention, where this plan overlaps it: Megatron runs it slower "
        "than priced (plan with --overlap off for what it runs)");
  }
  return gaps;
}

}  // namespace moe
