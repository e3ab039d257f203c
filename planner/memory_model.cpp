#include "planner/memory_model.h"

#include <algorithm>
#include <limits>

#include "planner/megascale.h"
#include "planner/model_stats.h"

namespace moe {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
    case Recompute::kRematerialize:
      return "sar";
  }
  return "?";
}

std::optional<Recompute> recompute_from_name(const std::string& name) {
  for (Recompute r :
       {Recompute::kNone, Recompute::kSelective, Recompute::kFull, Recompute::kRematerialize}) {
    if (name == recompute_name(r)) return r;
  }
  return std::nullopt;
}

namespace {

constexpr std::pair<const char*, uint32_t> kModuleNames[] = {{"core_attn", kRecomputeCoreAttn},
                                                             {"moe_act", kRecomputeMoeAct},
                                                             {"layernorm", kRecomputeLayernorm},
                                                             {"mla_up_proj", kRecomputeMlaUpProj},
                                                             {"mlp", kRecomputeMlp},
                                                             {"moe", kRecomputeMoe}};

constexpr std::pair<const char*, uint32_t> kOffloadNames[] = {
    {"attn_norm", kOffloadAttnNorm},   {"core_attn", kOffloadCoreAttn},
    {"attn_proj", kOffloadAttnProj},   {"mlp_norm", kOffloadMlpNorm},
    {"expert_fc1", kOffloadExpertFc1}, {"moe_act", kOffloadMoeAct}};

template <size_t N>
std::vector<std::string> names_of(const std::pair<const char*, uint32_t> (&table)[N],
                                  uint32_t mask) {
  std::vector<std::string> out;
  for (const auto& [name, bit] : table)
    if (mask & bit) out.emplace_back(name);
  return out;
}

template <size_t N>
std::optional<uint32_t> mask_of(const std::pair<const char*, uint32_t> (&table)[N],
                                const std::vector<std::string>& names, std::string* unknown) {
  uint32_t mask = 0;
  for (const std::string& n : names) {
    const auto* it = std::find_if(std::begin(table), std::end(table),
                                  [&](const auto& entry) { return n == entry.first; });
    if (it == std::end(table)) {
      if (unknown) *unknown = n;
      return std::nullopt;
    }
    mask |= it->second;
  }
  return mask;
}

}  // namespace

std::vector<std::string> offload_module_names(uint32_t modules) {
  return names_of(kOffloadNames, modules);
}

std::optional<uint32_t> offload_modules_from_names(const std::vector<std::string>& names,
                                                   std::string* unknown) {
  return mask_of(kOffloadNames, names, unknown);
}

bool offload_allowed(Recompute r) {
  return r == Recompute::kNone || r == Recompute::kSelective;
}

std::vector<std::string> recompute_module_names(uint32_t modules) {
  return names_of(kModuleNames, modules);
}

std::optional<uint32_t> recompute_modules_from_names(const std::vector<std::string>& names,
                                                     std::string* unknown) {
  return mask_of(kModuleNames, names, unknown);
}

memfine::LayerShape moe_layer_shape(const ModelSpec& m, const ParallelConfig& p, int64_t seq_len,
                                    double bytes_per_element, bool attention_replicated) {
  memfine::LayerShape s;
  s.bytes_per_element = bytes_per_element;
  s.micro_batch = *p.mbs;
  s.seq_len = seq_len;
  s.hidden = m.hidden_size;
  s.heads = m.attention.num_heads;
  s.head_dim = m.attention.qk_head_dim();
  s.kv_heads = m.attention.num_kv_heads;
  s.experts = m.num_routed_experts;
  s.expert_ffn = m.is_moe() ? m.expert_ffn_size : m.dense_ffn_size;
  const AttentionSpec& a = m.attention;
  if (a.sparse()) {
    // Every TP rank runs the indexer over the gathered sequence: t shards' worth a rank. Ulysses
    // SP gives each rank whole sequences of its heads instead, and no rank repeats it.
    s.indexer_width =
        (a.indexer_heads * a.indexer_head_dim + a.indexer_head_dim + a.indexer_heads) *
        (attention_replicated ? 1 : *p.tp);
  }
  if (!m.linear_layer.empty() || a.output_gate) {
    // Softmax layers: q (and its gate), k and v. Gated DeltaNet layers: q, k and v before and
    // after the convolution, the gate z and the recurrence's output, beta and the decay (one a
    // head). Kimi Delta Attention decays per key channel (K) and keeps both low-rank gates'
    // inner activations (r each).
    const LinearAttentionSpec& l = m.linear_attention;
    const double softmax = s.attention_elements() +
                           (a.output_gate ? static_cast<double>(a.num_heads * a.head_dim) : 0.0);
    const double qkv = static_cast<double>(2 * l.key_width() + l.value_width());
    const double heads = static_cast<double>(l.value_heads);
    const double decay = l.kind == LinearAttentionKind::kKimiDelta
                             ? static_cast<double>(l.key_width() + 2 * l.gate_rank)
                             : heads;
    const double linear = 2.0 * qkv + 2.0 * static_cast<double>(l.value_width()) + heads + decay;
    const double n = static_cast<double>(m.num_linear_layers());
    const double layers = static_cast<double>(m.num_layers);
    s.attention_width = ((layers - n) * softmax + n * linear) / layers;
  }
  s.tp = *p.tp;
  s.cp = *p.cp;
  return s;
}

double balanced_received_tokens(const ModelSpec& m, int64_t seq_len) {
  return static_cast<double>(seq_len) * static_cast<double>(std::max<int64_t>(m.top_k, 1));
}

double worst_received_tokens(const ModelSpec& m, const ParallelConfig& p, int64_t seq_len) {
  if (!m.is_moe()) return static_cast<double>(seq_len);
  // Every rank of the EP group sends each token to as many of this GPU's experts as top-k allows.
  const int64_t local_experts = m.num_routed_experts / *p.ep;
  return static_cast<double>(*p.ep) * static_cast<double>(seq_len) *
         static_cast<double>(std::min(m.top_k, local_experts));
}

namespace {

// Activation of one layer under the recompute mode, per MemFine Table 2. Dense layers use the
// same rows with g_d in place of g_e, s tokens in place of s'', and no router.
Bytes layer_activation(memfine::LayerShape s, bool moe_layer, const ModelSpec& m,
                       double received_tokens, int64_t chunks, Recompute recompute,
                       double remat_ratio, uint32_t modules) {
  if (!moe_layer) {
    s.experts = 0;
    s.expert_ffn = m.dense_ffn_size;
    received_tokens = static_cast<double>(s.seq_len);
    chunks = 1;
  }
  Bytes seq = memfine::sequence_activation(s);
  // An unfused kernel's score matrix: (a / t) heads of (s / c) queries x s keys per sequence.
  // Every recompute mode keeps it for the layer being run backward (full recompute too: m_g = 1
  // counts that layer); none of the MemFine or MegaScale modes recomputes core attention, so
  // rematerialization's share below leaves it whole.
  const Bytes scores = attention_score_bytes(s);
  Bytes per_token = memfine::activation_per_received_token(s);
  bool keep_scores = true;
  if (recompute == Recompute::kSelective) {
    const double tc = static_cast<double>(s.tp * s.cp);
    const double tokens = static_cast<double>(s.micro_batch * s.seq_len) / tc;
    // layernorm: rows 1 and 8 (2 x D_t b s h); moe_act: one g_e-wide row of row 12, in MoE
    // layers only (Megatron's moe_act replays the experts' activation; a dense layer's FFN
    // activation goes only with mlp, below, as recompute_ops replays it).
    if (modules & kRecomputeLayernorm)
      seq -= Bytes(2.0 * s.bytes_per_element * tokens * static_cast<double>(s.hidden));
    if (moe_layer && (modules & kRecomputeMoeAct))
      per_token -= Bytes(s.gemm_input() * s.micro_batch * s.expert_ffn / tc);
    // moe: the whole routed-token term and the router's logits; mlp: a dense layer's FFN
    // term. Each keeps its input, row 8.
    if ((moe_layer && (modules & kRecomputeMoe)) || (!moe_layer && (modules & kRecomputeMlp))) {
      per_token = Bytes(0);
      if (moe_layer) seq -= Bytes(s.bytes_per_element * tokens * static_cast<double>(s.experts));
    }
    // mla_up_proj: Q, K and V at full width go; their latents (q and kv LoRA ranks and the
    // shared rope key), which eq. (2) does not count, stay.
    const AttentionSpec& a = m.attention;
    if ((modules & kRecomputeMlaUpProj) && a.kind == AttentionKind::kLatent) {
      const double latents =
          static_cast<double>(a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim);
      seq -= Bytes(s.bytes_per_element * tokens * (s.attention_elements() - latents));
    }
    keep_scores = !(modules & kRecomputeCoreAttn);
  }
  const Bytes layer = seq + per_token * memfine::tokens_per_chunk(received_tokens, chunks);
  return (recompute == Recompute::kRematerialize ? layer * remat_ratio : layer) +
         (keep_scores ? scores : Bytes(0));
}

// One layer and micro-batch (one FCDA chunk of its routed tokens): the part of what
// layer_activation keeps that offloading `offload` sends to the host. What recompute already
// drops is not sent: the norms' rows under layernorm recompute, q, k and v under MLA's
// mla_up_proj, the routed-token rows under moe. Dense layers have no expert rows to send.
Bytes layer_offloaded(const memfine::LayerShape& s, bool moe_layer, const ModelSpec& m,
                      double received_tokens, int64_t chunks, Recompute recompute,
                      uint32_t recompute_modules, uint32_t offload) {
  if (offload == 0 || !offload_allowed(recompute)) return Bytes(0);
  const uint32_t mods = recompute == Recompute::kSelective ? recompute_modules : 0;
  const double tc = static_cast<double>(s.tp * s.cp);
  const double tokens = static_cast<double>(s.micro_batch * s.seq_len) / tc;
  const double h = static_cast<double>(s.hidden);
  double sequence = 0;  // bytes a token
  if (!(mods & kRecomputeLayernorm)) {
    if (offload & kOffloadAttnNorm) sequence += s.bytes_per_element * h;
    if (offload & kOffloadMlpNorm) sequence += s.bytes_per_element * h;
  }
  const bool latent_recomputed =
      (mods & kRecomputeMlaUpProj) && m.attention.kind == AttentionKind::kLatent;
  if ((offload & kOffloadCoreAttn) && !latent_recomputed)
    sequence += s.bytes_per_element * s.attention_elements();
  if (offload & kOffloadAttnProj) sequence += s.gemm_input() * h;
  double routed = 0;  // bytes a received token
  if (moe_layer && !(mods & kRecomputeMoe)) {
    if (offload & kOffloadExpertFc1) routed += s.gemm_input() * h;
    if (offload & kOffloadMoeAct) routed += s.bytes_per_element * static_cast<double>(s.expert_ffn);
  }
  return Bytes(sequence * tokens +
               routed * static_cast<double>(s.micro_batch) / tc *
                   (moe_layer ? memfine::tokens_per_chunk(received_tokens, chunks) : 0.0));
}

// MegaScale App. A.2: what rematerialization keeps of a layer, (2kf + 4 + 2/m) over
// (2n + 2k + 3kf + 12 + 5/m), with n the model-parallel size inside the node (EP for MoE
// layers), k top-k (1 for a dense FFN), f = FFN width / h, m = query / KV heads.
double remat_ratio(const ModelSpec& m, const ParallelConfig& p, bool moe_layer) {
  const int64_t n = std::max<int64_t>(moe_layer ? *p.ep : *p.tp, 1);
  const int64_t k = moe_layer ? m.top_k : 1;
  const double f = static_cast<double>(moe_layer ? m.expert_ffn_size : m.dense_ffn_size) /
                   static_cast<double>(m.hidden_size);
  const double heads =
      static_cast<double>(m.attention.num_heads) / static_cast<double>(m.attention.num_kv_heads);
  return megascale::activation_units_remat(k, f, heads) /
         megascale::activation_units_full(n, k, f, heads);
}

}  // namespace

LayerWeights stage_layer_weights(const ModelSpec& m, const ModelParams& all,
                                 const ParallelConfig& p, int64_t stage, bool sp_attention) {
  const double tp = static_cast<double>(*p.tp);
  const double expert_shards = static_cast<double>(*p.ep * *p.etp);
  LayerWeights out;
  const double latent_duplicated = sp_attention ? 0.0 : latent_duplicated_params(m);
  auto add = [&](const LayerParams& l, double times) {
    // Norms and the router are replicated across TP; projections and FFNs are split. Ulysses SP
    // keeps attention, shared experts and dense FFNs whole on every SP rank (layer_ops runs
    // them unsplit on the rank's tokens); the SP group is data-parallel for them, so the
    // distributed optimizer shards them over SP x DP (MegaScale Sec. 6.2: SP costs 1.7-8.1 %
    // more parameter memory, not the t-fold a replica per rank would) and their gradients
    // sync hierarchically (App. A.1, time_model's dp_sync_times).
    // MLA's down projections stay whole on every TP rank.
    const double duplicated = l.linear ? 0.0 : latent_duplicated;
    const double split_weights = l.attention - duplicated + l.shared_experts + l.dense_ffn;
    out.dense +=
        (l.norms + l.router + duplicated + (sp_attention ? 0.0 : split_weights / tp)) * times;
    out.replicated += (sp_attention ? split_weights : 0.0) * times;
    out.expert += l.routed_experts / expert_shards * times;
  };
  for_each_stage_layer(m, p, stage,
                       [&](int64_t i) { add(all.layers[static_cast<size_t>(i)], 1.0); });
  // The MTP modules (on the last stage unless a layout moves them): each a layer like the
  // model's last, the projection of the two normed streams [2h -> h] (TP-split) and three norms.
  if (stage == mtp_stage(p) && m.mtp_layers > 0) {
    const double modules = static_cast<double>(m.mtp_layers);
    const double h = static_cast<double>(m.hidden_size);
    add(all.layers.back(), modules);
    out.dense += (2.0 * h * h / tp + 3.0 * h) * modules;
  }
  return out;
}

namespace {

// The stage's layer weights plus the embedding on the first stage and the head on the last.
LayerWeights stage_params(const ModelSpec& m, const ModelParams& all, const ParallelConfig& p,
                          int64_t stage, bool attention_replicated) {
  const double tp = static_cast<double>(*p.tp);
  LayerWeights out = stage_layer_weights(m, all, p, stage, attention_replicated);
  if (stage == 0) out.dense += all.embedding / tp;
  if (stage == *p.pp - 1)
    out.dense += last_stage_head_params(all, *p.pp == 1) / tp + all.final_norm;
  // MTP embeds the shifted tokens: its stage holds the embedding too, unless it is the first or
  // it is the last of a tied model (whose head is the embedding).
  const bool tied_last = stage == *p.pp - 1 && all.output_head <= 0;
  if (m.mtp_layers > 0 && stage == mtp_stage(p) && stage != 0 && !tied_last)
    out.dense += all.embedding / tp;
  return out;
}

Bytes sharded_static(double params, int64_t shards, int zero,
                     const memfine::StaticBytesPerParam& b) {
  const double d = static_cast<double>(shards);
  const double opt = 4.0 * b.optimizer_states;
  double per = 0;
  switch (zero) {
    case 0:
      per = b.param + b.grad + opt;
      break;
    case 1:
      per = b.param + b.grad + opt / d;
      break;
    case 2:
      per = b.param + (b.grad + opt) / d;
      break;
    default:
      per = (b.param + b.grad + opt) / d;
      break;
  }
  return Bytes(params * per);
}

}  // namespace

Bytes attention_score_bytes(const memfine::LayerShape& s) {
  return Bytes(s.score_bytes * static_cast<double>(s.micro_batch) * static_cast<double>(s.heads) /
               static_cast<double>(s.tp) * static_cast<double>(s.seq_len) /
               static_cast<double>(s.cp) * static_cast<double>(s.seq_len));
}

Bytes layer_activation_bytes(const ModelSpec& m, const ParallelConfig& p,
                             const memfine::LayerShape& shape, bool moe_layer,
                             double received_tokens, int64_t chunks, Recompute recompute,
                             uint32_t modules) {
  return layer_activation(shape, moe_layer, m, received_tokens, chunks, recompute,
                          remat_ratio(m, p, moe_layer), modules);
}

Bytes layer_offloaded_bytes(const ModelSpec& m, const memfine::LayerShape& shape, bool moe_layer,
                            double received_tokens, Recompute recompute, uint32_t recompute_modules,
                            uint32_t offload) {
  return layer_offloaded(shape, moe_layer, m, received_tokens, 1, recompute, recompute_modules,
                         offload);
}

MemoryReport estimate_memory(const ModelSpec& m, const ParallelConfig& p, const MemoryRequest& r) {
  return estimate_memory(m, count_params(m), p, r);
}

MemoryReport estimate_memory(const ModelSpec& m, const ModelParams& all, const ParallelConfig& p,
                             const MemoryRequest& r) {
  MemoryReport report;
  report.moe_shape = moe_layer_shape(m, p, r.seq_len, r.bytes_per_element, r.attention_replicated);
  report.moe_shape.gemm_input_bytes = r.gemm_input_bytes;
  report.moe_shape.score_bytes = r.score_bytes;
  report.received_tokens = r.received_tokens.value_or(balanced_received_tokens(m, r.seq_len));
  if (!r.chunk_bins.empty()) report.largest_chunk_bin = r.chunk_bins.back();
  report.fits = true;
  const bool full = r.recompute == Recompute::kFull;
  const bool remat = r.recompute == Recompute::kRematerialize;
  const double remat_moe = remat ? remat_ratio(m, p, true) : 1.0,
               remat_dense = remat ? remat_ratio(m, p, false) : 1.0;
  for (int64_t stage = 0; stage < *p.pp; ++stage) {
    StageMemory s;
    s.stage = stage;
    s.first_layer = chunk_layers(m, p, stage, 0).begin;
    s.num_layers = layers_in_stage(m, p, stage);
    // The MTP modules (the last stage's) hold activations as the model's last layer does.
    const int64_t mtp = stage == mtp_stage(p) ? m.mtp_layers : 0;
    for_each_stage_layer(
        m, p, stage, [&](int64_t i) { s.num_moe_layers += m.moe_layer[static_cast<size_t>(i)]; });
    if (m.num_layers > 0) s.num_moe_layers += mtp * m.moe_layer.back();
    const LayerWeights params = stage_params(m, all, p, stage, r.attention_replicated);
    s.params_per_gpu = params.dense + params.replicated + params.expert;
    s.expert_params_per_gpu = params.expert;
    const double schedule_mg = r.gpipe_microbatches
                                   ? static_cast<double>(*r.gpipe_microbatches)
                                   : memfine::stored_microbatches(*p.pp, *p.vpp, stage, false);
    s.m_g = full ? 1.0 : schedule_mg;
    const int64_t layers_per_chunk = (s.num_layers + *p.vpp - 1) / *p.vpp;

    if (r.static_override) {
      s.static_bytes = *r.static_override;
    } else {
      // Optimizer CPU offload keeps its share of the states in host memory.
      auto sharded = [&](const memfine::StaticBytesPerParam& b) {
        return sharded_static(params.dense, *p.dp, r.zero_stage, b) +
               sharded_static(params.replicated, *p.dp * *p.tp, r.zero_stage, b) +
               sharded_static(params.expert, p.expert_dp(), r.zero_stage, b);
      };
      memfine::StaticBytesPerParam b = r.static_bytes;
      b.optimizer_states *= 1.0 - r.optimizer_offload;
      s.static_bytes = sharded(b);
      if (r.optimizer_offload > 0) {
        const memfine::StaticBytesPerParam host{
            0, 0, r.static_bytes.optimizer_states * r.optimizer_offload};
        s.host_bytes = sharded(host);
        s.host_fits = !(r.host_capacity.value() > 0) || s.host_bytes <= r.host_capacity;
      }
      if (full)
        s.checkpoint_bytes =
            memfine::recompute_checkpoints(report.moe_shape, schedule_mg, layers_per_chunk);
    }

    // Activation at c chunks: full recompute holds one layer (the largest); otherwise m_g
    // chunk-micro-batches of l/v layers each. A layer's activation depends only on whether it
    // is a MoE layer: one of each kind, counted (the MTP modules as the model's last layer).
    const double moe_layers = static_cast<double>(s.num_moe_layers);
    const double dense_layers = static_cast<double>(s.num_layers + mtp) - moe_layers;
    // Offloading sends part of each layer's activations to the host; Megatron keeps two
    // layers' worth on the GPU: the layer whose forward has not finished its copy (or whose
    // backward has reloaded it), and the first micro-batch's last layer, which it never sends.
    auto offloaded_at = [&](bool moe, double tokens, int64_t chunks) {
      return layer_offloaded(report.moe_shape, moe, m, tokens, chunks, r.recompute,
                             r.recompute_modules, r.offload_modules);
    };
    // The loss's logits on the stages with an output head; a measured static memory (MemFine
    // Table 4) holds them already, as it holds the checkpoints.
    const double heads =
        r.static_override ? 0.0 : static_cast<double>((stage == *p.pp - 1 ? 1 : 0) + mtp);
    const Bytes loss = r.loss_bytes * heads *
                       static_cast<double>(r.gpipe_microbatches ? *r.gpipe_microbatches : 1);
    auto activation_at = [&](int64_t chunks) {
      Bytes largest, sum, most_offloaded;
      for (const bool moe : {true, false}) {
        const double count = moe ? moe_layers : dense_layers;
        if (count <= 0) continue;
        const Bytes a =
            layer_activation(report.moe_shape, moe, m, report.received_tokens, chunks, r.recompute,
                             moe ? remat_moe : remat_dense, r.recompute_modules);
        const Bytes off = offloaded_at(moe, report.received_tokens, chunks);
        largest = std::max(largest, a);
        most_offloaded = std::max(most_offloaded, off);
        sum += (a - off) * count;
      }
      if (full) return largest + loss;
      return sum * (s.m_g / static_cast<double>(*p.vpp)) + most_offloaded * 2.0 + loss;
    };
    s.offloaded_per_layer = std::max(offloaded_at(true, report.received_tokens, 1),
                                     offloaded_at(false, report.received_tokens, 1));

    // MACT, eq. (8)-(9), on the stage's MoE layer shape with its m_g and layer count folded in.
    const Bytes fixed = s.static_bytes + s.checkpoint_bytes;
    const double per_token_weight =
        full ? 1.0 : s.m_g * static_cast<double>(s.num_moe_layers) / static_cast<double>(*p.vpp);
    if (s.num_moe_layers > 0 && per_token_weight > 0) {
      // Room left after everything but the received-token term, over what one token costs as
      // the recompute mode keeps it (selective recompute of moe keeps none).
      auto moe_layer_at = [&](double tokens) {
        return layer_activation(report.moe_shape, true, m, tokens, 1, r.recompute, remat_moe,
                                r.recompute_modules) -
               offloaded_at(true, tokens, 1);
      };
      // A token costs its kept bytes in every stored chunk-micro-batch, and its offloaded bytes
      // in the two layers Megatron keeps on the GPU.
      const Bytes in_flight =
          full ? Bytes(0) : (offloaded_at(true, 1.0, 1) - offloaded_at(true, 0.0, 1)) * 2.0;
      const Bytes unit = (moe_layer_at(1.0) - moe_layer_at(0.0)) * per_token_weight + in_flight;
      const Bytes base =
          activation_at(1) - unit * memfine::tokens_per_chunk(report.received_tokens, 1);
      const Bytes room = r.gpu_capacity * r.alpha - fixed - base;
      s.max_received_tokens =
          unit.value() > 0 ? room / unit
                           : (room.value() >= 0 ? std::numeric_limits<double>::infinity() : 0.0);
      s.mact_chunks = memfine::select_bin(
          memfine::chunks_needed(report.received_tokens, s.max_received_tokens), r.chunk_bins);
    } else {
      s.mact_chunks = 1;
    }
    s.chunks = r.chunks.value_or(s.mact_chunks > 0 ? s.mact_chunks : r.chunk_bins.back());
    s.activation_bytes = activation_at(s.chunks);
    s.total_bytes = s.static_bytes + s.checkpoint_bytes + s.activation_bytes;
    s.fits = memfine::fits(s.static_bytes + s.checkpoint_bytes, s.activation_bytes, r.gpu_capacity,
                           r.alpha) &&
             s.host_fits;
    report.fits = report.fits && s.fits;
    report.stages.push_back(s);
  }
  // The job needs the largest bin any stage needs; 0 when some stage fits in no bin.
  for (const StageMemory& s : report.stages) {
    if (s.mact_chunks == 0) return report.mact_chunks = 0, report;
    report.mact_chunks = std::max(report.mact_chunks, s.mact_chunks);
  }
  return report;
}

}  // namespace moe
