#include "planner/layer_ops.h"

#include <algorithm>

namespace moe {

namespace {

// This GPU's tokens of a micro-batch (sequence-parallel share).
double gpu_tokens(const TimeContext& ctx, const ParallelConfig& p) {
  return static_cast<double>(*p.mbs * ctx.seq_len) / static_cast<double>(*p.tp * *p.cp);
}

// An op's time with the work it prices (LayerOp::flops, peak, bytes and latency).
struct OpWork {
  Seconds time;
  double flops = 0, peak = 0, bytes = 0;
  Seconds latency{};
  Seconds in_node{};  // LayerOp::in_node
  OpWork& operator+=(const OpWork& o) {
    time += o.time;
    flops += o.flops;
    bytes += o.bytes;
    latency += o.latency;
    in_node += o.in_node;
    if (peak == 0) peak = o.peak;
    return *this;
  }
  friend OpWork operator+(OpWork a, const OpWork& b) { return a += b; }
  OpWork operator*(double f) const {
    return {time * f, flops * f, peak, bytes * f, latency * f, in_node * f};
  }
};

OpWork gemm(const TimeContext& ctx, const GemmRate& rate, double m, double k, double n,
            double count = 1, double grouped = 1) {
  const Seconds t = gemm_time(ctx, rate, m, k, n, count, grouped);
  if (!(t.value() > 0)) return {};
  return {t, 2.0 * m * k * n * count, rate.peak.value(), 0};
}

// Memory-bound work: `bytes` through HBM at the memory-bound efficiency.
OpWork streamed(const TimeContext& ctx, double bytes) {
  return {Bytes(bytes) / (ctx.links.hbm * ctx.eff.memory_bound), 0, 0, bytes};
}

// A collective of nccl-tests' `size` that takes `time`, `latency` of it holding no link.
OpWork sent(Seconds time, Bytes size, Seconds latency = {}) {
  return {time, 0, 0, size.value(), latency};
}

// A ring all-gather or reduce-scatter (ring_time) and an all-to-all (alltoall_time) as sent,
// with their latency.
OpWork ring_sent(const TimeContext& ctx, Bytes total, int64_t n, int64_t span) {
  return sent(ring_time(ctx, total, n, span), total, ring_latency(ctx, total, n, span));
}
// An all-to-all (NCCL's or DeepEP's) with the share that rides the node's links beside the NIC's.
OpWork sent(const AllToAllTimes& times, Bytes size, Seconds latency) {
  OpWork out = sent(times.time, size, latency);
  out.in_node = times.in_node;
  return out;
}
OpWork alltoall_sent(const TimeContext& ctx, Bytes per_rank, int64_t n, int64_t stride) {
  return sent(alltoall_times(ctx, per_rank, n, stride), per_rank,
              alltoall_latency(ctx, per_rank, n, stride));
}

// An operator of `kind` priced by `work`, with what it prices.
LayerOp layer_op(const char* name, OpKind kind, const OpWork& work) {
  LayerOp op{name, kind, work.time};
  op.flops = work.flops;
  op.peak = work.peak;
  op.bytes = work.bytes;
  if (kind != OpKind::kCompute) op.latency = work.latency, op.in_node = work.in_node;
  return op;
}

}  // namespace

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kCompute:
      return "compute";
    case OpKind::kTp:
      return "tp";
    case OpKind::kEp:
      return "ep";
    case OpKind::kCp:
      return "cp";
  }
  return "?";
}

double overlap_compute_stretch(const TimeContext& ctx, const PlanChoice& c, Seconds compute,
                               Seconds ep_comm) {
  if (!c.overlap || ctx.gpu.sms <= 0 || compute.value() <= 0 || ep_comm.value() <= 0) return 1.0;
  // Communication cannot hold every SM: at 90 % the compute still crawls on the rest.
  const double s = std::min(ep_comm_sms(ctx, c) / static_cast<double>(ctx.gpu.sms), 0.9);
  const Seconds window = std::min(ep_comm, compute / (1.0 - s));
  return 1.0 + s * window.value() / compute.value();
}

double ep_comm_sms(const TimeContext& ctx, const PlanChoice& c) {
  return c.dispatcher == megascale::Dispatcher::kDeepEp ? ctx.eff.ep_comm_sms_deepep
                                                        : ctx.eff.ep_comm_sms_nccl;
}

bool crosses_nodes(const TimeContext& ctx, const ParallelConfig& p, OpKind k) {
  // CP's K/V ring is priced over its TP x CP block (ring_link(cp, t)).
  switch (k) {
    case OpKind::kTp:
      return ctx.links.crosses_nodes(group_shape(p, GroupKind::kTp).span());
    case OpKind::kEp:
      return ctx.links.crosses_nodes(group_shape(p, GroupKind::kEp).span());
    case OpKind::kCp:
      return ctx.links.crosses_nodes(group_shape(p, GroupKind::kCp).span());
    case OpKind::kCompute:
      return false;
  }
  return false;
}

namespace {

OpWork core_attention(const TimeContext& ctx, const PlanChoice& c, bool linear_layer) {
  const ParallelConfig& p = c.parallel;
  const FlopsPerSec peak = reference_peak_of(ctx, c.precision);
  const GemmRate bf16 = reference_gemm_rate(ctx, c);
  // A Gated DeltaNet layer's recurrence, or the mean softmax layer's attention (windows and
  // DSA's indexer included): per token of this layer kind.
  const ModelSpec& m = *ctx.model;
  const double linear_layers = static_cast<double>(m.num_linear_layers());
  const double softmax_layers = static_cast<double>(m.num_layers) - linear_layers;
  const double tokens = gpu_tokens(ctx, p);
  // Fused kernels' time at the curve's efficiency for one call's FLOPs, where the measured
  // efficiency falls with the call's size: `calls` split the layer's work on this GPU (the cp
  // ring steps of softmax attention, each local queries against one rank's keys).
  const bool latent = m.attention.kind == AttentionKind::kLatent;
  auto fused = [&](double flops, double calls) {
    return OpWork{
        Flops(flops) / (peak * (c.compute_clock * ctx.eff.attention_share(flops / calls, latent))),
        flops, peak.value(), 0};
  };
  if (linear_layer) return fused(ctx.flops.forward_linear.value() / linear_layers * tokens, 1);
  // DSA's indexer runs duplicated on every TP rank over the gathered sequence (Megatron-Core
  // builds its linears with parallel_mode 'duplicated'): t ranks' tokens each. (Ulysses SP
  // gives each rank whole sequences of its heads instead, as the core.)
  const double indexer_per_token = ctx.flops.forward_indexer.value() / softmax_layers;
  const double tensor_tp = c.attention == AttentionMode::kTensor ? static_cast<double>(*p.tp) : 1.0;
  const double indexer_tp = tensor_tp - 1.0;
  if (c.attention_kernel == AttentionKernel::kFused)
    return fused(
        ((ctx.flops.forward_attention - ctx.flops.forward_linear).value() / softmax_layers +
         indexer_per_token * indexer_tp) *
            tokens,
        static_cast<double>(*p.cp));
  // Unfused: per sequence and local head (TP and Ulysses SP both leave a / t heads), scores =
  // Q K^T over every key (no causal skipping), a fused scale-mask-softmax that reads and writes
  // them (4 bytes a score), dropout that reads them and writes its output and a 1-byte mask (5),
  // then scores x V. The two batched GEMMs go through gemm_time, which also moves the scores.
  const AttentionSpec& a = ctx.model->attention;
  const double keys = static_cast<double>(ctx.seq_len);
  const double queries = keys / static_cast<double>(*p.cp);
  const double heads = static_cast<double>(*p.mbs * a.num_heads) / static_cast<double>(*p.tp);
  const OpWork gemms =
      gemm(ctx, bf16, queries, static_cast<double>(a.qk_head_dim()), keys, heads, heads) +
      gemm(ctx, bf16, queries, keys, static_cast<double>(a.value_head_dim()), heads, heads);
  const double softmax_and_dropout = 9.0 * heads * queries * keys;
  // DSA's indexer runs in its own (fused) kernel beside the unfused core, duplicated over TP.
  const double indexer = indexer_per_token * queries * static_cast<double>(*p.mbs) /
                         static_cast<double>(*p.tp) * tensor_tp;
  return gemms + streamed(ctx, softmax_and_dropout) + (indexer > 0 ? fused(indexer, 1) : OpWork{});
}

}  // namespace

Seconds core_attention_time(const TimeContext& ctx, const PlanChoice& c, bool linear_layer) {
  return core_attention(ctx, c, linear_layer).time;
}

LayerOp output_head_op(const TimeContext& ctx, const PlanChoice& c) {
  const ParallelConfig& p = c.parallel;
  const double rows = static_cast<double>(*p.mbs * ctx.seq_len) / static_cast<double>(*p.cp);
  const OpWork head =
      gemm(ctx, reference_gemm_rate(ctx, c), rows, static_cast<double>(ctx.model->hidden_size),
           static_cast<double>(ctx.model->vocab_size) / static_cast<double>(*p.tp));
  return layer_op("output head", OpKind::kCompute, head);
}

Seconds output_head_time(const TimeContext& ctx, const PlanChoice& c) {
  return output_head_op(ctx, c).time;
}

LayerOp embedding_gradient_op(const TimeContext& ctx, const PlanChoice& c) {
  const ParallelConfig& p = c.parallel;
  const double h = static_cast<double>(ctx.model->hidden_size);
  const double entries =
      static_cast<double>(ctx.model->vocab_size) / static_cast<double>(*p.tp) * h;
  const double rows = static_cast<double>(*p.mbs * ctx.seq_len) / static_cast<double>(*p.cp);
  const double e = activation_bytes(c).per_element;
  // Zero-fill, the add's read of it and its read and write of an FP32 main_grad (Megatron's
  // default; BF16 under --grad-reduce-in-bf16 moves 4 bytes an entry less, which we leave in so
  // that the search can reuse a layout's passes across gradient precisions); each token's row
  // read and added in.
  const double bytes = entries * (2.0 * e + 8.0) + rows * h * 3.0 * e;
  return layer_op("embedding gradient (dense, into main_grad)", OpKind::kCompute,
                  streamed(ctx, bytes));
}

LossPasses cross_entropy_over(const TimeContext& ctx, CrossEntropy kernel, double element_bytes,
                              double logits) {
  const double e = element_bytes;
  const bool te = kernel == CrossEntropy::kTe;
  const double forward = te ? 3.0 * e : e + 24.0, backward = te ? 2.0 * e : e + 12.0;
  return {layer_op("loss (cross entropy)", OpKind::kCompute, streamed(ctx, forward * logits)),
          streamed(ctx, backward * logits).time, cross_entropy_held(kernel, element_bytes, logits)};
}

Bytes cross_entropy_held(CrossEntropy kernel, double element_bytes, double logits) {
  return Bytes((kernel == CrossEntropy::kTe ? element_bytes : element_bytes + 4.0) * logits);
}

double loss_logits(const ModelSpec& m, const ParallelConfig& p, int64_t seq_len) {
  return static_cast<double>(*p.mbs * seq_len) / static_cast<double>(*p.cp) *
         static_cast<double>(m.vocab_size) / static_cast<double>(*p.tp);
}

LossPasses cross_entropy_passes(const TimeContext& ctx, const PlanChoice& c) {
  return cross_entropy_over(ctx, c.cross_entropy, activation_bytes(c).per_element,
                            loss_logits(*ctx.model, c.parallel, ctx.seq_len));
}

namespace {

// Memory-bound bytes per token of a layer's element-wise work, BF16, by what recompute module
// would replay it: two norms (read and write h: 8h bytes), two residual adds (read 2h, write h:
// 12h bytes), FFN activations (gated: read gate and up, write one: 6 bytes per unit of width),
// and the MoE permutation. Permute + unpermute of every routed row this GPU's experts see,
// fused (Megatron-Core's --moe-permute-fusion): each reads and writes a row, 8kh bytes.
// Unfused, the dispatcher's index_select, index_copy and probability scaling each read and
// write it and the top-k sum reads it again: 16kh. Expert TP gathers the etp group's tokens, so
// each rank sorts and scatters all of them at full width h (Megatron-Core's all-gather
// dispatcher with TP), while the expert activation (gated: 6 k g_e) is cut over etp with the
// FFN. With intra-operator overlap the scatter and gather happen in the GEMM's loads and
// stores.
struct ElementwiseBytes {
  double norms = 0, residuals = 0, expert_activation = 0, permutation = 0, shared_activation = 0,
         dense_activation = 0;
  double total() const {
    return norms + residuals + expert_activation + permutation + shared_activation +
           dense_activation;
  }
};

ElementwiseBytes elementwise_bytes(const ModelSpec& m, const PlanChoice& c, bool moe_layer,
                                   double expert_load, bool fuse_experts) {
  const double h = static_cast<double>(m.hidden_size);
  const double gated = m.gated_ffn ? 3.0 : 2.0;
  ElementwiseBytes b;
  b.norms = 8.0 * h;
  b.residuals = 12.0 * h;
  if (moe_layer) {
    const double k = static_cast<double>(m.top_k);
    b.shared_activation = 2.0 * gated * static_cast<double>(m.shared_ffn_total());
    if (!fuse_experts)
      b.permutation = (c.permute_fusion ? 8.0 : 16.0) * k * h * expert_load *
                      static_cast<double>(*c.parallel.etp);
    b.expert_activation = 2.0 * gated * k * static_cast<double>(m.expert_ffn_size) * expert_load;
  } else {
    b.dense_activation = 2.0 * gated * static_cast<double>(m.dense_ffn_size);
  }
  return b;
}

// FP8 GEMMs (Transformer Engine, any recipe) take their operands quantized: each forward input
// and each backward output gradient is read in BF16 and written in FP8 twice, row-wise and
// column-wise (the layout the transposed GEMM of the backward reads): 4 bytes an element. The
// weights are cast once a step. Casts fused into a kernel that runs anyway cost nothing extra
// under delayed scaling (fp8_cast_bytes prices the other recipes):
// the norm before a LayerNormLinear (QKV or MLA's down projections, a dense FFN's fc1, MLA's up
// projections after their latent norms) and a dense FFN's activation before fc2 (LayerNormMLP).
// What remains is a cast of the attention output before the output projection, of the routed
// tokens and of the expert activation before each grouped GEMM, of the shared experts' inputs,
// and of every GEMM's output gradient. Elements per token at full width (TP and SP cut the
// tokens a GPU holds or the width alike; expert TP gathers its group's tokens, as the
// permutation does). Linear-attention layers take their projections' width from the weights.
double fp8_cast_elements(const ModelSpec& m, const PlanChoice& c, const LayerParams& lp,
                         bool moe_layer, double expert_load) {
  const double h = static_cast<double>(m.hidden_size);
  const double gated = m.gated_ffn ? 2.0 : 1.0;
  const AttentionSpec& a = m.attention;
  const double heads = static_cast<double>(a.num_heads);
  const double qk = static_cast<double>(a.qk_head_dim()),
               v = static_cast<double>(a.value_head_dim());
  double attention = 0;  // unfused inputs and every output
  if (lp.linear) {
    attention = lp.attention / h + static_cast<double>(m.linear_attention.value_width()) + h;
  } else if (a.kind == AttentionKind::kLatent) {
    const double q =
        a.q_lora_rank > 0 ? static_cast<double>(a.q_lora_rank) + heads * qk : heads * qk;
    const double kv = static_cast<double>(a.kv_lora_rank + a.qk_rope_head_dim) +
                      heads * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim);
    attention = heads * v + q + kv + h;
  } else {
    const double q = heads * qk * (a.output_gate ? 2.0 : 1.0);
    attention = heads * v + q + 2.0 * static_cast<double>(a.num_kv_heads) * v + h;
  }
  double ffn = 0;
  if (moe_layer) {
    const double k = static_cast<double>(m.top_k) * expert_load;
    const double etp = static_cast<double>(*c.parallel.etp);
    const double g = static_cast<double>(m.expert_ffn_size);
    const double gs = static_cast<double>(m.shared_ffn_total());
    ffn = k * (h * etp + g) + k * (gated * g + h * etp);  // inputs; output gradients
    if (gs > 0) ffn += (h + gs) + (gated * gs + h);
  } else {
    ffn = gated * static_cast<double>(m.dense_ffn_size) + h;  // output gradients only
  }
  return attention + ffn;
}

// The casts fp8_cast_elements leaves out, elements per token: the norm's output into a
// LayerNormLinear (attention's input projections, MLA's up projections after their latent norms,
// a dense FFN's fc1) and a dense FFN's activation into fc2.
struct FusedCasts {
  double norm = 0, activation = 0;
};
FusedCasts fp8_fused_cast_elements(const ModelSpec& m, const LayerParams& lp, bool moe_layer) {
  const double h = static_cast<double>(m.hidden_size);
  const AttentionSpec& a = m.attention;
  FusedCasts f;
  f.norm = h;
  if (!lp.linear && a.kind == AttentionKind::kLatent)
    f.norm += static_cast<double>(a.q_lora_rank + a.kv_lora_rank);
  if (!moe_layer) {
    f.norm += h;
    f.activation = static_cast<double>(m.dense_ffn_size);
  }
  return f;
}

// HBM bytes per token of a layer's FP8 casts by recipe, as Transformer Engine 2.x runs them
// (pytorch/csrc/extensions/normalization.cpp, activation.cpp, quantizer.cpp). Only delayed
// scaling writes FP8 straight from the norm and the activation; current scaling (tensorwise)
// has them write BF16 with its amax and casts in a kernel of its own (4 bytes an element), as
// blockwise does, and MXFP8 for the norm (its activation stays fused; the norm fuses only with
// NVTE_NORM_FWD_USE_CUDNN). Current scaling also reads each standalone cast's input once more
// for its amax before casting: 6 bytes an element.
double fp8_cast_bytes(const ModelSpec& m, const PlanChoice& c, const LayerParams& lp,
                      bool moe_layer, double expert_load) {
  const double standalone = fp8_cast_elements(m, c, lp, moe_layer, expert_load);
  const FusedCasts fused = fp8_fused_cast_elements(m, lp, moe_layer);
  switch (c.fp8_recipe) {
    case Fp8Recipe::kDelayed:
      break;
    case Fp8Recipe::kTensorwise:
      return 6.0 * standalone + 4.0 * (fused.norm + fused.activation);
    case Fp8Recipe::kBlockwise:
      return 4.0 * (standalone + fused.norm + fused.activation);
    case Fp8Recipe::kMxfp8:
      return 4.0 * (standalone + fused.norm);
  }
  return 4.0 * standalone;
}

// Attention and dense FFN weights: TP splits their output width over t GPUs that all see the
// micro-batch (rows); Ulysses SP keeps them whole and splits the tokens.
struct WeightShape {
  double rows, split;
};
WeightShape weight_shape(const TimeContext& ctx, const PlanChoice& c) {
  const ParallelConfig& p = c.parallel;
  if (c.attention == AttentionMode::kUlysses) return {gpu_tokens(ctx, p), 1.0};
  return {static_cast<double>(*p.mbs * ctx.seq_len) / static_cast<double>(*p.cp),
          static_cast<double>(*p.tp)};
}

}  // namespace

Seconds mtp_projection_time(const TimeContext& ctx, const PlanChoice& c) {
  const WeightShape weights = weight_shape(ctx, c);
  const double h = static_cast<double>(ctx.model->hidden_size);
  return gemm_time(ctx, linear_gemm_rate(ctx, c), weights.rows, 2.0 * h, h / weights.split);
}

std::vector<LayerOp> layer_forward_ops(const TimeContext& ctx, const PlanChoice& c,
                                       const LayerParams& lp, bool moe_layer, double expert_load,
                                       int64_t chunk_count) {
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& p = c.parallel;
  const int64_t t = *p.tp, cp = *p.cp, ep = *p.ep, etp = *p.etp;
  const double b = static_cast<double>(*p.mbs);
  const double s = static_cast<double>(ctx.seq_len);
  const double h = static_cast<double>(m.hidden_size);
  const double tokens = gpu_tokens(ctx, p);
  const GemmRate peak = linear_gemm_rate(ctx, c);
  const bool ulysses = c.attention == AttentionMode::kUlysses;
  // Named, not a structured binding: the lambdas below capture them (clang).
  const WeightShape weights = weight_shape(ctx, c);
  const double rows = weights.rows, split = weights.split;
  // Megatron's --tp-comm-overlap (Transformer Engine's userbuffers) hides TP's all-gather and
  // reduce-scatter by running each TP-sharded GEMM beside them in t pieces of rows / t, one per
  // ring step (ring_exchange, what the Llama 3 recipes use; the older `pipeline` method cut 4):
  // the pieces run at the GEMM curve's efficiency for their own size.
  const double tp_pieces =
      t > 1 && !ulysses && c.overlap && !c.intra_overlap ? static_cast<double>(t) : 1.0;
  auto tp_gemm = [&](double k, double n) {
    return gemm(ctx, peak, rows / tp_pieces, k, n, tp_pieces);
  };
  auto ffn = [&](double width) {
    // Gate and up projections fused ([h] -> [2w] gated), then the down projection ([w] -> [h]).
    return tp_gemm(h, (m.gated_ffn ? 2.0 : 1.0) * width / split) + tp_gemm(width / split, h);
  };
  const Bytes sequence(b * s / static_cast<double>(cp) * h * kActivationBytes);
  // What FP8 does to the bytes TP collectives and the expert dispatch move (1 otherwise).
  const double fp8_wire = comm_element_bytes(c.precision) / kActivationBytes;
  // Megatron's TP with sequence parallelism: all-gather before and reduce-scatter after a block.
  // Under FP8 both travel in FP8 (MegaScale Sec. 5: FP8 all-to-all for the forward
  // reduce-scatter, FP8 all-gather for the backward; reductions in FP32).
  auto tp_pair = [&] { return ring_sent(ctx, sequence * fp8_wire, t, t) * 2.0; };

  std::vector<LayerOp> ops;
  ops.reserve(24);  // a layer has at most 20: one allocation (the search prices millions)
  auto add = [&](const char* name, OpKind kind, const OpWork& work, bool receives_tokens = false,
                 CommPattern pattern = CommPattern::kRing, Seconds pxn_saving = Seconds(0)) {
    if (!(work.time.value() > 0)) return;
    LayerOp& op = ops.emplace_back(layer_op(name, kind, work));
    op.receives_tokens = receives_tokens;
    op.pattern = pattern;
    op.pxn_saving = pxn_saving;
  };
  // Marks the ops added since `from` as replayed by recompute module `module`.
  auto replayed_by = [&](size_t from, uint32_t module) {
    for (size_t i = from; i < ops.size(); ++i) ops[i].module = module;
  };
  // A GEMM and the communication MegaScale fuses into it, tile by tile: while communication
  // runs it holds a few SMs and the GEMM goes at the rest's pace, then at full speed; the slower
  // side sets the time, plus one tile wave of the shorter to fill the pipeline.
  // The op keeps both sides (LayerOp::Fused) for the simulator, which runs them apart.
  auto add_fused = [&](const char* name, const OpWork& gemm, const OpWork& comm, OpKind comm_kind,
                       CommPattern pattern, bool receives_tokens = false,
                       Seconds pxn_saving = Seconds(0)) {
    const double f =
        ctx.eff.intra_overlap_comm_sms / static_cast<double>(ctx.gpu.sms > 0 ? ctx.gpu.sms : 132);
    const Seconds shared = std::min(comm.time, gemm.time / (1.0 - f));
    const Seconds wave = std::min(gemm.time, comm.time) / ctx.eff.intra_overlap_tiles;
    OpWork out = gemm;
    out.bytes = comm.bytes;
    out.time = std::max(comm.time, gemm.time + shared * f) + wave;
    const size_t before = ops.size();
    add(name, OpKind::kCompute, out, receives_tokens);
    if (ops.size() == before) return;
    LayerOp::Fused& side = ops.back().fused;
    side = {comm_kind,           pattern,   gemm.time + shared * f + wave, comm.time + wave,
            comm.latency + wave, pxn_saving};
  };

  // Attention: the projections as one GEMM of their total width, then the fused core; with
  // intra-operator overlap the TP or SP communication rides inside the projections.
  // DSA's indexer projections run whole on the gathered sequence on every TP rank.
  const double indexer_weights = lp.linear ? 0.0 : indexer_params(m);
  const OpWork projections =
      tp_gemm(h, ((lp.attention - indexer_weights) / split + indexer_weights) / h);
  OpWork attention_comm;
  if (t > 1 && !ulysses) {
    // An all-gather of h before attention and a reduce-scatter of h after, but multi-latent
    // attention gathers its latents instead: Megatron-Core runs the down projections
    // duplicated on each rank's sequence shard (TELinear, parallel_mode 'duplicated') and
    // gathers q's LoRA rank and the kv latent with its rope key. Without a q LoRA rank q comes
    // straight from the gathered hidden state. DeepSeek's sparse attention gathers the hidden
    // state and q's latent again for its indexer.
    const AttentionSpec& a = m.attention;
    double gathered = h;
    if (a.kind == AttentionKind::kLatent && !lp.linear) {
      const double q_in = a.q_lora_rank > 0 ? static_cast<double>(a.q_lora_rank) : h;
      gathered = q_in + static_cast<double>(a.kv_lora_rank + a.qk_rope_head_dim) +
                 (a.sparse() ? h + q_in : 0.0);
    }
    attention_comm = ring_sent(ctx, sequence * (fp8_wire * gathered / h), t, t) +
                     ring_sent(ctx, sequence * fp8_wire, t, t);
  } else if (t > 1) {
    const double ratio =
        static_cast<double>(m.attention.num_heads) / static_cast<double>(m.attention.num_kv_heads);
    const double nn = static_cast<double>(t);
    // Eq. (2) is what each rank sends; the all-to-all carries it as (n-1)/n of its buffer.
    const Bytes buffer(
        megascale::sp_attention_volume(*p.mbs, ctx.seq_len, m.hidden_size, t, ratio) /
        static_cast<double>(cp) * kActivationBytes);
    attention_comm = alltoall_sent(ctx, buffer * (nn / (nn - 1)), t, 1);
  }
  const bool fuse_attention = c.intra_overlap && attention_comm.time.value() > 0;
  if (fuse_attention) {
    add_fused("attention projections (fused TP/SP communication)", projections, attention_comm,
              OpKind::kTp, ulysses ? CommPattern::kAllToAll : CommPattern::kRing);
  } else {
    add("attention projections", OpKind::kCompute, projections);
  }
  const OpWork core_work = core_attention(ctx, c, lp.linear);
  const Seconds core = core_work.time;
  add("core attention", OpKind::kCompute, core_work);
  if (core.value() > 0) ops.back().module = kRecomputeCoreAttn;
  // Context parallelism: K and V of the local chunk travel around the ring, hidden behind core
  // attention where it can be; what is left shows. A Gated DeltaNet layer has no keys to pass
  // round: Megatron-Core's CP for it (ssm/context_parallel/gdn_recurrent.py) runs each shard's
  // chunk-local work at once, but a rank starts its inter-chunk state scan only when the rank
  // before hands over its final state (b x n_v / t heads of d_k x d_v, FP32), so the scans run
  // rank after rank: cp - 1 more of them and their hand-offs before the last rank is through
  // (backward passes the state's adjoint back the same way).
  if (cp > 1 && lp.linear) {
    const LinearAttentionSpec& la = m.linear_attention;
    const Bytes state(b * static_cast<double>(la.value_heads) / static_cast<double>(t) *
                      static_cast<double>(la.key_head_dim * la.value_head_dim) * 4.0);
    const Seconds hand_off = state / ctx.links.ring_link(cp, t) + ctx.links.latency(t * cp);
    // The scans hold no link either: only the hand-offs' bytes do.
    const double steps = static_cast<double>(cp - 1);
    add("linear attention CP state hand-off", OpKind::kCp,
        sent((core * linear_attention_scan_share(m) + hand_off) * steps, state * steps,
             (core * linear_attention_scan_share(m) + ctx.links.latency(t * cp)) * steps));
  } else if (cp > 1) {
    const AttentionSpec& a = m.attention;
    const double kv_width =
        static_cast<double>(a.num_kv_heads * (a.qk_head_dim() + a.value_head_dim())) /
        static_cast<double>(t);
    const Bytes ring(b * s / static_cast<double>(cp) * kv_width * kActivationBytes *
                     static_cast<double>(cp - 1));
    const Seconds latency = ctx.links.latency(t * cp) * static_cast<double>(cp - 1);
    const Seconds send = ring / ctx.links.ring_link(cp, t) + latency;
    // What shows past core attention: each step's send less its compute, latency in the same
    // share as in the whole ring.
    const Seconds shown = std::max(Seconds(0), send - core);
    add("context-parallel K/V ring", OpKind::kCp, sent(shown, ring, latency * (shown / send)));
  }
  if (!fuse_attention) {
    add(ulysses ? "Ulysses SP all-to-all" : "attention TP all-gather + reduce-scatter", OpKind::kTp,
        attention_comm, false, ulysses ? CommPattern::kAllToAll : CommPattern::kRing);
  }

  // A dense or shared FFN under TP: its all-gather and reduce-scatter, fused into it with
  // intra-operator overlap.
  auto add_ffn = [&](const char* name, const char* comm_name, const OpWork& gemm) {
    const OpWork comm = t > 1 && !ulysses ? tp_pair() : OpWork{};
    if (c.intra_overlap && comm.time.value() > 0) {
      add_fused(name, gemm, comm, OpKind::kTp, CommPattern::kRing);
      return;
    }
    add(name, OpKind::kCompute, gemm);
    add(comm_name, OpKind::kTp, comm);
  };

  bool fuse_experts = false;
  if (moe_layer) {
    const size_t moe_begin = ops.size();
    const double k = static_cast<double>(m.top_k);
    const double chunks = static_cast<double>(std::max<int64_t>(chunk_count, 1));
    add("router", OpKind::kCompute,
        gemm(ctx, peak, tokens, h, static_cast<double>(m.num_routed_experts)));
    // Dispatch and combine, each half of a pair; `wire` scales the bytes moved (FP8 dispatch).
    // The work records each half's collective size: DeepEP's as the all-to-all's send buffer it
    // replaces (it sends each token once per destination rank or node instead of once per
    // expert).
    // The expert all-to-all MoNTA pipelines (experts tensor-parallel across EP), at the busiest
    // rank's tokens and `wire`'s bytes.
    auto monta_problem = [&](double wire) {
      monta::Problem prob = expert_alltoall_problem(ctx, c);
      prob.volume = prob.volume * (expert_load / ctx.skew.imbalance(m, ep) * wire);
      return prob;
    };
    auto pair_at = [&](double wire) {
      OpWork pair;
      if (ep == 1 && etp > 1) {
        // Experts split like TP: all-gather the sequence-parallel tokens, reduce-scatter the
        // outputs (MegaScale eq. 4).
        pair = ring_sent(ctx, sequence * wire, etp, etp) * 2.0;
      } else if (ep > 1) {
        const Bytes per_rank(tokens * k * h * kActivationBytes * expert_load * wire);
        if (etp > 1) {
          // MoNTA: expert TP inside the node; the chosen AllToAll strategy for dispatch, again
          // for combine.
          const monta::Problem prob = monta_problem(wire);
          pair = sent(monta::run_strategy(prob, c.alltoall, c.alltoall_chunks).time, prob.volume) *
                 2.0;
        } else if (c.dispatcher == megascale::Dispatcher::kDeepEp) {
          const Bytes rows(tokens * h * kActivationBytes * expert_load * wire);
          pair =
              sent(deepep_times(ctx, rows, ep), per_rank, alltoall_latency(ctx, rows, ep, 1)) * 2.0;
        } else if (c.dispatcher == megascale::Dispatcher::kAllGather) {
          // MegaScale Sec. 3.2: all-gather the EP group's tokens, reduce-scatter the outputs.
          const Bytes total(static_cast<double>(ep) * tokens * h * kActivationBytes * wire);
          pair = ring_sent(ctx, total, ep, ep * etp) * 2.0;
        } else {
          pair = alltoall_sent(ctx, per_rank, ep, etp) * 2.0;
        }
        // FCDA: every further chunk pays the collective latency again, dispatch and combine,
        // and the dispatcher's preprocessing, host sync and launches of one more
        // dispatch-compute-combine round. MemFine measures fixed c = 8 at 5.4 % below c = 1
        // (Model II, Sec. 5), so chunks are not free.
        // Neither holds a link.
        const Seconds rounds =
            (ctx.links.latency(ep * etp) * 2.0 + ctx.eff.dispatch_round_overhead) * (chunks - 1.0);
        pair.time += rounds;
        pair.latency += rounds;
      }
      return pair;
    };
    // Under FP8 the dispatch moves FP8 tokens and the combine BF16 outputs (DeepSeek-V3, and
    // MegaScale's FP8 TP collectives when the experts are tensor-parallel).
    const OpWork pair = pair_at(1.0);
    const OpWork dispatch_pair = fp8_wire < 1.0 ? pair_at(fp8_wire) : pair;
    const OpWork combine_pair = ep == 1 && etp > 1 ? dispatch_pair : pair;
    // The pair prices both halves at the busiest rank's bytes. Its combine sends them out, and
    // across nodes PXN spreads that over the node's NICs (the dispatch brings them in through
    // its own NIC, which nothing spreads): what the combine gains. Backward swaps the halves.
    Seconds combine_relief;
    if (ep > 1 && etp == 1 && c.dispatcher == megascale::Dispatcher::kAllToAll) {
      const Bytes balanced(tokens * k * h * kActivationBytes);
      combine_relief =
          std::max(Seconds(0), alltoall_time(ctx, balanced * expert_load, ep, etp) -
                                   alltoall_from_heavy_time(ctx, balanced, expert_load, ep, etp));
    }
    // MegaScale fuses dispatch (all-gather + scatter) and combine (gather + reduce-scatter)
    // into the grouped GEMM; MoNTA's pipelined AllToAll (expert TP across EP) keeps its own.
    fuse_experts =
        c.intra_overlap && !(etp > 1 && ep > 1) && (dispatch_pair + combine_pair).time.value() > 0;
    // The all-gather dispatcher and expert TP without EP move tokens around a ring; the
    // all-to-all dispatcher (MoNTA's too) from every EP rank to every other.
    const CommPattern ep_pattern =
        ep > 1 && (etp > 1 || c.dispatcher != megascale::Dispatcher::kAllGather)
            ? CommPattern::kAllToAll
            : CommPattern::kRing;
    // MoNTA's halves as their streams hold them (simulator/training_pass.cpp, add_monta).
    auto monta_streams = [&](double wire) {
      if (!(etp > 1 && ep > 1) || c.alltoall == monta::Strategy::kBaseline) return;
      LayerOp& op = ops.back();
      const monta::StrategyRun run =
          monta::run_strategy(monta_problem(wire), c.alltoall, c.alltoall_chunks);
      const monta::ChunkCosts& piece = run.per_chunk;
      const double pieces = static_cast<double>(run.chunks);
      const bool o2 = c.alltoall == monta::Strategy::kO2;
      // Whatever the op holds beyond MoNTA's own time (FCDA's rounds) rides the all-to-all.
      const Seconds residual = std::max(Seconds(0), op.time - run.time);
      op.monta_in_node_link = piece.allgather * pieces;
      op.monta_in_node = (piece.allgather + (o2 ? piece.d2d : Seconds(0))) * pieces;
      op.monta_alltoall = (piece.alltoall + run.overhead) * pieces + residual;
    };
    if (!fuse_experts) {
      add("dispatch", OpKind::kEp, dispatch_pair * 0.5, true, ep_pattern);
      monta_streams(fp8_wire < 1.0 ? fp8_wire : 1.0);
    }
    // Grouped GEMM: each local expert sees its share of the routed tokens (all of the ETP
    // group's), in `chunks` pieces under FCDA, with its FFN cut over etp.
    const double local_experts = static_cast<double>(m.num_routed_experts / ep);
    const double per_expert =
        k * tokens * static_cast<double>(etp) * expert_load / local_experts / chunks;
    const double g = static_cast<double>(m.expert_ffn_size) / static_cast<double>(etp);
    const double calls = local_experts * chunks;
    const OpWork experts =
        gemm(ctx, peak, per_expert, h, (m.gated_ffn ? 2.0 : 1.0) * g, calls, local_experts) +
        gemm(ctx, peak, per_expert, g, h, calls, local_experts);
    OpWork combine = combine_pair * 0.5;
    combine.time = combine.time - combine_relief;
    if (fuse_experts) {
      add_fused(kFusedExpertsOp, experts, dispatch_pair * 0.5 + combine, OpKind::kEp, ep_pattern,
                true, combine_relief);
    } else {
      add("routed experts", OpKind::kCompute, experts, true);
      add("combine", OpKind::kEp, combine, false, ep_pattern, combine_relief);
      monta_streams(1.0);
    }
    if (m.shared_ffn_total() > 0) {
      add_ffn("shared experts", "shared FFN TP all-gather + reduce-scatter",
              ffn(static_cast<double>(m.shared_ffn_total())));
    }
    replayed_by(moe_begin, kRecomputeMoe);
  } else {
    const size_t mlp_begin = ops.size();
    add_ffn("dense FFN", "FFN TP all-gather + reduce-scatter",
            ffn(static_cast<double>(m.dense_ffn_size)));
    replayed_by(mlp_begin, kRecomputeMlp);
  }
  // Norms, residuals, activations and the permutation: elementwise_bytes.
  add("norms, residuals, activations", OpKind::kCompute,
      streamed(ctx,
               elementwise_bytes(m, c, moe_layer, expert_load, fuse_experts).total() * tokens));
  // The forward holds a third of the casts: a backward costs twice its forward's compute.
  if (c.precision == Precision::kFp8) {
    add("FP8 casts", OpKind::kCompute,
        streamed(ctx, fp8_cast_bytes(m, c, lp, moe_layer, expert_load) * tokens / 3.0));
  }
  return ops;
}

std::vector<ReplayedOp> recompute_ops(const TimeContext& ctx, const PlanChoice& c, bool moe_layer,
                                      double expert_load, const std::vector<LayerOp>& forward) {
  std::vector<ReplayedOp> out;
  if (c.recompute != Recompute::kSelective) return out;
  const ModelSpec& m = *ctx.model;
  const uint32_t mods = c.recompute_modules;
  bool fused_experts = false;
  for (size_t i = 0; i < forward.size(); ++i) {
    fused_experts = fused_experts || std::string_view(forward[i].name) == kFusedExpertsOp;
    if (forward[i].module & mods) out.push_back({forward[i], static_cast<int>(i)});
  }
  // Element-wise work the module replays: the norms (layernorm), the expert activation
  // (moe_act, unless moe replays it with the rest of the block), the MoE block's or the dense
  // FFN's own.
  const ElementwiseBytes b = elementwise_bytes(m, c, moe_layer, expert_load, fused_experts);
  double bytes = 0;
  if (mods & kRecomputeLayernorm) bytes += b.norms;
  if (moe_layer && (mods & kRecomputeMoe)) {
    bytes += b.expert_activation + b.permutation + b.shared_activation;
  } else if (moe_layer && (mods & kRecomputeMoeAct)) {
    bytes += b.expert_activation;
  }
  if (!moe_layer && (mods & kRecomputeMlp)) bytes += b.dense_activation;
  const double tokens = gpu_tokens(ctx, c.parallel);
  if (bytes > 0) {
    out.push_back(
        {layer_op("recomputed element-wise work", OpKind::kCompute, streamed(ctx, bytes * tokens)),
         -1});
  }
  // mla_up_proj: the two up projections from the kept latents, q (when compressed) and kv.
  const AttentionSpec& a = m.attention;
  if ((mods & kRecomputeMlaUpProj) && a.kind == AttentionKind::kLatent) {
    const WeightShape weights = weight_shape(ctx, c);
    const double rows = weights.rows;
    const double heads = static_cast<double>(a.num_heads) / weights.split;
    const GemmRate peak = linear_gemm_rate(ctx, c);
    OpWork up = gemm(ctx, peak, rows, static_cast<double>(a.kv_lora_rank),
                     heads * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim));
    if (a.q_lora_rank > 0)
      up += gemm(ctx, peak, rows, static_cast<double>(a.q_lora_rank),
                 heads * static_cast<double>(a.qk_head_dim()));
    out.push_back({layer_op("recomputed MLA up projections", OpKind::kCompute, up), -1});
  }
  return out;
}

}  // namespace moe
