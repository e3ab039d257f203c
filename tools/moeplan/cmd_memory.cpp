// moeplan memory: per-stage static, activation and total memory, and MemFine's chunk choice.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/layer_ops.h"
#include "planner/memory_model.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct MemoryOptions {
  std::string model, cluster, parallel, recompute = "none", skew = "balanced", chunks = "auto";
  std::string dtype = "bf16", weights = "bf16", grads = "fp32", attention_kernel = "fused",
              cross_entropy = "te", adam_moments = "fp32";
  int64_t seq_len = 4096;
  std::optional<double> received_tokens;
  std::optional<double> static_override_gb;
  std::vector<std::string> offload_modules;
  double optimizer_offload = 0;
  double alpha = 1.0;
  int zero = 1;
  bool json = false, explain = false;
};

void explain(const MemoryReport& r, const MemoryRequest& req, const ModelSpec& m) {
  const memfine::LayerShape& s = r.moe_shape;
  fmt::print("\nHow these numbers arise (MemFine, 000_540cfe3acc6ce862):\n");
  fmt::print("  layer shape: D_t={} b={} s={} h={} a={} h_d={} k_a={} e_n={} g_e={} t={} c={}\n",
             s.bytes_per_element, s.micro_batch, s.seq_len, s.hidden, s.heads, s.head_dim,
             s.kv_heads, s.experts, s.expert_ffn, s.tp, s.cp);
  fmt::print(
      "  eq. (2) sequence term  D_t b s (5h + a h_d + 2 k_a h_d + e_n)/(tc) = {} per layer\n",
      as_gb(memfine::sequence_activation(s).value()));
  fmt::print("  eq. (2) per received token  D_t b (2h + 2 g_e)/(tc) = {:.0f} bytes\n",
             memfine::activation_per_received_token(s).value());
  if (s.score_bytes > 0) {
    fmt::print("  unfused attention scores  {} x b (a/t) (s/c) s = {} per layer\n", s.score_bytes,
               as_gb(attention_score_bytes(s).value()));
  }
  if (req.loss_bytes.value() > 0 && !req.static_override) {
    fmt::print(
        "  the last stage's loss keeps one micro-batch's b (s/c) (V/t) logits (--cross-entropy te: "
        "D_t bytes each; native: D_t + 4) = {}\n",
        as_gb(req.loss_bytes.value()));
  }
  fmt::print("  received tokens s'' = {:.0f} ({})\n", r.received_tokens,
             req.received_tokens ? "given" : "balanced: s x top-k");
  fmt::print(
      "  FCDA: each of c chunks holds ceil(s''/c) tokens; m_g = vp + p - 2 r_pp - 1 (1 under full "
      "recompute)\n");
  fmt::print(
      "  static: eq. (1), {} bytes per parameter (param {} + grad {} + optimizer states {}: 4 x "
      "{} FP32 elements' worth), ZeRO-{} sharding{}\n",
      req.static_bytes.per_param(), req.static_bytes.param, req.static_bytes.grad,
      4.0 * req.static_bytes.optimizer_states, req.static_bytes.optimizer_states, req.zero_stage,
      req.static_override ? "; overridden by --static-override" : "");
  fmt::print(
      "  eq. (8) s'_max = (alpha M_GPU - M_sta - m_g x sequence term) / (m_g x per-token term); "
      "eq. (9) c = ceil(s''/s'_max), then the smallest bin >= c\n");
  fmt::print("  model: {}, {} layers\n", m.name, m.num_layers);
}

// The report as one JSON document (bytes): each stage, MACT's pick and the chunk sweep.
void print_memory_json(const MemoryOptions& o, const ModelSpec& m, const ClusterSpec& c,
                       const ParallelConfig& p, const MemoryRequest& req, const MemoryReport& r,
                       const std::map<int64_t, MemoryReport>& sweep) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageMemory& s : r.stages)
    stages.push_back(io::stage_memory_json(s, stage_layer_label(m, p, s.stage)));
  nlohmann::json chunk_sweep = nlohmann::json::array();
  for (const auto& [bin, rep] : sweep) {
    nlohmann::json per_stage = nlohmann::json::array();
    for (const StageMemory& s : rep.stages) {
      per_stage.push_back({{"activation_bytes", s.activation_bytes.value()},
                           {"total_bytes", s.total_bytes.value()},
                           {"fits", s.fits}});
    }
    chunk_sweep.push_back({{"chunks", bin}, {"stages", per_stage}});
  }
  print_json({{"model", m.name},
              {"cluster", c.name},
              {"parallel", p.to_string()},
              {"recompute", recompute_name(req.recompute)},
              {"seq_len", o.seq_len},
              {"received_tokens", r.received_tokens},
              {"gpu_capacity_bytes", req.gpu_capacity.value()},
              {"alpha", req.alpha},
              {"stages", stages},
              {"mact_chunks", r.mact_chunks},
              {"fits", r.fits},
              {"chunk_sweep", chunk_sweep}});
}

// The report as tables: each stage, the optimizer and activation offload lines, and for MoE
// models the chunk sweep and MACT's pick; --explain's equations after.
void print_memory_text(const MemoryOptions& o, const ModelSpec& m, const ClusterSpec& c,
                       const ParallelConfig& p, const MemoryRequest& req, const MemoryReport& r,
                       const std::map<int64_t, MemoryReport>& sweep) {
  // Received tokens, MemFine's chunks and MACT belong to MoE layers: a dense model's report
  // leaves them out.
  const bool moe = m.is_moe();
  fmt::print("{} on {} ({} per GPU, alpha {}), layout {}, recompute {}, seq {}{}\n\n", m.name,
             c.name, as_gb(req.gpu_capacity.value()), req.alpha, p.to_string(),
             recompute_name(req.recompute), o.seq_len,
             moe ? fmt::format(", received tokens s'' = {:.0f}", r.received_tokens) : "");
  std::vector<std::string> columns = {"stage",       "layers",     "MoE",   "params/GPU", "static",
                                      "checkpoints", "activation", "total", "fits"};
  if (moe) columns.insert(columns.end(), {"s'_max", "MACT c", "chunks"});
  Table t(columns);
  for (const StageMemory& s : r.stages) {
    std::vector<std::string> row = {std::to_string(s.stage),
                                    fmt::format("{}{}", stage_layer_label(m, p, s.stage),
                                                s.stage == mtp_stage(p) && m.mtp_layers > 0
                                                    ? fmt::format(" +{} MTP", m.mtp_layers)
                                                    : std::string()),
                                    std::to_string(s.num_moe_layers),
                                    as_billions(s.params_per_gpu),
                                    as_gb(s.static_bytes.value()),
                                    as_gb(s.checkpoint_bytes.value()),
                                    as_gb(s.activation_bytes.value()),
                                    as_gb(s.total_bytes.value()),
                                    s.fits ? "yes" : "NO"};
    if (moe) {
      // Eq. (8) goes negative once the static memory and the sequence term alone overflow.
      row.insert(
          row.end(),
          {s.max_received_tokens > 0 ? fmt::format("{:.0f}", s.max_received_tokens)
                                     : std::string("none"),
           s.mact_chunks > 0 ? std::to_string(s.mact_chunks) : "none", std::to_string(s.chunks)});
    }
    t.add(row);
  }
  fmt::print("{}\n", t.render());
  if (req.optimizer_offload > 0) {
    const StageMemory& most = *std::max_element(
        r.stages.begin(), r.stages.end(),
        [](const StageMemory& a, const StageMemory& b) { return a.host_bytes < b.host_bytes; });
    fmt::print(
        "optimizer CPU offload keeps {} of optimizer states a GPU in host memory (stage {}), "
        "{} its {} share of the node's host memory\n\n",
        as_gb(most.host_bytes.value()), most.stage, most.host_fits ? "within" : "OVER",
        as_gb(req.host_capacity.value()));
  }
  if (req.offload_modules != 0) {
    fmt::print(
        "activation offloading ({}) sends {} a layer and micro-batch to the host (stage 0); "
        "two layers' worth stay\n\n",
        fmt::join(offload_module_names(req.offload_modules), " "),
        as_gb(r.stages.front().offloaded_per_layer.value()));
  }
  if (!moe) {
    if (o.explain) explain(r, req, m);
    return;
  }
  Table sw({"chunks", "activation (stage 0)", "total (stage 0)", "all stages fit"});
  for (const auto& [bin, rep] : sweep) {
    const StageMemory& s0 = rep.stages.front();
    sw.add({std::to_string(bin), as_gb(s0.activation_bytes.value()), as_gb(s0.total_bytes.value()),
            rep.fits ? "yes" : "no"});
  }
  fmt::print("FCDA chunk sweep:\n{}\n", sw.render());
  if (r.mact_chunks > 0) {
    fmt::print("MACT picks c = {} (bins 1,2,4,8)\n", r.mact_chunks);
  } else {
    fmt::print(
        "MACT: no bin up to {} chunks fits; the static memory or the sequence term alone is too "
        "large\n",
        req.chunk_bins.back());
  }
  if (o.explain) explain(r, req, m);
}

void run_memory(const MemoryOptions& o) {
  const AttentionKernel kernel = parse_attention_kernel(o.attention_kernel, "--attention-kernel");
  const CrossEntropy loss = parse_cross_entropy(o.cross_entropy, "--cross-entropy");
  // Flags first: a bad one is the only line printed, not after the layout's warning.
  std::optional<int64_t> chunks;
  if (o.chunks != "auto") {
    chunks = positive_integer(o.chunks);
    if (!chunks)
      throw InputError("--chunks", "",
                       fmt::format("'{}' is not a positive integer or auto", o.chunks));
  }
  if (!o.received_tokens && o.skew != "worst" && o.skew != "balanced")
    throw InputError("--skew", "", fmt::format("'{}' is not one of balanced, worst", o.skew));
  const Recompute recompute = parse_recompute(o.recompute);
  const Dtype activations = parse_dtype(o.dtype, "--dtype");
  const Dtype weights = parse_dtype(o.weights, "--weights");
  const Dtype grads = parse_dtype(o.grads, "--grads");
  const ModelSpec m = io::load_model(o.model);
  const ClusterSpec c = io::load_cluster(o.cluster);
  const uint32_t offload =
      o.offload_modules.empty() ? 0 : parse_offload_modules(o.offload_modules, m);
  if (offload != 0) require_offloadable(recompute, "--offload-modules", "", "--recompute");
  const ParallelConfig p = layout_for(o.parallel, m, o.seq_len);
  warn_world_size(p, c);

  MemoryRequest req;
  req.seq_len = o.seq_len;
  req.recompute = recompute;
  req.offload_modules = offload;
  req.optimizer_offload = o.optimizer_offload;
  req.bytes_per_element = dtype_bytes(activations);
  req.zero_stage = o.zero;
  // Eq. (1) for any precision: weight and gradient bytes per parameter; Adam states stay FP32.
  req.static_bytes.param = dtype_bytes(weights);
  req.static_bytes.grad = dtype_bytes(grads);
  // Megatron's precision-aware optimizer keeps the moments in --adam-moments' type and, beside
  // BF16 weights, the FP32 masters as their 16-bit remainders (planner/plan.h, AdamStates).
  {
    PlanChoice probe;
    probe.precision = weights == Dtype::kFp32  ? Precision::kFp32
                      : weights == Dtype::kFp8 ? Precision::kFp8
                                               : Precision::kBf16;
    probe.zero_stage = o.zero;
    probe.optimizer_offload = o.optimizer_offload;
    const StateDtype moments =
        *named("--adam-moments", o.adam_moments, state_dtype_names(), false, "");
    probe.adam = adam_states_for(moments);
    if (const std::string problem = adam_states_problem(probe);
        !problem.empty() && probe.adam.precision_aware)
      throw InputError("--adam-moments", "", problem);
    req.static_bytes.optimizer_states = optimizer_state_bytes(probe) / 4.0;
  }
  req.gpu_capacity = c.node.gpu.hbm_capacity;
  req.host_capacity = c.node.host_memory_per_gpu();
  req.alpha = o.alpha;
  if (kernel == AttentionKernel::kUnfused) req.score_bytes = kUnfusedAttentionScoreBytes;
  // The loss's logits on the last stage, one micro-batch's (planner/layer_ops.h).
  req.loss_bytes = cross_entropy_held(loss, req.bytes_per_element, loss_logits(m, p, o.seq_len));
  if (o.static_override_gb) req.static_override = moe::gigabytes(*o.static_override_gb);
  if (o.received_tokens) {
    req.received_tokens = *o.received_tokens;
  } else if (o.skew == "worst") {
    req.received_tokens = worst_received_tokens(m, p, o.seq_len);
  }
  if (chunks) req.chunks = *chunks;
  const MemoryReport r = estimate_memory(m, p, req);

  // The chunk sweep: what each bin would give on every stage.
  std::map<int64_t, MemoryReport> sweep;
  for (int64_t bin : req.chunk_bins) {
    MemoryRequest at = req;
    at.chunks = bin;
    sweep.emplace(bin, estimate_memory(m, p, at));
  }

  if (o.json)
    print_memory_json(o, m, c, p, req, r, sweep);
  else
    print_memory_text(o, m, c, p, req, r, sweep);
}

}  // namespace

void add_memory(CommandLine& cli) {
  auto o = std::make_shared<MemoryOptions>();
  Subcommand cmd = cli.subcommand(
      "memory", "Per-stage static/activation memory, fit check and MemFine chunk tuning");
  cmd.option("--model", o->model, "model file").required();
  cmd.option("--cluster", o->cluster, "cluster file (GPU memory capacity)").required();
  cmd.option("--parallel", o->parallel,
             "layout, e.g. tp=1,pp=4,ep=32,cp=1,vpp=1,mbs=1 (layout=... for Megatron's "
             "--pipeline-model-parallel-layout)");
  cmd.option("--seq-len", o->seq_len, "sequence length").positive();
  cmd.option("--recompute", o->recompute, "none | selective | full | sar");
  cmd.option("--offload-modules", o->offload_modules,
             "Megatron's --offload-modules: any of attn_norm core_attn attn_proj mlp_norm "
             "expert_fc1 moe_act (recompute none or selective)")
      .expected(1, 6);
  cmd.option("--optimizer-offload", o->optimizer_offload,
             "Megatron's --optimizer-offload-fraction: this share of the optimizer states in "
             "host memory (0-1)")
      .range(0.0, 1.0);
  cmd.option("--received-tokens", o->received_tokens, "tokens one GPU's MoE layer receives (s'')")
      .positive();
  cmd.option("--skew", o->skew, "balanced | worst, when --received-tokens is not given");
  cmd.option("--chunks", o->chunks, "FCDA chunk count, or auto for MACT");
  cmd.option("--static-override", o->static_override_gb,
             "measured static memory in GB (MemFine Table 4)")
      .positive();
  cmd.option("--alpha", o->alpha, "usable fraction of GPU memory (MemFine eq. 3)").range(0.01, 1.0);
  cmd.option("--zero", o->zero, "ZeRO stage 0-3 (1 = Megatron distributed optimizer)").range(0, 3);
  cmd.option("--dtype", o->dtype, "activation precision: bf16, fp16, fp32, fp8");
  cmd.option("--weights", o->weights,
             "weight precision for static memory (eq. 1): bf16, fp32, fp8");
  cmd.option("--grads", o->grads, "gradient precision for static memory (eq. 1): fp32, bf16");
  cmd.option("--adam-moments", o->adam_moments,
             "the Adam moments' type: fp32 (default, Megatron's Adam) | bf16 | fp16 | fp8 "
             "(Megatron's precision-aware optimizer: beside BF16 weights its FP32 masters keep "
             "only their low 16 bits)");
  cmd.option("--attention-kernel", o->attention_kernel,
             "core attention: fused (default) | unfused (keeps 5 bytes per s x s score)");
  cmd.option("--cross-entropy", o->cross_entropy,
             "the loss kernel: te (default: keeps the logits, 2 bytes each) | native (keeps "
             "the FP32 softmax beside them)");
  cmd.flag("--json", o->json, "print one JSON document (bytes)");
  cmd.flag("--explain", o->explain, "show the equations and inputs behind the numbers");
  cmd.on_run([o] { run_memory(*o); });
}

}  // namespace moe::cli
