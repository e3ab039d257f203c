#include "planner/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "planner/errors.h"
#include "planner/layer_ops.h"
#include "planner/offload.h"
#include "planner/power_limit.h"
#include "planner/workers.h"

namespace moe {

const char* objective_name(Objective o) {
  switch (o) {
    case Objective::kThroughput:
      return "throughput";
    case Objective::kMemory:
      return "memory";
    case Objective::kCost:
      return "cost";
    case Objective::kEnergy:
      return "energy";
  }
  return "?";
}

namespace {

// Every (overlap, intra_overlap) pair to try, in order.
std::vector<std::pair<bool, bool>> switch_pairs(const std::vector<bool>& overlaps,
                                                const std::vector<bool>& intras) {
  std::vector<std::pair<bool, bool>> out;
  for (bool o : overlaps)
    for (bool i : intras) out.emplace_back(o, i);
  return out;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

std::vector<int64_t> options(const std::optional<int64_t>& fixed, std::vector<int64_t> choices) {
  if (fixed) return {*fixed};
  return choices;
}

struct Ranked {
  double key = 0;
  // Between equal keys, the faster plan: a layout's dispatchers and overlap switches all need
  // the same memory, and `--objective memory` should keep the fastest of them, not the first.
  double tiebreak = 0;
  int64_t order = 0;
  Plan plan;
};

bool ranks_before(const Ranked& a, const Ranked& b) {
  if (a.key != b.key) return a.key < b.key;
  if (a.tiebreak != b.tiebreak) return a.tiebreak < b.tiebreak;
  return a.order < b.order;
}

double objective_key(const Plan& p, Objective o, int64_t gpus, int64_t tokens,
                     const GpuPower& power) {
  switch (o) {
    case Objective::kThroughput:
      return p.score.time.iteration.value();
    case Objective::kMemory:
      return p.score.peak_bytes.value();
    case Objective::kCost:
      return p.score.time.iteration.value() * static_cast<double>(gpus) /
             static_cast<double>(tokens);
    case Objective::kEnergy:
      return board_energy(power, p).watts * static_cast<double>(gpus) *
             p.score.time.iteration.value() / static_cast<double>(tokens);
  }
  return 0;
}

struct Layout {
  ParallelConfig p;
  int64_t order = 0;
};

// How a candidate splits its layers over the pipeline: end-stage counts, or (interleaved) a
// Megatron layout; neither for the even split.
struct LayerSplit {
  std::optional<int64_t> first, last;
  PipelineLayout layout;
};

// Layer splits to try for a pipeline: the even one, and lighter first/last stages (by up to two
// layers each, and the last by two more for each MTP module it also runs: a layer and a head
// pass) that make room for the embedding and head while the middle stages still split evenly.
// Interleaved, the same shape over the virtual stages, written as a layout: k layers in each
// but the first (k or k - 1) and the last (which runs the head and MTP modules too), as
// Megatron's recipes lay out DeepSeek-V3's 61 layers (Et|(tt|)*30mL at pp 8 x vpp 4,
// Et*4|(t*4|)*14tmL at pp 4 x vpp 4), where the user fixes vpp; without them a model whose
// layers pp x vpp do not divide could not interleave at all. What the user fixed is kept.
std::vector<LayerSplit> layer_splits(int64_t layers, int64_t pp, int64_t vpp, int64_t mtp,
                                     const ParallelConfig& f, bool even_split) {
  if (!f.layout.empty()) return {{std::nullopt, std::nullopt, f.layout}};
  if (f.pp_first || f.pp_last) return {{f.pp_first, f.pp_last, {}}};
  std::vector<LayerSplit> out = {{}};
  if (pp < 2 || even_split) return out;
  if (vpp > 1) {
    const int64_t stages = pp * vpp;
    if (layers % stages != 0) out.clear();
    // For every vpp, fixed or free: a third more candidates for DeepSeek-V3 on 2,048 H800
    // (1.22 M, 3.9 s on two threads), which the memory model's per-kind activations paid for.
    for (int64_t k = 1; k * (stages - 2) <= layers; ++k) {
      const int64_t ends = layers - k * (stages - 2);
      if (ends > 2 * k) continue;
      // One layout a k (the search's speed allows no more): the first stage full where the
      // last can take the rest, else one lighter.
      for (int64_t first = k; first >= std::max<int64_t>(0, k - 1); --first) {
        const int64_t last = ends - first;
        if (last < std::max<int64_t>(0, k - 2 - 2 * mtp) || last > k || (first == k && last == k))
          continue;
        LayerSplit split;
        split.layout.decoder_layers.assign(static_cast<size_t>(stages), k);
        split.layout.decoder_layers.front() = first;
        split.layout.decoder_layers.back() = last;
        split.layout.mtp = mtp;
        split.layout.mtp_stage = mtp > 0 ? stages - 1 : -1;
        out.push_back(split);
        break;
      }
    }
    return out;
  }
  const int64_t middle = pp - 2;
  if (middle == 0) {
    // Two stages have no middle to size them by: up to two layers moved either way, to the
    // first stage (its activations for every micro-batch in flight) or the last (the output
    // head's GEMM, the heavier end when the vocabulary is large).
    for (int64_t first = layers / 2 - 2; first <= (layers + 1) / 2 + 2 + 2 * mtp; ++first) {
      const int64_t last = layers - first;
      if (first >= 1 && last >= 1 && first != last) out.push_back({first, last, {}});
    }
    return out;
  }
  for (int64_t k = 1; k <= layers; ++k) {
    const int64_t ends = layers - k * middle;
    if (ends < 2) break;
    for (int64_t first = std::max<int64_t>(1, k - 2); first <= k; ++first) {
      const int64_t last = ends - first;
      if (last < std::max<int64_t>(1, k - 2 - 2 * mtp) || last > k || (first == k && last == k))
        continue;
      out.push_back({first, last, {}});
    }
  }
  return out;
}

// The activation offloading a candidate may take, in the order tried (search_offload: none,
// then the experts' rows, then every module, while it does not fit).
// (A fixed array: the search asks once per layout, recompute, attention and chunking.)
struct OffloadOptions {
  std::array<uint32_t, 3> masks{};
  size_t count = 0;
  const uint32_t* begin() const { return masks.data(); }
  const uint32_t* end() const { return masks.data() + count; }
};
OffloadOptions offload_options(const SearchRequest& req, const ModelSpec& m, Recompute rc,
                               bool mact) {
  if (!req.search_offload || !offload_allowed(rc) || mact) return {{req.offload_modules}, 1};
  if (!m.is_moe()) return {{0, kAllOffloadModules & ~(kOffloadExpertFc1 | kOffloadMoeAct)}, 2};
  return {{0, kOffloadExpertFc1 | kOffloadMoeAct, kAllOffloadModules}, 3};
}

}  // namespace

MemoryRequest memory_request(const TimeContext& ctx, const PlanChoice& c, Bytes capacity,
                             double alpha, std::optional<Bytes> static_override) {
  const ModelSpec& m = *ctx.model;
  MemoryRequest r;
  r.seq_len = ctx.seq_len;
  r.recompute = c.recompute;
  r.recompute_modules = c.recompute_modules;
  r.offload_modules = c.offload_modules;
  r.optimizer_offload = c.optimizer_offload;
  r.host_capacity = ctx.host_memory_per_gpu;
  r.zero_stage = c.zero_stage;
  r.gpu_capacity = capacity;
  r.alpha = alpha;
  r.attention_replicated = c.attention == AttentionMode::kUlysses && *c.parallel.tp > 1;
  r.received_tokens = ctx.skew.received_tokens(m, *c.parallel.ep, static_cast<double>(ctx.seq_len));
  // The weights as stored: FP32, BF16, or FP8 (Megatron's --fp8-param-gather keeps no BF16
  // copy); the gradient buffer and the master weights and Adam moments as the plan keeps them.
  // FP32 training: FP32 weights and gradients and three FP32 optimizer buffers, 20 bytes per
  // parameter, as APTMoE Table I's memory column implies (111 GB for 4.5 B parameters with
  // activations; 707 GB for 35.4 B).
  r.static_bytes.param = parameter_bytes(c);
  r.static_bytes.grad = gradient_bytes(c);
  r.static_bytes.optimizer_states = optimizer_state_bytes(c) / 4.0;
  const ActivationBytes b = activation_bytes(c);
  r.bytes_per_element = b.per_element;
  r.gemm_input_bytes = b.gemm_input;
  r.score_bytes = b.score;
  if (!c.mact) r.chunks = 1;
  r.static_override = static_override;
  if (c.gpipe) r.gpipe_microbatches = *c.parallel.gbs / (*c.parallel.mbs * *c.parallel.dp);
  r.loss_bytes = cross_entropy_held(c.cross_entropy, b.per_element,
                                    loss_logits(*ctx.model, c.parallel, ctx.seq_len));
  return r;
}

PlanScore score_plan(const TimeContext& ctx, const PlanChoice& c, Bytes capacity, double alpha,
                     std::optional<Bytes> static_override) {
  const ModelSpec& m = *ctx.model;
  PlanScore s;
  s.memory = estimate_memory(m, ctx.params, c.parallel,
                             memory_request(ctx, c, capacity, alpha, static_override));
  PlanChoice timed = c;
  settle_mact_chunks(timed, s.memory);
  const TimeBreakdown time = estimate_time_at_power_limit(ctx, timed);
  PlanScore out = complete_score(ctx, c, s.memory, time, capacity, alpha);
  out.compute_clock = timed.compute_clock;
  return out;
}

PlanScore complete_score(const TimeContext& ctx, const PlanChoice& c, const MemoryReport& memory,
                         const TimeBreakdown& time, Bytes capacity, double alpha) {
  PlanScore s;
  s.memory = memory;
  s.time = time;
  // GPUs the plan occupies: the layout's world, or the GPUs an offload plan's stages share.
  const double world = static_cast<double>(c.gpus());
  const double tokens = static_cast<double>(*c.parallel.gbs) * static_cast<double>(ctx.seq_len);
  s.tokens_per_second = tokens / s.time.iteration.value();
  s.mfu = ctx.flops.training().value() * tokens /
          (s.time.iteration.value() * world * reference_peak_of(ctx, c.precision).value());
  s.tgs =
      memfine::tokens_per_gpu_per_second(*c.parallel.gbs, ctx.seq_len, s.time.iteration, c.gpus());
  s.peak_bytes = memory.peak_bytes();
  s.oom_received_tokens = 1e300;
  for (const StageMemory& st : s.memory.stages) {
    if (st.num_moe_layers > 0)
      s.oom_received_tokens = std::min(s.oom_received_tokens, st.max_received_tokens);
  }
  if (s.oom_received_tokens == 1e300) s.oom_received_tokens = 0;
  // max_received_tokens is per FCDA chunk (eq. 8): a fixed chunk count takes that many times
  // as many, and MACT can go up to its largest bin before the layer runs out.
  s.oom_received_tokens *=
      static_cast<double>(c.mact ? memory.largest_chunk_bin : std::max<int64_t>(c.fcda_chunks, 1));
  s.headroom = capacity * alpha - s.peak_bytes;
  s.alpha = alpha;
  s.compute_clock = c.compute_clock;
  return s;
}

namespace {

// Every layout of `world` GPUs the model and the fixed sizes allow (unscored).
std::vector<Layout> valid_layouts(const TimeContext& ctx, const SearchRequest& req, int64_t world) {
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& f = req.fixed;
  const int64_t gpn = ctx.links.gpus_per_node;
  // TP stays inside a node and divides the heads; powers of two as Megatron users run them.
  std::vector<int64_t> tps, cps, mbss = {1, 2, 4, 8}, vpps = {1, 2, 4};
  for (int64_t t = 1; t <= gpn; t *= 2) tps.push_back(t);
  for (int64_t c = 1; c <= 16; c *= 2) cps.push_back(c);
  std::vector<int64_t> eps = m.is_moe() ? divisors(m.num_routed_experts) : std::vector<int64_t>{1};

  std::vector<Layout> layouts;
  for (int64_t tp : options(f.tp, tps)) {
    for (int64_t cp : options(f.cp, cps)) {
      if (world % (tp * cp) != 0) continue;
      ParallelConfig split;
      split.tp = tp, split.cp = cp;
      try {
        check_sequence(split, ctx.seq_len);
      } catch (const ConfigError&) {
        continue;
      }
      for (int64_t pp : options(f.pp, divisors(world / (tp * cp)))) {
        // A fixed pp need not divide what is left of the GPUs.
        if (pp > m.num_layers || (world / (tp * cp)) % pp != 0) continue;
        const int64_t dp = world / (tp * cp * pp);
        if (f.dp && *f.dp != dp) continue;
        for (int64_t ep : options(f.ep, eps)) {
          // Expert TP is 1 or the attention TP (MoNTA's layout); once when tp = 1.
          for (int64_t etp : options(f.etp, m.is_moe() && tp > 1 ? std::vector<int64_t>{1, tp}
                                                                 : std::vector<int64_t>{1})) {
            if ((tp * cp * dp) % (etp * ep) != 0) continue;
            for (int64_t vpp : options(f.vpp, vpps)) {
              if (vpp > 1 && (pp == 1 || req.gpipe)) continue;
              for (const LayerSplit& split :
                   layer_splits(m.num_layers, pp, vpp, m.mtp_layers, f, req.even_split)) {
                for (int64_t mbs : options(f.mbs, mbss)) {
                  ParallelConfig p;
                  p.tp = tp, p.cp = cp, p.pp = pp, p.dp = dp, p.ep = ep, p.etp = etp, p.vpp = vpp,
                  p.mbs = mbs;
                  p.edp = tp * cp * dp / (etp * ep);
                  p.gbs = req.global_batch;
                  p.pp_first = split.first;
                  p.pp_last = split.last;
                  p.layout = split.layout;
                  if (f.edp && *f.edp != *p.edp) continue;
                  try {
                    check(p, m);
                  } catch (const ConfigError&) {
                    continue;
                  }
                  layouts.push_back({p, static_cast<int64_t>(layouts.size())});
                }
              }
            }
          }
        }
      }
    }
  }
  return layouts;
}

// How far a layout's tightest stage is over (at the memory floor, or under the switches the
// request fixed when the floor fits), and the no-fit message's line for it: the closest miss is
// the one least over.
std::pair<double, NoFit> closest_miss(const TimeContext& ctx, const ParallelConfig& p,
                                      const MemoryReport& miss, Bytes room) {
  const StageMemory* tight = &miss.stages.front();
  for (const StageMemory& s : miss.stages) {
    if (s.total_bytes > tight->total_bytes) tight = &s;
  }
  double over = (tight->total_bytes - room).value();
  const bool static_bound = tight->static_bytes + tight->checkpoint_bytes > room;
  NoFit miss_at{
      p.to_string(), tight->stage, tight->total_bytes, room,
      static_bound ? "static memory (weights, gradients, optimizer states)" : "activations"};
  if (!(over > 0)) {
    // The GPUs hold it; host memory does not hold the optimizer states offloaded to it.
    const StageMemory* host = &miss.stages.front();
    for (const StageMemory& s : miss.stages)
      if (s.host_bytes > host->host_bytes) host = &s;
    over = (host->host_bytes - ctx.host_memory_per_gpu).value();
    miss_at = NoFit{p.to_string(),
                    host->stage,
                    host->host_bytes,
                    ctx.host_memory_per_gpu,
                    "the optimizer states offloaded to host memory",
                    "a GPU's share of host memory"};
  }
  return {over, miss_at};
}

// The switches tried on a layout that fits, each as the request fixes it or every option where
// it does not.
struct LayoutSwitches {
  std::vector<AttentionMode> attentions;
  std::vector<std::pair<bool, bool>> overlaps;  // inter-operator, intra-operator
  std::vector<megascale::Dispatcher> dispatchers;
  std::vector<std::pair<monta::Strategy, int64_t>> alltoalls;  // MoNTA's strategy and chunks
  std::vector<bool> bf16_gradients;
};

LayoutSwitches layout_switches(const TimeContext& ctx, const SearchRequest& req,
                               const ParallelConfig& p) {
  LayoutSwitches out;
  const int64_t tp = *p.tp, ep = *p.ep, etp = *p.etp;
  out.attentions = req.attention ? std::vector<AttentionMode>{*req.attention}
                   : tp > 1
                       ? std::vector<AttentionMode>{AttentionMode::kTensor, AttentionMode::kUlysses}
                       : std::vector<AttentionMode>{AttentionMode::kTensor};
  const std::vector<bool> overlaps =
      req.overlap ? std::vector<bool>{*req.overlap} : std::vector<bool>{true, false};
  const std::vector<bool> intras =
      req.intra_overlap ? std::vector<bool>{*req.intra_overlap} : std::vector<bool>{false, true};
  out.overlaps = switch_pairs(overlaps, intras);
  // Without EP the two cost the same (experts split like TP gather around a ring), so
  // the search tries all-to-all alone there; a fixed dispatcher is kept where it is
  // priced.
  out.dispatchers = {megascale::Dispatcher::kAllToAll};
  if (ep > 1 && etp == 1) out.dispatchers.push_back(megascale::Dispatcher::kAllGather);
  if (req.dispatcher)
    out.dispatchers.assign(megascale::dispatcher_priced(*req.dispatcher, ep, etp) ? 1 : 0,
                           *req.dispatcher);
  out.alltoalls = {{monta::Strategy::kBaseline, 1}};
  if (ep > 1 && etp > 1) {
    // MoNTA Algorithm 3 picks the strategy from the AllToAll alone, once per layout.
    PlanChoice probe;
    probe.parallel = p;
    const monta::Problem prob = expert_alltoall_problem(ctx, probe);
    const Seconds o1 = monta::o1_time(prob);
    const monta::ChunkChoice o2 = monta::best_chunking(prob, monta::Pipelining::kO2);
    const monta::ChunkChoice o3 = monta::best_chunking(prob, monta::Pipelining::kO3);
    const monta::Strategy pick = monta::select_strategy(o1, o2.time, o3.time);
    const int64_t n = pick == monta::Strategy::kO2   ? o2.chunks
                      : pick == monta::Strategy::kO3 ? o3.chunks
                                                     : 1;
    out.alltoalls = {{pick, n}};
  }
  // BF16 gradients also halve Megatron's gradient buffer, so even without DP syncs they may fit
  // a layout FP32 ones do not (at the same time, FP32's earlier order wins ties).
  out.bf16_gradients = req.dp_bf16_compression ? std::vector<bool>{*req.dp_bf16_compression}
                                               : std::vector<bool>{false, true};
  return out;
}

// A candidate of layout `p` with the switches the request fixes for every candidate.
PlanChoice requested(const SearchRequest& req, const ParallelConfig& p, int64_t seq_len) {
  PlanChoice c;
  c.parallel = p;
  c.seq_len = seq_len;
  c.recompute_modules = req.recompute_modules;
  c.offload_modules = req.offload_modules;
  c.optimizer_offload = req.optimizer_offload;
  c.adam = req.adam;
  c.precision = req.precision;
  c.fp8_recipe = req.fp8_recipe;
  c.gpipe = req.gpipe;
  c.permute_fusion = req.permute_fusion;
  c.cuda_graph = req.cuda_graph;
  c.attention_kernel = req.attention_kernel;
  c.cross_entropy = req.cross_entropy;
  return c;
}

// The memory of `c` at the lowest ZeRO stage that fits (or the request's), with activation
// offloading only where nothing else fits; sets c.zero_stage and c.offload_modules to it.
MemoryReport fit_in_memory(const TimeContext& ctx, const SearchRequest& req, Bytes capacity,
                           PlanChoice& c) {
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& p = c.parallel;
  MemoryReport mem;
  auto at_stage = [&](int stage) {
    c.zero_stage = stage;
    return estimate_memory(m, ctx.params, p,
                           memory_request(ctx, c, capacity, req.alpha, req.static_override));
  };
  for (uint32_t offload : offload_options(req, m, c.recompute, c.mact)) {
    c.offload_modules = offload;
    if (req.zero) {
      mem = at_stage(*req.zero);
    } else {
      for (int stage = 1; stage <= 3; ++stage) {
        mem = at_stage(stage);
        if (mem.fits) break;
      }
    }
    if (mem.fits) break;
  }
  return mem;
}

}  // namespace

std::string adam_states_problem(const SearchRequest& req) {
  PlanChoice c;
  c.adam = req.adam;
  c.optimizer_offload = req.optimizer_offload;
  c.precision = req.precision;
  c.zero_stage = req.zero.value_or(1);
  return adam_states_problem(c);
}

SearchResult search_plans(const TimeContext& cluster_ctx, const SearchRequest& req) {
  const auto start = std::chrono::steady_clock::now();
  // Groups straddle nodes by where the plan's GPUs end, not the cluster's.
  TimeContext ctx = cluster_ctx;
  ctx.links.world = req.num_gpus;
  const ModelSpec& m = *ctx.model;
  const ParallelConfig& f = req.fixed;
  const int64_t world = req.num_gpus;
  const int64_t gpn = ctx.links.gpus_per_node;
  const Bytes capacity = ctx.gpu.hbm_capacity;
  // The ranking and its bounds compare against the K-th plan kept.
  if (req.top_k < 1) throw ConfigError(fmt::format("top K must be at least 1, got {}", req.top_k));
  if (const std::string problem = adam_states_problem(req); !problem.empty())
    throw ConfigError(problem);
  if (!m.is_moe()) {
    for (const auto& [name, size] : {std::pair{"ep", f.ep}, std::pair{"etp", f.etp}}) {
      if (size && *size > 1)
        throw ConfigError(
            fmt::format("fixed {}={}, but {} has no routed experts", name, *size, m.name));
    }
  }

  std::vector<Layout> layouts = valid_layouts(ctx, req, world);
  if (layouts.empty() && f.tp && f.cp && f.pp && f.ep && f.mbs &&
      world % (*f.tp * *f.cp * *f.pp) == 0) {
    // A layout fixed but for dp (which the GPUs give): say what check() finds wrong with it.
    ParallelConfig q = f;
    q.dp = world / (*f.tp * *f.cp * *f.pp);
    q.gbs = req.global_batch;
    try {
      check(resolve(q), m);
      check_sequence(q, ctx.seq_len);
    } catch (const ConfigError& e) {
      throw ConfigError(
          fmt::format("the fixed layout {} does not run {}: {}", q.to_string(), m.name, e.what()));
    }
  }
  if (layouts.empty() && !f.to_string().empty()) {
    if (const auto why = fixed_sizes_problem(f, m, world, ctx.seq_len, req.global_batch))
      throw ConfigError(fmt::format("no valid layout of {} GPUs for {} with the fixed sizes {}: {}",
                                    world, m.name, f.to_string(), *why));
  }
  if (layouts.empty()) {
    // The largest GPU count below that does divide, in whole nodes where the cluster has them
    // (240 H800 and a batch of 64 leave 15 as a factor no layout takes; 224 do). The next 16
    // counts only: enumerating 16,384 GPUs' layouts takes tens of milliseconds.
    const int64_t step = world > gpn ? gpn : 1;
    int64_t fewer = 0;
    for (int64_t n = (world - 1) / step * step, tries = 0; n >= step && fewer == 0 && tries < 16;
         n -= step, ++tries)
      if (!valid_layouts(ctx, req, n).empty()) fewer = n;
    // Far fewer may be all the batch and the model can use (GPT-1.7B at a batch of 8 on 16,384
    // GPUs): halve until a count divides.
    for (int64_t n = world / 2; n >= 1 && fewer == 0; n /= 2)
      if (!valid_layouts(ctx, req, n).empty()) fewer = n;
    const std::string fixed = f.to_string();
    throw ConfigError(fmt::format(
        "no valid layout of {} GPUs for {}{} (heads, experts, layers, sequence length {} or "
        "global batch {} do not divide){}",
        world, m.name, fixed.empty() ? "" : " with the fixed sizes " + fixed, ctx.seq_len,
        req.global_batch, fewer > 0 ? fmt::format("; {} GPUs divide", fewer) : ""));
  }

  const std::vector<Recompute> recomputes =
      req.recompute              ? std::vector<Recompute>{*req.recompute}
      : req.offload_modules != 0 ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective}
      : m.is_moe() && !req.megatron_only
          ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective,
                                   Recompute::kRematerialize, Recompute::kFull}
          : std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  const int threads = std::max(1, req.threads);
  std::vector<std::vector<Ranked>> best(threads);
  std::vector<SearchStats> stats(threads);
  std::vector<std::optional<std::pair<double, NoFit>>> closest(threads);
  std::atomic<int64_t> done{0};
  std::mutex progress_mutex;
  const int64_t tokens_per_iter = req.global_batch * ctx.seq_len;

  // The iteration time a candidate must come in under to rank before `r`. Within one search
  // (one GPU count and batch) the throughput and cost keys grow with the iteration time, and
  // where the memory objective's keys tie the faster plan goes first (ranks_before); a later
  // candidate never wins a full tie, which enumeration order breaks. Nothing (0) when the
  // candidate needs more memory than `r` does under --objective memory.
  // Under the energy objective a board draws at least its idle power, so a plan of r.key joules a
  // token ran for no longer than r.key x tokens / (idle x GPUs).
  const bool energy = req.objective == Objective::kEnergy;
  const double idle_w = ctx.gpu.power.idle_w;
  auto time_to_beat = [&](const Ranked& r, double peak) {
    if (energy)
      return idle_w > 0 ? r.key * static_cast<double>(tokens_per_iter) /
                              (idle_w * static_cast<double>(world))
                        : std::numeric_limits<double>::infinity();
    if (req.objective != Objective::kMemory) return r.tiebreak;
    return peak < r.key    ? std::numeric_limits<double>::infinity()
           : peak == r.key ? r.tiebreak
                           : 0.0;
  };
  // The memory objective keeps more than K: the plans within kMemoryTie of the least peak are
  // ranked by time at the end, and the fastest of them need not be among the K leanest.
  const int keep_k = req.objective == Objective::kMemory ? std::max(req.top_k, 64) : req.top_k;
  auto worker = [&](int w) {
    std::vector<Ranked>& top = best[w];
    TimeContext scratch = ctx;  // estimate_time's link-shared passes, one copy a thread
    auto keep = [&](Ranked r) {
      if (static_cast<int>(top.size()) == keep_k && !ranks_before(r, top.back())) return;
      top.insert(std::upper_bound(top.begin(), top.end(), r, ranks_before), std::move(r));
      if (static_cast<int>(top.size()) > keep_k) top.pop_back();
    };
    for (size_t li = w; li < layouts.size(); li += threads) {
      const Layout& L = layouts[li];
      const ParallelConfig& p = L.p;
      ++stats[w].layouts;
      std::optional<Ranked> layout_best;  // the ranking lists layouts, each with its best switches
      auto memory_of = [&](const PlanChoice& x) {
        return estimate_memory(m, ctx.params, p,
                               memory_request(ctx, x, capacity, req.alpha, req.static_override));
      };
      // Memory lower bound: full recompute, MACT chunking, attention sharded.
      PlanChoice lower = requested(req, p, ctx.seq_len);
      lower.recompute = Recompute::kFull;
      lower.offload_modules = 0;
      lower.mact = m.is_moe();
      lower.zero_stage = req.zero.value_or(3);
      lower.dp_bf16_compression = req.dp_bf16_compression.value_or(true);  // the leaner gradients
      const MemoryReport floor = memory_of(lower);
      auto note_miss = [&](const MemoryReport& miss) {
        const std::pair<double, NoFit> over = closest_miss(ctx, p, miss, capacity * req.alpha);
        if (!closest[w] || over.first < closest[w]->first) closest[w] = over;
      };
      if (!floor.fits) {
        ++stats[w].pruned_by_memory;
        note_miss(floor);
      } else {
        const LayoutSwitches sw = layout_switches(ctx, req, p);
        int64_t inner = 0;  // enumeration order inside the layout, for deterministic ties
        for (Recompute rc : recomputes) {
          for (AttentionMode at : sw.attentions) {
            // MemFine's chunks are not Megatron's, and Megatron offloads whole layers' inputs.
            const bool chunkable = m.is_moe() && !req.megatron_only && req.offload_modules == 0;
            for (bool mact :
                 chunkable ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
              PlanChoice base = requested(req, p, ctx.seq_len);
              base.recompute = rc;
              base.attention = at;
              base.mact = mact;
              // The terms before the DP syncs under the first gradient precision that fits, by
              // dispatcher, all-to-all and overlap switches: the second precision's are the
              // same where memory left it the same ZeRO stage, offloads and chunks (only the
              // syncs read the precision), so it is held to its bound without being priced.
              const size_t per_precision =
                  sw.dispatchers.size() * sw.alltoalls.size() * sw.overlaps.size();
              std::vector<Seconds> before_syncs(per_precision,
                                                Seconds(-std::numeric_limits<double>::infinity()));
              std::optional<PlanChoice> first_fit;
              const bool by_memory = req.objective == Objective::kMemory;
              const int lowest_zero = req.zero.value_or(1);
              for (bool bf16 : sw.bf16_gradients) {
                PlanChoice c = base;
                c.dp_bf16_compression = bf16;
                // Memory depends on the layout, recompute, attention mode, chunking, ZeRO stage
                // and the gradients' precision. Higher stages only trade time for memory: try
                // them only when needed. Leaner gradients (the second precision) fit wherever
                // the first did. Without DP syncs, where the first fitted at the lowest stage
                // without an added offload, they are the same plan at the same time, whose tie
                // the first precision's earlier order wins (a MACT chunk bin they might save is
                // let go). Without MACT or an added offload only a lower ZeRO stage is left to
                // look for; else theirs is the same plan but for the DP syncs and the smaller
                // gradient buffer, whose memory is priced only for a candidate kept (or up
                // front, where memory ranks).
                std::optional<MemoryReport> mem;
                const bool first_as_asked =
                    first_fit && first_fit->offload_modules == req.offload_modules;
                if (first_as_asked && *p.dp == 1 && first_fit->zero_stage == lowest_zero &&
                    !by_memory)
                  continue;
                if (first_as_asked && !mact) {
                  c.offload_modules = first_fit->offload_modules;
                  for (int z = lowest_zero; z < first_fit->zero_stage && !mem; ++z) {
                    c.zero_stage = z;
                    if (MemoryReport r = memory_of(c); r.fits) mem = std::move(r);
                  }
                  if (!mem) c.zero_stage = first_fit->zero_stage;
                } else {
                  MemoryReport fitted = fit_in_memory(ctx, req, capacity, c);
                  if (!fitted.fits) {
                    note_miss(fitted);
                    continue;
                  }
                  c.fcda_chunks = 1;
                  settle_mact_chunks(c, fitted);
                  if (mact && c.fcda_chunks == 1) continue;  // same as without chunking
                  mem = std::move(fitted);
                }
                auto memory = [&]() -> const MemoryReport& {
                  if (!mem) mem = memory_of(c);
                  return *mem;
                };
                const bool first_precision = !first_fit;
                const bool reuse = first_fit && first_fit->zero_stage == c.zero_stage &&
                                   first_fit->offload_modules == c.offload_modules &&
                                   first_fit->fcda_chunks == c.fcda_chunks &&
                                   first_fit->stage_chunks == c.stage_chunks;
                if (first_precision) first_fit = c;
                const double peak = by_memory ? memory().peak_bytes().value() : 0.0;
                size_t k = 0;
                for (megascale::Dispatcher d : sw.dispatchers) {
                  for (const auto& [a2a, n] : sw.alltoalls) {
                    for (const auto& [overlap, intra] : sw.overlaps) {
                      Seconds& before = before_syncs[k++];
                      c.intra_overlap = intra;
                      c.dispatcher = d;
                      c.alltoall = a2a;
                      c.alltoall_chunks = n;
                      c.overlap = overlap;
                      ++stats[w].evaluated;
                      ++inner;
                      // A candidate no faster than it must be to rank before the layout's
                      // best so far, or than the last of a full top K, is out.
                      double bound = std::numeric_limits<double>::infinity();
                      if (static_cast<int>(top.size()) == keep_k)
                        bound = time_to_beat(top.back(), peak);
                      if (layout_best) bound = std::min(bound, time_to_beat(*layout_best, peak));
                      // Nothing past the time budget, and nothing at it (a bound is exclusive).
                      if (req.time_limit.value() > 0)
                        bound = std::min(bound, std::nextafter(req.time_limit.value(), 1e300));
                      // Priced at full clock first: a lower bound of the time at the clock
                      // the power limit leaves (planner/power_limit.h), which follows.
                      c.compute_clock = 1;
                      std::optional<TimeBreakdown> time;
                      if (bound > 0 && (!reuse || before < Seconds(bound)))
                        time = estimate_time_below(ctx, c, scratch, Seconds(bound),
                                                   first_precision ? &before : nullptr);
                      // The energy objective weighs lower caps from the full-clock time.
                      std::optional<TimeBreakdown> full_clock;
                      if (time && energy && !req.power_caps.empty()) full_clock = time;
                      c.power_cap_w = 0;
                      if (time && time->iteration.value() < bound)
                        time = at_power_limit(ctx, c, *time, scratch, Seconds(bound));
                      if (!time) {
                        ++stats[w].bounded;
                        continue;
                      }
                      if (time->iteration.value() >= bound) continue;
                      Plan plan;
                      plan.choice = c;
                      plan.score.memory = memory();
                      plan.score.time = *time;
                      if (full_clock) {
                        const double at_limit = objective_key(plan, req.objective, world,
                                                              tokens_per_iter, ctx.gpu.power);
                        if (std::optional<TimeBreakdown> t =
                                at_energy_power_cap(ctx, plan.choice, *full_clock, at_limit,
                                                    static_cast<double>(tokens_per_iter),
                                                    req.power_caps, req.time_limit, scratch))
                          plan.score.time = *t;
                      }
                      plan.score = complete_score(ctx, plan.choice, memory(), plan.score.time,
                                                  capacity, req.alpha);
                      const double key =
                          objective_key(plan, req.objective, world, tokens_per_iter, ctx.gpu.power);
                      Ranked r{key, plan.score.time.iteration.value(), L.order * 100000 + inner,
                               std::move(plan)};
                      if (!layout_best || ranks_before(r, *layout_best)) layout_best = std::move(r);
                    }
                  }
                }
              }
            }
          }
        }
      }
      if (layout_best) keep(std::move(*layout_best));
      const int64_t finished = ++done;
      if (req.progress && finished % 64 == 0) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        req.progress(static_cast<double>(finished) / static_cast<double>(layouts.size()));
      }
    }
  };
  run_workers(threads, worker);

  SearchResult out;
  std::vector<Ranked> all;
  for (int w = 0; w < threads; ++w) {
    all.insert(all.end(), best[w].begin(), best[w].end());
    out.stats.layouts += stats[w].layouts;
    out.stats.pruned_by_memory += stats[w].pruned_by_memory;
    out.stats.evaluated += stats[w].evaluated;
    out.stats.bounded += stats[w].bounded;
    if (closest[w] && (!out.closest || closest[w]->second.needed < out.closest->needed))
      out.closest = closest[w]->second;
  }
  std::sort(all.begin(), all.end(), ranks_before);
  if (req.objective == Objective::kMemory && !all.empty()) {
    // Peaks within kMemoryTie of the least are one footprint to a user: the faster first (a
    // plan 0.1 % leaner but twice as slow is no answer to --objective memory).
    const double lean = all.front().key * (1.0 + kMemoryTie);
    const auto near = std::partition_point(all.begin(), all.end(),
                                           [&](const Ranked& r) { return r.key <= lean; });
    std::stable_sort(all.begin(), near, [](const Ranked& a, const Ranked& b) {
      if (a.tiebreak != b.tiebreak) return a.tiebreak < b.tiebreak;
      return a.order < b.order;
    });
  }
  for (size_t i = 0; i < all.size() && static_cast<int>(i) < req.top_k; ++i)
    out.ranked.push_back(std::move(all[i].plan));
  if (!out.ranked.empty()) out.closest.reset();
  out.stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::vector<Plan> offload_plans(const TimeContext& ctx, const ClusterSpec& cluster,
                                const SearchRequest& req) {
  const ModelSpec& m = *ctx.model;
  std::vector<Plan> out;
  if (!m.is_moe()) return out;
  const int64_t gpus = req.num_gpus;
  // A partly fixed layout is honoured: offload plans are tp = cp = dp = ep = etp = vpp = 1, and
  // a fixed pp (stages) or micro-batch size is the only one tried.
  const ParallelConfig& f = req.fixed;
  for (auto member : {&ParallelConfig::tp, &ParallelConfig::cp, &ParallelConfig::dp,
                      &ParallelConfig::ep, &ParallelConfig::etp, &ParallelConfig::vpp}) {
    if ((f.*member).value_or(1) != 1) return out;
  }
  std::vector<int64_t> stage_counts, sizes;
  if (f.pp) {
    stage_counts = {*f.pp};
  } else {
    for (int64_t stages = gpus; stages <= m.num_layers; stages *= 2) stage_counts.push_back(stages);
  }
  if (f.mbs) {
    sizes = {*f.mbs};
  } else {
    // APTMoE runs as many micro-batches as GPUs (Sec. IV); smaller ones pipeline better.
    sizes = {1, 2, 4, 8};
    const int64_t aptmoe_mbs = req.global_batch / gpus;
    if (aptmoe_mbs > 8 && req.global_batch % gpus == 0) sizes.push_back(aptmoe_mbs);
  }
  for (int64_t stages : stage_counts) {
    if (stages < gpus || stages > m.num_layers) continue;
    for (int64_t mbs : sizes) {
      if (mbs < 1 || req.global_batch % mbs != 0) continue;
      const OffloadEstimate e = estimate_offload(ctx, cluster, gpus, stages, mbs, req.global_batch,
                                                 req.precision, req.alpha);
      if (!e.fits) continue;
      Plan p;
      PlanChoice& c = p.choice;
      c.offload = true;
      c.offload_gpus = gpus;
      c.precision = req.precision;
      c.seq_len = ctx.seq_len;
      c.permute_fusion = req.permute_fusion;
      c.recompute = Recompute::kFull;
      c.zero_stage = 0;
      c.parallel = resolve(parse_parallel("tp=1,cp=1,dp=1,ep=1,etp=1,vpp=1"));
      c.parallel.pp = stages;
      c.parallel.mbs = mbs;
      c.parallel.gbs = req.global_batch;
      MemoryReport memory;
      StageMemory st;
      st.total_bytes = st.activation_bytes = e.gpu_peak;
      st.fits = true;
      memory.stages = {st};
      memory.fits = true;
      p.score = complete_score(ctx, c, memory, e.time, ctx.gpu.hbm_capacity, req.alpha);
      p.score.host_bytes = e.host_bytes;
      out.push_back(std::move(p));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Plan& a, const Plan& b) {
    return a.score.time.iteration < b.score.time.iteration;
  });
  if (static_cast<int>(out.size()) > req.top_k) out.resize(req.top_k);
  return out;
}

void add_search_counts(SearchResult& into, const SearchResult& one) {
  into.stats.layouts += one.stats.layouts;
  into.stats.pruned_by_memory += one.stats.pruned_by_memory;
  into.stats.evaluated += one.stats.evaluated;
  into.stats.bounded += one.stats.bounded;
  into.stats.seconds += one.stats.seconds;
  if (one.closest && (!into.closest || one.closest->needed < into.closest->needed))
    into.closest = one.closest;
}

SearchResult search_gpu_counts(const TimeContext& ctx, const SearchRequest& req,
                               const std::vector<int64_t>& counts) {
  SearchResult out;
  std::optional<ConfigError> last_error;
  std::vector<Plan> all;
  for (int64_t n : counts) {
    SearchRequest one = req;
    one.num_gpus = n;
    SearchResult r;
    try {
      r = search_plans(ctx, one);
    } catch (const ConfigError& e) {
      last_error = e;
      continue;
    }
    add_search_counts(out, r);
    for (Plan& p : r.ranked) all.push_back(std::move(p));
  }
  if (all.empty() && !out.closest && last_error) throw *last_error;
  const int64_t tokens = req.global_batch * ctx.seq_len;
  std::stable_sort(all.begin(), all.end(), [&](const Plan& a, const Plan& b) {
    return objective_key(a, Objective::kCost, a.choice.gpus(), tokens, ctx.gpu.power) <
           objective_key(b, Objective::kCost, b.choice.gpus(), tokens, ctx.gpu.power);
  });
  if (static_cast<int>(all.size()) > req.top_k) all.resize(req.top_k);
  out.ranked = std::move(all);
  if (!out.ranked.empty()) out.closest.reset();
  return out;
}

}  // namespace moe
