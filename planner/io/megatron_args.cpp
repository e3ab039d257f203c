#include "planner/io/megatron_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <iostream>
#include <map>
#include <sstream>

#include "planner/errors.h"
#include "planner/io/json_reader.h"

namespace moe::io {

namespace {

// What a flag takes: nothing (a switch), one value, or every word up to the next flag.
enum class Arity { kNone, kOne, kList };

// The flags read, by name (megatron/training/arguments.py; torchrun's --nnodes and
// --nproc-per-node).
const std::map<std::string, Arity, std::less<>>& known_flags() {
  static const std::map<std::string, Arity, std::less<>> flags = {
      // Layout and batch.
      {"--tensor-model-parallel-size", Arity::kOne},
      {"--pipeline-model-parallel-size", Arity::kOne},
      {"--context-parallel-size", Arity::kOne},
      {"--expert-model-parallel-size", Arity::kOne},
      {"--expert-tensor-parallel-size", Arity::kOne},
      {"--num-layers-per-virtual-pipeline-stage", Arity::kOne},
      {"--num-virtual-stages-per-pipeline-rank", Arity::kOne},
      {"--pipeline-model-parallel-layout", Arity::kOne},
      {"--decoder-first-pipeline-num-layers", Arity::kOne},
      {"--decoder-last-pipeline-num-layers", Arity::kOne},
      {"--cp-comm-type", Arity::kList},
      {"--hierarchical-context-parallel-sizes", Arity::kList},
      {"--sequence-parallel", Arity::kNone},
      {"--micro-batch-size", Arity::kOne},
      {"--global-batch-size", Arity::kOne},
      {"--seq-length", Arity::kOne},
      {"--nnodes", Arity::kOne},
      {"--nproc-per-node", Arity::kOne},
      {"--nproc_per_node", Arity::kOne},
      // Precision, optimizer and data parallelism.
      {"--bf16", Arity::kNone},
      {"--fp16", Arity::kNone},
      {"--fp8-format", Arity::kOne},
      {"--fp8-recipe", Arity::kOne},
      {"--use-distributed-optimizer", Arity::kNone},
      {"--use-megatron-fsdp", Arity::kNone},
      {"--data-parallel-sharding-strategy", Arity::kOne},
      {"--grad-reduce-in-bf16", Arity::kNone},
      {"--optimizer-cpu-offload", Arity::kNone},
      {"--optimizer-offload-fraction", Arity::kOne},
      // Recompute and activation offloading.
      {"--recompute-granularity", Arity::kOne},
      {"--recompute-method", Arity::kOne},
      {"--recompute-num-layers", Arity::kOne},
      {"--recompute-modules", Arity::kList},
      {"--fine-grained-activation-offloading", Arity::kNone},
      {"--offload-modules", Arity::kList},
      // MoE, overlap, kernels.
      {"--moe-token-dispatcher-type", Arity::kOne},
      {"--moe-flex-dispatcher-backend", Arity::kOne},
      {"--moe-permute-fusion", Arity::kNone},
      {"--moe-grouped-gemm", Arity::kNone},
      {"--overlap-moe-expert-parallel-comm", Arity::kNone},
      {"--tp-comm-overlap", Arity::kNone},
      {"--attention-backend", Arity::kOne},
      {"--cross-entropy-loss-fusion", Arity::kNone},
      {"--cross-entropy-fusion-impl", Arity::kOne},
      {"--cuda-graph-impl", Arity::kOne},
      {"--cuda-graph-scope", Arity::kList},
      {"--enable-cuda-graph", Arity::kNone},
      {"--external-cuda-graph", Arity::kNone},
      // The model, checked against the model file.
      {"--num-layers", Arity::kOne},
      {"--hidden-size", Arity::kOne},
      {"--ffn-hidden-size", Arity::kOne},
      {"--num-attention-heads", Arity::kOne},
      {"--group-query-attention", Arity::kNone},
      {"--num-query-groups", Arity::kOne},
      {"--multi-latent-attention", Arity::kNone},
      {"--kv-lora-rank", Arity::kOne},
      {"--q-lora-rank", Arity::kOne},
      {"--num-experts", Arity::kOne},
      {"--moe-ffn-hidden-size", Arity::kOne},
      {"--moe-router-topk", Arity::kOne},
      {"--moe-shared-expert-intermediate-size", Arity::kOne},
      {"--mtp-num-layers", Arity::kOne},
      {"--moe-router-num-groups", Arity::kOne},
      {"--moe-router-group-topk", Arity::kOne},
      {"--qk-head-dim", Arity::kOne},
      {"--qk-pos-emb-head-dim", Arity::kOne},
      {"--v-head-dim", Arity::kOne},
      {"--kv-channels", Arity::kOne},
      // Priced as moeplan always runs them, or with a note when absent.
      {"--overlap-grad-reduce", Arity::kNone},
      {"--overlap-param-gather", Arity::kNone},
      {"--fp8-param-gather", Arity::kNone},
      {"--use-precision-aware-optimizer", Arity::kNone},
      {"--main-grads-dtype", Arity::kOne},
      {"--main-params-dtype", Arity::kOne},
      {"--exp-avg-dtype", Arity::kOne},
      {"--exp-avg-sq-dtype", Arity::kOne},
      {"--overlap-cpu-optimizer-d2h-h2d", Arity::kNone},
      {"--moe-expert-capacity-factor", Arity::kOne},
      {"--moe-router-force-load-balancing", Arity::kNone},  // balanced routing, the default skew
      {"--moe-pad-expert-input-to-capacity", Arity::kNone},
  };
  return flags;
}

// Flags that change neither time nor memory (hyperparameters, data, checkpoints, logging) and
// model flags this reader does not check: read past without a word.
bool silent(std::string_view flag) {
  // clang-format off
  static constexpr std::string_view kPrefixes[] = {
      "--lr", "--min-lr", "--weight-decay", "--clip-grad", "--adam-", "--sgd-", "--init-method",
      "--train-iters", "--train-samples", "--eval-", "--data-", "--split", "--tokenizer-",
      "--vocab-", "--merge-file", "--save", "--load", "--no-load-", "--ckpt-", "--dist-ckpt-",
      "--log-", "--tensorboard-", "--wandb-", "--exit-", "--seed", "--finetune",
      "--distributed-timeout-minutes", "--distributed-backend", "--use-mcore-models",
      "--transformer-impl", "--no-gradient-accumulation-fusion", "--moe-aux-loss-coeff",
      "--moe-z-loss-coeff", "--moe-router-load-balancing-type", "--moe-router-score-function",
      "--moe-router-topk-scaling-factor", "--moe-router-enable-expert-bias",
      "--moe-router-bias-update-rate", "--moe-router-dtype", "--moe-layer-freq", "--normalization",
      "--norm-epsilon", "--swiglu", "--position-embedding-type", "--rotary-",
      "--max-position-embeddings", "--untie-embeddings-and-output-weights",
      "--disable-bias-linear", "--add-qkv-bias", "--make-vocab-size-divisible-by",
      "--attention-dropout", "--hidden-dropout", "--qk-layernorm", "--window-size",
      "--window-attn-skip-freq", "--experimental-attention-variant", "--dsa-indexer-", "--linear-",
      "--attention-output-gate", "--mock-data", "--no-create-attention-mask-in-dataloader",
      "--manual-gc", "--use-flash-attn", "--bias-", "--no-bias-", "--masked-softmax-fusion",
      "--no-masked-softmax-fusion", "--apply-layernorm-1p", "--use-rotary-position-embeddings",
      "--rope-", "--master-", "--node-rank", "--node_rank", "--master_", "--max_restarts",
      "--rdzv_", "--rdzv-", "--standalone", "--timing-log-level", "--profile"};
  // clang-format on
  return std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](std::string_view p) { return flag.starts_with(p); });
}

bool is_flag(const std::string& word) {
  return word.size() > 2 && word.starts_with("--");
}

// A list value's words: names and numbers, not the ")" closing an args array.
bool is_list_word(const std::string& word) {
  return !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char ch) {
    return std::isalnum(ch) || ch == '_' || ch == '+' || ch == '-' || ch == '.';
  });
}

// The flags given, each with its values (a switch has none); the last of a repeated flag wins,
// as argparse takes it.
struct Given {
  std::map<std::string, std::vector<std::string>, std::less<>> values;
  std::vector<std::string> unknown;

  bool has(std::string_view flag) const { return values.find(flag) != values.end(); }
  const std::string* one(std::string_view flag) const {
    const auto it = values.find(flag);
    return it == values.end() || it->second.empty() ? nullptr : &it->second.front();
  }
  const std::vector<std::string>* list(std::string_view flag) const {
    const auto it = values.find(flag);
    return it == values.end() ? nullptr : &it->second;
  }
};

Given read_flags(const std::vector<std::string>& words, const std::string& source) {
  Given g;
  for (size_t i = 0; i < words.size(); ++i) {
    if (!is_flag(words[i])) continue;  // the launcher, the script, an array's brackets
    std::string flag = words[i];
    std::vector<std::string> values;
    if (const size_t eq = flag.find('='); eq != std::string::npos) {
      values.push_back(flag.substr(eq + 1));
      flag.resize(eq);
    }
    const auto known = known_flags().find(flag);
    if (known == known_flags().end()) {
      if (!silent(flag) && std::find(g.unknown.begin(), g.unknown.end(), flag) == g.unknown.end())
        g.unknown.push_back(flag);
      continue;  // its values, if any, are words that are not flags: passed over above
    }
    const Arity arity = known->second;
    if (arity == Arity::kNone && !values.empty())
      throw InputError(source, flag, fmt::format("takes no value, got '{}'", values.front()));
    if (arity == Arity::kOne && values.empty()) {
      if (i + 1 >= words.size() || is_flag(words[i + 1]))
        throw InputError(source, flag, "has no value");
      values.push_back(words[++i]);
    }
    if (arity == Arity::kList && values.empty()) {
      while (i + 1 < words.size() && is_list_word(words[i + 1]) && !is_flag(words[i + 1]))
        values.push_back(words[++i]);
      if (values.empty()) throw InputError(source, flag, "has no value");
    }
    g.values[flag] = std::move(values);
  }
  return g;
}

int64_t positive_value(const std::string& text, std::string_view flag, const std::string& source) {
  if (text.starts_with('$'))
    throw InputError(source, std::string(flag),
                     fmt::format("'{}' is a shell variable: give its value", text));
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v <= 0)
    throw InputError(source, std::string(flag),
                     fmt::format("'{}' is not a positive integer", text));
  return v;
}

// A number in (low, high].
double number_value(const std::string& text, std::string_view flag, const std::string& source,
                    double low, double high) {
  size_t used = 0;
  double v = NAN;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  if (used != text.size() || !(v > low && v <= high))
    throw InputError(source, std::string(flag),
                     fmt::format("'{}' is not a number in ({}, {}]", text, low, high));
  return v;
}

int64_t positive(const Given& g, std::string_view flag, const std::string& source) {
  return positive_value(*g.one(flag), flag, source);
}

std::optional<int64_t> positive_if(const Given& g, std::string_view flag,
                                   const std::string& source) {
  if (!g.one(flag)) return std::nullopt;
  return positive(g, flag, source);
}

// One of `choices`, or an InputError that lists them.
std::string choice(const Given& g, std::string_view flag, std::string fallback,
                   std::initializer_list<const char*> choices, const std::string& source) {
  const std::string* v = g.one(flag);
  if (!v) return fallback;
  for (const char* c : choices)
    if (*v == c) return *v;
  throw InputError(source, std::string(flag),
                   fmt::format("'{}' is not one of {}", *v, fmt::join(choices, ", ")));
}

// A model flag against the model file's value.
void check_model(const Given& g, std::string_view flag, int64_t model_value, const char* what,
                 const ModelSpec& m, const std::string& source) {
  const std::optional<int64_t> v = positive_if(g, flag, source);
  if (v && *v != model_value)
    throw InputError(source, std::string(flag),
                     fmt::format("says {}, model {} has {} {}: arguments for another model?", *v,
                                 m.name, model_value, what));
}

void check_model_flags(const Given& g, const ModelSpec& m, const std::string& source) {
  const AttentionSpec& a = m.attention;
  check_model(g, "--num-layers", m.num_layers, "layers", m, source);
  check_model(g, "--hidden-size", m.hidden_size, "as its hidden size", m, source);
  check_model(g, "--num-attention-heads", a.num_heads, "attention heads", m, source);
  if (m.dense_ffn_size > 0)
    check_model(g, "--ffn-hidden-size", m.dense_ffn_size, "as its dense FFN width", m, source);
  const bool latent = a.kind == AttentionKind::kLatent;
  if (g.has("--multi-latent-attention") && !latent)
    throw InputError(source, "--multi-latent-attention",
                     fmt::format("model {} has no multi-latent attention", m.name));
  if (latent) {
    check_model(g, "--kv-lora-rank", a.kv_lora_rank, "as its KV LoRA rank", m, source);
    check_model(g, "--q-lora-rank", a.q_lora_rank, "as its Q LoRA rank", m, source);
    check_model(g, "--qk-head-dim", a.qk_nope_head_dim, "as its QK head width", m, source);
    check_model(g, "--qk-pos-emb-head-dim", a.qk_rope_head_dim, "as its rotary head width", m,
                source);
    check_model(g, "--v-head-dim", a.v_head_dim, "as its V head width", m, source);
  } else {
    check_model(g, "--kv-channels", a.head_dim, "as its head width", m, source);
    if (g.has("--group-query-attention")) {
      // Megatron's default is one group.
      const int64_t groups = positive_if(g, "--num-query-groups", source).value_or(1);
      if (groups != a.num_kv_heads)
        throw InputError(
            source, "--num-query-groups",
            fmt::format("says {}, model {} has {} KV heads", groups, m.name, a.num_kv_heads));
    } else if (g.has("--num-attention-heads") && a.num_kv_heads != a.num_heads) {
      throw InputError(source, "--group-query-attention",
                       fmt::format("absent, so every head has its own K and V; model {} has {} "
                                   "KV heads for {}",
                                   m.name, a.num_kv_heads, a.num_heads));
    }
  }
  if (g.has("--num-experts") && !m.is_moe())
    throw InputError(source, "--num-experts", fmt::format("model {} is dense", m.name));
  if (m.is_moe()) {
    check_model(g, "--num-experts", m.num_routed_experts, "routed experts", m, source);
    check_model(g, "--moe-ffn-hidden-size", m.expert_ffn_size, "as its expert width", m, source);
    check_model(g, "--moe-router-topk", m.top_k, "as its top-k", m, source);
    check_model(g, "--moe-router-num-groups", m.router_groups, "router groups", m, source);
    check_model(g, "--moe-router-group-topk", m.router_group_topk, "as its group top-k", m, source);
    if (m.shared_ffn_total() > 0)
      check_model(g, "--moe-shared-expert-intermediate-size", m.shared_ffn_total(),
                  "as its shared experts' width", m, source);
  }
  if (m.mtp_layers > 0) check_model(g, "--mtp-num-layers", m.mtp_layers, "MTP modules", m, source);
}

// The layout: sizes, Megatron's all-to-all context parallelism as Ulysses SP, the virtual
// pipeline.
void read_layout(const Given& g, const ModelSpec& m, const std::string& source, MegatronRun& r) {
  ParallelConfig& p = r.choice.parallel;
  int64_t tp = positive_if(g, "--tensor-model-parallel-size", source).value_or(1);
  int64_t cp = positive_if(g, "--context-parallel-size", source).value_or(1);
  // Megatron's all-to-all context parallelism is MegaScale-MoE's SP attention (Ulysses) over
  // those ranks (megatron_arguments writes it so); a2a+p2p nests the all-to-all inside the
  // ring, --hierarchical-context-parallel-sizes A B giving the all-to-all's A.
  const std::vector<std::string>* comm = g.list("--cp-comm-type");
  const std::string cp_comm = comm ? comm->front() : "p2p";
  if (cp > 1 && comm && comm->size() > 1 &&
      std::any_of(comm->begin(), comm->end(), [&](const std::string& c) { return c != cp_comm; }))
    r.notes.push_back(
        fmt::format("--cp-comm-type: every layer priced as the first's, {}", cp_comm));
  if (cp > 1 && (cp_comm == "a2a" || cp_comm == "a2a+p2p")) {
    if (tp > 1)
      throw InputError(source, "--cp-comm-type",
                       fmt::format("{} beside --tensor-model-parallel-size {}: moeplan prices "
                                   "all-to-all context parallelism as SP attention, with TP 1",
                                   cp_comm, tp));
    int64_t a2a = cp;
    if (cp_comm == "a2a+p2p") {
      const std::vector<std::string>* sizes = g.list("--hierarchical-context-parallel-sizes");
      if (!sizes || sizes->size() != 2)
        throw InputError(source, "--hierarchical-context-parallel-sizes",
                         "a2a+p2p needs the two sizes, all-to-all then ring");
      const char* flag = "--hierarchical-context-parallel-sizes";
      a2a = positive_value((*sizes)[0], flag, source);
      if (a2a * positive_value((*sizes)[1], flag, source) != cp)
        throw InputError(
            source, "--hierarchical-context-parallel-sizes",
            fmt::format("{} x {} is not --context-parallel-size {}", (*sizes)[0], (*sizes)[1], cp));
    }
    r.choice.attention = AttentionMode::kUlysses;
    tp = a2a;
    cp /= a2a;
  } else if (cp > 1 && cp_comm != "p2p") {
    r.notes.push_back(fmt::format("--cp-comm-type {}: priced as the ring (p2p)", cp_comm));
  }
  p.tp = tp;
  p.cp = cp;
  p.pp = positive_if(g, "--pipeline-model-parallel-size", source).value_or(1);
  if (m.is_moe()) {
    p.ep = positive_if(g, "--expert-model-parallel-size", source).value_or(1);
    // Megatron's expert TP defaults to the attention's.
    p.etp = positive_if(g, "--expert-tensor-parallel-size", source)
                .value_or(g.one("--tensor-model-parallel-size")
                              ? positive(g, "--tensor-model-parallel-size", source)
                              : 1);
  } else if (g.has("--expert-model-parallel-size") &&
             positive(g, "--expert-model-parallel-size", source) > 1) {
    throw InputError(source, "--expert-model-parallel-size",
                     fmt::format("model {} is dense", m.name));
  }
  p.mbs = positive_if(g, "--micro-batch-size", source);
  p.gbs = positive_if(g, "--global-batch-size", source);
  p.pp_first = positive_if(g, "--decoder-first-pipeline-num-layers", source);
  p.pp_last = positive_if(g, "--decoder-last-pipeline-num-layers", source);
  const int split_flags = g.has("--pipeline-model-parallel-layout") +
                          g.has("--num-layers-per-virtual-pipeline-stage") +
                          g.has("--num-virtual-stages-per-pipeline-rank");
  if (split_flags > 1)
    throw InputError(source, "--pipeline-model-parallel-layout",
                     "Megatron takes one of it, --num-layers-per-virtual-pipeline-stage and "
                     "--num-virtual-stages-per-pipeline-rank");
  if (const std::string* layout = g.one("--pipeline-model-parallel-layout")) {
    p.layout = parse_pipeline_layout(*layout, source, "--pipeline-model-parallel-layout");
    try {
      apply_layout(p);
    } catch (const ConfigError& e) {
      throw InputError(source, "--pipeline-model-parallel-layout", e.what());
    }
  } else if (const std::optional<int64_t> per =
                 positive_if(g, "--num-layers-per-virtual-pipeline-stage", source)) {
    if (m.num_layers % (*p.pp * *per) != 0)
      throw InputError(source, "--num-layers-per-virtual-pipeline-stage",
                       fmt::format("{} layers a virtual stage over {} stages do not divide "
                                   "model {}'s {} layers",
                                   *per, *p.pp, m.name, m.num_layers));
    p.vpp = m.num_layers / (*p.pp * *per);
  } else {
    p.vpp = positive_if(g, "--num-virtual-stages-per-pipeline-rank", source).value_or(1);
  }
  r.seq_len = positive_if(g, "--seq-length", source);
  if (r.seq_len) r.choice.seq_len = *r.seq_len;
  // torchrun's sizes, where the script gives them as numbers (a shell variable leaves --gpus).
  for (const char* flag : {"--nproc-per-node", "--nproc_per_node", "--nnodes"}) {
    const std::string* v = g.one(flag);
    if (v && v->starts_with('$')) {
      r.notes.push_back(fmt::format("{} {}: a shell variable, so the GPUs are --gpus's", flag, *v));
      return;
    }
  }
  const std::optional<int64_t> per_node = g.one("--nproc-per-node")
                                              ? positive_if(g, "--nproc-per-node", source)
                                              : positive_if(g, "--nproc_per_node", source);
  if (per_node) r.gpus = *per_node * positive_if(g, "--nnodes", source).value_or(1);
}

// Megatron's precision-aware optimizer (planner/plan.h, AdamStates). Its types are refused
// without the flag, as Megatron's OptimizerConfig asserts FP32 states then, and the flag without
// the distributed optimizer. BF16 main gradients are the BF16 gradient buffer
// --grad-reduce-in-bf16 gives. Under the CPU offload, which Megatron's guide pairs with the
// flag, the flag alone changes nothing moeplan prices.
void read_adam_states(const Given& g, const std::string& source, MegatronRun& r) {
  auto dtype = [&](const char* flag, std::initializer_list<const char*> allowed) {
    const std::string v = choice(g, flag, "fp32", allowed, source);
    for (const EnumName<StateDtype>& n : state_dtype_names())
      if (v == n.name) return n.value;
    return StateDtype::kFp32;
  };
  const StateDtype grads = dtype("--main-grads-dtype", {"fp32", "bf16"});
  AdamStates& a = r.choice.adam;
  a.main_params = dtype("--main-params-dtype", {"fp32", "fp16"});
  a.exp_avg = dtype("--exp-avg-dtype", {"fp32", "fp16", "bf16", "fp8"});
  a.exp_avg_sq = dtype("--exp-avg-sq-dtype", {"fp32", "fp16", "bf16", "fp8"});
  const bool narrowed = grads != StateDtype::kFp32 || !(a == AdamStates{});
  if (!g.has("--use-precision-aware-optimizer")) {
    if (narrowed)
      throw InputError(source, "--use-precision-aware-optimizer",
                       "absent, so Megatron keeps gradients and Adam states in FP32 and refuses "
                       "the narrower types this launch names");
    return;
  }
  if (r.choice.zero_stage < 1)
    throw InputError(source, "--use-precision-aware-optimizer",
                     "needs the distributed optimizer (--use-distributed-optimizer)");
  if (grads == StateDtype::kBf16) r.choice.dp_bf16_compression = true;
  a.precision_aware = !(r.choice.optimizer_offload > 0 && a == AdamStates{});
}

void read_precision(const Given& g, const std::string& source, MegatronRun& r) {
  r.choice.precision = g.has("--bf16") || g.has("--fp16") ? Precision::kBf16 : Precision::kFp32;
  if (g.has("--fp16")) r.notes.push_back("--fp16: priced as BF16 (the same bytes and peak)");
  if (g.has("--fp8-format")) {
    choice(g, "--fp8-format", "", {"e4m3", "hybrid"}, source);
    r.choice.precision = Precision::kFp8;
    const std::string recipe = choice(g, "--fp8-recipe", "delayed",
                                      {"delayed", "tensorwise", "blockwise", "mxfp8"}, source);
    for (const EnumName<Fp8Recipe>& n : fp8_recipe_names())
      if (recipe == n.name) r.choice.fp8_recipe = n.value;
  }
  // ZeRO: Megatron-FSDP's sharding strategy, else the distributed optimizer (ZeRO-1), else DDP.
  if (g.has("--use-megatron-fsdp")) {
    const std::string s =
        choice(g, "--data-parallel-sharding-strategy", "optim_grads_params",
               {"no_shard", "optim", "optim_grads", "optim_grads_params"}, source);
    r.choice.zero_stage = s == "no_shard" ? 0 : s == "optim" ? 1 : s == "optim_grads" ? 2 : 3;
  } else {
    r.choice.zero_stage = g.has("--use-distributed-optimizer") ? 1 : 0;
  }
  r.choice.dp_bf16_compression = g.has("--grad-reduce-in-bf16");
  if (!g.has("--overlap-grad-reduce"))
    r.notes.push_back(
        "no --overlap-grad-reduce: priced with the gradient reduction behind the backward");
  if (g.has("--optimizer-cpu-offload")) {
    r.choice.optimizer_offload = 1.0;
    if (const std::string* f = g.one("--optimizer-offload-fraction"))
      r.choice.optimizer_offload =
          number_value(*f, "--optimizer-offload-fraction", source, 0.0, 1.0);
  }
  read_adam_states(g, source, r);
  // moeplan's FP8 plans gather FP8 weights where Megatron allows it (planner/plan.h).
  const bool fp8_weights =
      r.choice.precision == Precision::kFp8 &&
      (r.choice.optimizer_offload == 0 || r.choice.fp8_recipe == Fp8Recipe::kDelayed);
  if (fp8_weights && !g.has("--fp8-param-gather"))
    r.notes.push_back(
        "no --fp8-param-gather: priced with FP8 weights, a byte a parameter less than the BF16 "
        "ones this run keeps");
}

uint32_t module_mask(const Given& g, std::string_view flag, bool recompute,
                     const std::string& source, MegatronRun& r) {
  std::vector<std::string> names = *g.list(flag);
  if (recompute) {
    const auto shared = std::find(names.begin(), names.end(), "shared_experts");
    if (shared != names.end()) {
      names.erase(shared);
      r.notes.push_back(
          "--recompute-modules shared_experts: not priced (the memory model holds no shared-"
          "expert activations)");
    }
  }
  std::string unknown;
  const std::optional<uint32_t> mask = recompute ? recompute_modules_from_names(names, &unknown)
                                                 : offload_modules_from_names(names, &unknown);
  if (!mask)
    throw InputError(source, std::string(flag), fmt::format("'{}' is not a module", unknown));
  return *mask;
}

void read_recompute(const Given& g, const std::string& source, MegatronRun& r) {
  const std::string granularity =
      choice(g, "--recompute-granularity", "none", {"full", "selective"}, source);
  if (granularity == "full") {
    r.choice.recompute = Recompute::kFull;
    const std::string method =
        choice(g, "--recompute-method", "uniform", {"uniform", "block"}, source);
    const int64_t layers = positive_if(g, "--recompute-num-layers", source).value_or(1);
    if (method == "block" || layers != 1)
      r.notes.push_back(
          fmt::format("--recompute-method {} --recompute-num-layers {}: priced as "
                      "every layer recomputing its own forward",
                      method, layers));
  } else if (granularity == "selective") {
    r.choice.recompute = Recompute::kSelective;
    // Megatron's default modules: the core attention alone.
    r.choice.recompute_modules = g.has("--recompute-modules")
                                     ? module_mask(g, "--recompute-modules", true, source, r)
                                     : kRecomputeCoreAttn;
    if (r.choice.recompute_modules == 0) r.choice.recompute = Recompute::kNone;
  }
  if (g.has("--fine-grained-activation-offloading")) {
    if (!g.has("--offload-modules"))
      throw InputError(source, "--offload-modules",
                       "--fine-grained-activation-offloading names no modules");
    r.choice.offload_modules = module_mask(g, "--offload-modules", false, source, r);
  }
}

void read_moe_and_kernels(const Given& g, const ModelSpec& m, const std::string& source,
                          MegatronRun& r) {
  const std::string dispatcher = choice(g, "--moe-token-dispatcher-type", "allgather",
                                        {"allgather", "alltoall", "flex", "alltoall_seq"}, source);
  if (dispatcher == "alltoall_seq")
    r.notes.push_back("--moe-token-dispatcher-type alltoall_seq: priced as alltoall");
  r.choice.dispatcher = dispatcher == "allgather" ? megascale::Dispatcher::kAllGather
                        : dispatcher == "flex"    ? megascale::Dispatcher::kDeepEp
                                                  : megascale::Dispatcher::kAllToAll;
  if (const std::string* f = g.one("--moe-expert-capacity-factor")) {
    r.capacity_factor = number_value(*f, "--moe-expert-capacity-factor", source, 0.0, 1e6);
    if (!g.has("--moe-pad-expert-input-to-capacity"))
      r.notes.push_back(
          "--moe-expert-capacity-factor without padding: priced at the capacity, the most a "
          "rank can receive");
  }
  if (m.is_moe() && !g.has("--moe-grouped-gemm"))
    r.notes.push_back("no --moe-grouped-gemm: priced as one grouped GEMM a layer all the same");
  // Dense layers have no permutation: the default stands.
  r.choice.permute_fusion = !m.is_moe() || g.has("--moe-permute-fusion");
  // One overlap switch covers what the flags overlap: the expert all-to-all and the TP
  // collectives. Without either, Megatron's all-to-all context parallelism (SP attention here)
  // runs its all-to-all apart from attention, and its ring always overlaps the K/V exchange.
  const MegatronOverlapFlags applies = megatron_overlap_flags(m, r.choice);
  const bool ep_flag = g.has("--overlap-moe-expert-parallel-comm"),
             tp_flag = g.has("--tp-comm-overlap");
  if (applies.any()) {
    r.choice.overlap = (applies.expert && ep_flag) || (applies.tensor && tp_flag);
    if (r.choice.overlap && applies.expert && applies.tensor && ep_flag != tp_flag)
      r.notes.push_back(
          fmt::format("{} alone: priced with the {} overlapped too",
                      ep_flag ? "--overlap-moe-expert-parallel-comm" : "--tp-comm-overlap",
                      ep_flag ? "TP collectives" : "expert all-to-all"));
  } else {
    r.choice.overlap =
        !(r.choice.attention == AttentionMode::kUlysses && *r.choice.parallel.tp > 1);
  }
  const std::string backend = choice(g, "--attention-backend", "auto",
                                     {"auto", "flash", "fused", "unfused", "local"}, source);
  r.choice.attention_kernel =
      backend == "unfused" ? AttentionKernel::kUnfused : AttentionKernel::kFused;
  // Without the fusion Megatron's own loss runs, as the native kernel's passes.
  r.choice.cross_entropy =
      g.has("--cross-entropy-loss-fusion") &&
              choice(g, "--cross-entropy-fusion-impl", "native", {"native", "te"}, source) == "te"
          ? CrossEntropy::kTe
          : CrossEntropy::kNative;
  const std::string impl =
      choice(g, "--cuda-graph-impl", "none", {"none", "local", "transformer_engine"}, source);
  const std::vector<std::string>* scope = g.list("--cuda-graph-scope");
  const bool full_iteration =
      scope && std::find(scope->begin(), scope->end(), "full_iteration") != scope->end();
  if (full_iteration) {
    r.choice.cuda_graph = CudaGraph::kFullIteration;
  } else if (impl != "none" || g.has("--enable-cuda-graph") || g.has("--external-cuda-graph")) {
    r.choice.cuda_graph = CudaGraph::kAttention;
    const bool attention_scope =
        scope && std::find(scope->begin(), scope->end(), "attn") != scope->end();
    if (!attention_scope)
      r.notes.push_back(
          "CUDA graphs of another scope than attn or full_iteration: priced as attention and "
          "router captured (attn)");
  }
}

// One line of a log's arguments block, "  tensor_model_parallel_size ...... 8": a name, its dots
// (none for a name of 48 characters or more, whose two spaces remain), the value as Python
// prints it, after the "[default0]:" a launcher puts before each line where it does.
struct LoggedField {
  std::string name, value;
  bool dotted = false;
};

std::optional<LoggedField> logged_field(std::string_view line) {
  if (line.starts_with('[')) {
    const size_t close = line.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    line.remove_prefix(close + 1);
    if (line.starts_with(':')) line.remove_prefix(1);
  }
  auto is_space = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\r'; };
  while (!line.empty() && is_space(line.front())) line.remove_prefix(1);
  while (!line.empty() && is_space(line.back())) line.remove_suffix(1);
  auto word_char = [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
  };
  size_t n = 0;
  while (n < line.size() && word_char(line[n])) ++n;
  if (n == 0 || std::isdigit(static_cast<unsigned char>(line[0])) || n + 1 >= line.size() ||
      line[n] != ' ')
    return std::nullopt;
  size_t dots = n + 1;
  while (dots < line.size() && line[dots] == '.') ++dots;
  if (dots >= line.size() || line[dots] != ' ') return std::nullopt;
  std::string_view value = line.substr(dots + 1);
  // Megatron-DeepSpeed adds a column of its own: "29500.............default".
  if (const size_t more = value.find("..."); more != std::string_view::npos)
    value = value.substr(0, more);
  return LoggedField{std::string(line.substr(0, n)), std::string(value), dots > n + 1};
}

// Calls f(line) for each line of `text`, as views into it: a log runs to hundreds of megabytes.
template <class F>
void for_each_line(std::string_view text, F f) {
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    f(text.substr(begin, end - begin));
    begin = end + 1;
  }
}

// The number `text` prints at `at`, past its spaces: digits first (no sign, inf or nan);
// nullopt where none starts there.
std::optional<double> number_at(std::string_view text, size_t at) {
  while (at < text.size() && text[at] == ' ') ++at;
  if (at >= text.size() || !std::isdigit(static_cast<unsigned char>(text[at]))) return std::nullopt;
  double v = 0;
  const char* first = text.data() + at;
  const auto [ptr, ec] = std::from_chars(first, text.data() + text.size(), v);
  if (ec != std::errc() || ptr == first) return std::nullopt;
  return v;
}

}  // namespace

std::vector<std::string> launch_words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string word;
    while (in >> word) {
      if (word.starts_with('#')) break;  // a comment to the end of the line
      // A flag that opens an assignment's array or string: ARGS=(--x or ARGS="--x.
      if (const size_t flag = word.find("--");
          flag != std::string::npos && flag > 0 &&
          std::string_view("(\"'").find(word[flag - 1]) != std::string_view::npos)
        word.erase(0, flag);
      // Quotes and the continuation backslash around the word, and an array's closing
      // bracket (one the word does not open).
      auto unbalanced = [&](std::string_view w) {
        return std::count(w.begin(), w.end(), ')') > std::count(w.begin(), w.end(), '(');
      };
      size_t begin = 0, end = word.size();
      auto trim = [](char ch) { return ch == '"' || ch == '\'' || ch == '\\'; };
      while (begin < end && trim(word[begin])) ++begin;
      while (end > begin && (trim(word[end - 1]) ||
                             (word[end - 1] == ')' &&
                              unbalanced(std::string_view(word).substr(begin, end - begin)))))
        --end;
      if (begin < end) words.push_back(word.substr(begin, end - begin));
    }
  }
  return words;
}

std::optional<std::vector<std::string>> logged_argument_words(const std::string& text,
                                                              int64_t* others) {
  const bool has_block = text.find("-- arguments --") != std::string::npos;
  std::vector<std::pair<std::string, std::string>> logged;
  bool inside = !has_block;
  for_each_line(text, [&](std::string_view line) {
    if (line.find("-- arguments --") != std::string_view::npos) inside = true;
    if (line.find("-- end of arguments --") != std::string_view::npos) inside = false;
    if (!inside) return;
    if (const std::optional<LoggedField> f = logged_field(line); f && (has_block || f->dotted))
      logged.emplace_back(f->name, f->value);
  });
  if (logged.empty()) return std::nullopt;
  std::map<std::string, std::string> value(logged.begin(), logged.end());
  auto set = [&](const std::string& name) {
    const auto it = value.find(name);
    return it != value.end() && it->second != "None" && it->second != "False";
  };
  // The log holds the splits Megatron derived beside the one it was given: keep the given.
  if (set("pipeline_model_parallel_layout")) {
    value.erase("virtual_pipeline_model_parallel_size");
    value.erase("num_layers_per_virtual_pipeline_stage");
  } else if (set("virtual_pipeline_model_parallel_size")) {
    value.erase("num_layers_per_virtual_pipeline_stage");
  }
  // Namespace fields whose flag is spelled otherwise.
  static const std::map<std::string, std::string> kFlagOf = {
      {"fp8", "--fp8-format"},
      {"virtual_pipeline_model_parallel_size", "--num-virtual-stages-per-pipeline-rank"},
      // The world size, as one node's processes.
      {"world_size", "--nproc-per-node"}};
  std::vector<std::string> words;
  *others = 0;
  for (const auto& [name, v] : value) {
    if (v == "None" || v == "False" || v == "[]") continue;
    std::string flag = "--" + name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (const auto it = kFlagOf.find(name); it != kFlagOf.end()) flag = it->second;
    if (known_flags().find(flag) == known_flags().end()) {
      ++*others;
      continue;
    }
    words.push_back(flag);
    if (v == "True") continue;
    if (v.starts_with('[')) {
      // ['core_attn', 'moe_act'] or [2, 2]: one word an element.
      std::istringstream items(v.substr(1, v.size() - 2));
      std::string item;
      while (std::getline(items, item, ',')) {
        item.erase(std::remove_if(item.begin(), item.end(),
                                  [](char ch) { return ch == '\'' || ch == ' '; }),
                   item.end());
        if (!item.empty()) words.push_back(item);
      }
    } else {
      // AttnBackend.auto: an enum's member name.
      const size_t dot = v.rfind('.');
      const bool enum_member =
          dot != std::string::npos && std::isalpha(static_cast<unsigned char>(v[0]));
      words.push_back(enum_member ? v.substr(dot + 1) : v);
    }
  }
  return words;
}

std::vector<double> logged_iteration_times_ms(const std::string& text) {
  // Found by plain search, not a regex: a training log runs to hundreds of megabytes.
  static constexpr std::string_view kKey = "elapsed time per iteration (ms):";
  std::vector<double> out;
  for (size_t at = text.find(kKey); at != std::string::npos; at = text.find(kKey, at + 1)) {
    const std::optional<double> ms = number_at(text, at + kKey.size());
    if (ms && *ms > 0) out.push_back(*ms);
  }
  return out;
}

std::vector<LoggedMemory> logged_memory_reports(const std::string& text) {
  // The number after `key` on `line`, MiB to bytes; nullopt without one.
  auto mib_after = [](std::string_view line, std::string_view key) -> std::optional<double> {
    const size_t at = line.find(key);
    if (at == std::string_view::npos) return std::nullopt;
    const std::optional<double> mib = number_at(line, at + key.size());
    if (!mib || *mib < 0) return std::nullopt;
    return *mib * 1024.0 * 1024.0;
  };
  std::vector<LoggedMemory> out;
  for_each_line(text, [&](std::string_view line) {
    if (line.find("memory (MB)") == std::string_view::npos) return;
    const std::optional<double> allocated = mib_after(line, "| max allocated:");
    if (!allocated) return;
    LoggedMemory m;
    if (const size_t at = line.find("[Rank "); at != std::string_view::npos) {
      int64_t rank = 0;
      const char* digits = line.data() + at + 6;
      const auto [ptr, ec] = std::from_chars(digits, line.data() + line.size(), rank);
      if (ec == std::errc() && ptr > digits && rank >= 0) m.rank = rank;
    }
    m.max_allocated_bytes = *allocated;
    m.max_reserved_bytes = mib_after(line, "| max reserved:").value_or(0);
    const auto same = std::find_if(out.begin(), out.end(),
                                   [&](const LoggedMemory& o) { return o.rank == m.rank; });
    if (same == out.end()) {
      out.push_back(m);
    } else {
      same->max_allocated_bytes = std::max(same->max_allocated_bytes, m.max_allocated_bytes);
      same->max_reserved_bytes = std::max(same->max_reserved_bytes, m.max_reserved_bytes);
    }
  });
  return out;
}

std::optional<double> typical_logged_iteration_ms(const std::vector<double>& logged) {
  if (logged.size() < 2) return std::nullopt;
  std::vector<double> steady(logged.begin() + 1, logged.end());
  std::sort(steady.begin(), steady.end());
  const size_t n = steady.size();
  return n % 2 == 1 ? steady[n / 2] : (steady[n / 2 - 1] + steady[n / 2]) / 2;
}

MegatronRun read_megatron_arguments(const std::string& text, const ModelSpec& m,
                                    const std::string& source) {
  int64_t logged_others = 0;
  const std::optional<std::vector<std::string>> logged =
      logged_argument_words(text, &logged_others);
  const Given g = read_flags(logged ? *logged : launch_words(text), source);
  if (g.values.empty())
    throw InputError(source, "",
                     "no Megatron-LM argument in it (--tensor-model-parallel-size, ...)");
  check_model_flags(g, m, source);
  MegatronRun r;
  read_layout(g, m, source, r);
  read_precision(g, source, r);
  read_recompute(g, source, r);
  read_moe_and_kernels(g, m, source, r);
  if (*r.choice.parallel.tp > 1 && r.choice.attention == AttentionMode::kTensor &&
      !g.has("--sequence-parallel"))
    r.notes.push_back(
        "no --sequence-parallel beside TP: priced with it (norms and dropout on a TP rank's "
        "share of the tokens)");
  if (m.mtp_layers > 0 && !g.has("--mtp-num-layers"))
    r.notes.push_back(
        fmt::format("model {}'s {} MTP module(s) priced; Megatron trains them only "
                    "with --mtp-num-layers",
                    m.name, m.mtp_layers));
  r.ignored = g.unknown;
  r.logged_iteration_ms = logged_iteration_times_ms(text);
  r.logged_memory = logged_memory_reports(text);
  if (logged_others > 0)
    r.notes.push_back(
        fmt::format("{} other arguments of the log read past (hyperparameters, "
                    "data, logging, and those moeplan does not price)",
                    logged_others));
  return r;
}

MegatronRun load_megatron_arguments(const std::string& path, const ModelSpec& m) {
  if (path != "-") return read_megatron_arguments(read_text_file(path), m, path);
  std::ostringstream text;
  text << std::cin.rdbuf();
  return read_megatron_arguments(text.str(), m, "standard input");
}

}  // namespace moe::io
