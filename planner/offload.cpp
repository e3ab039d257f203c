#include "planner/offload.h"

#include <algorithm>

#include "planner/aptmoe.h"
#include "planner/layer_ops.h"
#include "planner/memfine.h"
#include "planner/memory_model.h"

namespace moe {

namespace {

// Per-expert token proportions of one layer under the skew (uniform when the skew is not a
// popularity; all tokens on one expert for the worst case).
std::vector<double> layer_popularity(const RoutingSkew& skew, const ModelSpec& m, int64_t layer) {
  const size_t e = static_cast<size_t>(m.num_routed_experts);
  if (skew.kind == RoutingSkew::Kind::kPopularity && !skew.proportions.empty()) {
    return skew.layer_row(layer);
  }
  std::vector<double> p(e, 1.0 / static_cast<double>(e));
  if (skew.kind == RoutingSkew::Kind::kWorst) {
    std::fill(p.begin(), p.end(), 0.0);
    p[0] = 1.0;
  }
  return p;
}

// Offload plans keep BF16 weights (FP8 plans too) or FP32 ones.
double offload_weight_bytes(Precision precision) {
  return precision == Precision::kFp32 ? 4.0 : 2.0;
}

}  // namespace

const char* offload_system_name(OffloadSystem s) {
  switch (s) {
    case OffloadSystem::kAptMoe:
      return "APTMoE";
    case OffloadSystem::kMobius:
      return "Mobius";
    case OffloadSystem::kGPipeOffload:
      return "GPipeOffload";
  }
  return "?";
}

aptmoe::Rates offload_rates(const TimeContext& ctx, const ClusterSpec& c, int64_t gpus,
                            Precision precision, int64_t micro_batches) {
  const NodeSpec& node = c.node;
  const int used_per_node = static_cast<int>(std::min<int64_t>(gpus, node.num_gpus));
  int on_switch = 0, on_socket = 0;
  for (int g = 0; g < used_per_node; ++g) {
    on_switch += node.switch_of_gpu(g) == node.switch_of_gpu(0);
    on_socket += node.cpu_of_gpu(g) == node.cpu_of_gpu(0);
  }
  aptmoe::Rates rates;
  rates.pcie = node.host_link_bandwidth() / static_cast<double>(std::max(on_switch, 1));
  rates.pcie_efficiency = &ctx.eff.pcie_h2d;
  const CpuSocket& cpu = node.cpus[node.cpu_of_gpu(0)];
  rates.cpu = cpu.achievable_flops / static_cast<double>(std::max(on_socket, 1));
  rates.cpu_memory = cpu.memory_bandwidth / static_cast<double>(std::max(on_socket, 1));
  // The GEMM curve by one micro-batch's size: an expert that few tokens of a micro-batch visit
  // runs a small GEMM, far from the peak (MoE-S-64 over 16 GPUs: 8 tokens an expert).
  rates.gpu = peak_of(ctx, precision);
  rates.gpu_efficiency = &ctx.eff.gemm;
  rates.gpu_curve_scale = reference_peak_of(ctx, Precision::kBf16) / rates.gpu;
  rates.calls = static_cast<double>(std::max<int64_t>(micro_batches, 1));
  return rates;
}

double offload_pass_tokens(int64_t gbs, int64_t mbs, int64_t seq_len) {
  return static_cast<double>(gbs / mbs * mbs * seq_len);
}

double offload_edge_params(const ModelParams& params, int64_t layer, int64_t layers,
                           int64_t stages) {
  double p = 0;
  if (layer == 0) p += params.embedding;
  if (layer == layers - 1) p += last_stage_head_params(params, stages == 1) + params.final_norm;
  return p;
}

aptmoe::Fixed offload_fixed_loads(const TimeContext& ctx, const aptmoe::Rates& rates, int64_t layer,
                                  Precision precision) {
  const double weight_bytes = offload_weight_bytes(precision);
  const LayerParams& lp = ctx.params.layers[static_cast<size_t>(layer)];
  return {rates.load_time(Bytes((lp.attention + lp.norms + lp.shared_experts) * weight_bytes)),
          rates.load_time(Bytes(lp.router * weight_bytes))};
}

aptmoe::Allocation offload_allocation(const TimeContext& ctx, const aptmoe::Rates& rates,
                                      int64_t layer, aptmoe::Pass kind, double tokens,
                                      Precision precision) {
  const ModelSpec& m = *ctx.model;
  const double weight_bytes = offload_weight_bytes(precision);
  const LayerParams& lp = ctx.params.layers[static_cast<size_t>(layer)];
  const std::vector<double> p = layer_popularity(ctx.skew, m, layer);
  std::vector<aptmoe::ExpertCost> experts;
  for (size_t e = 0; e < p.size(); ++e) {
    experts.push_back(aptmoe::expert_cost(static_cast<int>(e),
                                          tokens * static_cast<double>(m.top_k) * p[e],
                                          lp.one_routed_expert, weight_bytes, rates, kind));
  }
  return aptmoe::allocate(experts, offload_fixed_loads(ctx, rates, layer, precision));
}

OffloadLayer offload_layer(const TimeContext& ctx, const aptmoe::Rates& rates, int64_t layer,
                           int64_t stages, aptmoe::Pass kind, double tokens, Precision precision,
                           OffloadSystem system) {
  const ModelSpec& m = *ctx.model;
  const FlopsPerSec peak = peak_of(ctx, precision);
  const double weight_bytes = offload_weight_bytes(precision);
  // A pass's GEMMs run a micro-batch at a time (rates.calls of them), at the curve's
  // efficiency for one call, read at its BF16-equivalent size.
  auto gpu_time = [&](double flops) {
    const double call = flops / std::max(rates.calls, 1.0) * rates.gpu_curve_scale / 8;
    return Flops(flops) / (peak * ctx.eff.gemm.at(std::max(call, 1.0)));
  };
  const LayerParams& lp = ctx.params.layers[layer];
  const bool backward = kind == aptmoe::Pass::kBackward;
  const double factor = backward ? 2.0 : 1.0;  // two GEMMs per forward GEMM
  const double core =
      ctx.flops.forward_attention.value() / static_cast<double>(m.num_layers) * tokens;
  // The layer's forward GPU work outside the routed experts.
  Seconds dense = gpu_time(2.0 * lp.attention * tokens) +
                  Flops(core) / (peak * ctx.eff.attention_share(
                                            core, m.attention.kind == AttentionKind::kLatent));
  dense += m.moe_layer[layer] ? gpu_time(2.0 * (lp.shared_experts + lp.router) * tokens)
                              : gpu_time(2.0 * lp.dense_ffn * tokens);
  OffloadLayer t;
  t.gpu = dense * factor;
  // The embedding (a lookup: no GEMM) and the output head load with the layer beside them; the
  // head's GEMM runs after the last layer.
  const Seconds edge_load = rates.load_time(
      Bytes(offload_edge_params(ctx.params, layer, m.num_layers, stages) * weight_bytes));
  if (layer == m.num_layers - 1) {
    t.gpu += gpu_time(2.0 * static_cast<double>(m.hidden_size * m.vocab_size) * tokens) * factor;
    // The loss over the logits (Transformer Engine's kernel, activations as the precision's).
    const LossPasses loss = cross_entropy_over(ctx, CrossEntropy::kTe, weight_bytes,
                                               tokens * static_cast<double>(m.vocab_size));
    t.gpu += backward ? loss.backward : loss.forward.time;
  }
  Seconds expert_gpu;  // the routed experts the GPU runs, at eq. (1)'s cost for the pass
  if (!m.moe_layer[layer]) {
    t.load =
        rates.load_time(Bytes((lp.attention + lp.dense_ffn + lp.norms) * weight_bytes)) + edge_load;
  } else {
    const aptmoe::Fixed fixed = offload_fixed_loads(ctx, rates, layer, precision);
    const aptmoe::Allocation a = offload_allocation(ctx, rates, layer, kind, tokens, precision);
    if (system != OffloadSystem::kAptMoe) {
      // The baselines load every expert and run it on the GPU.
      for (const aptmoe::ExpertCost& e : a.experts) expert_gpu += e.gpu, t.expert_load += e.load;
      t.load = fixed.load_mha + fixed.load_gate + edge_load + t.expert_load;
    } else {
      t.load = a.load_time + edge_load;
      t.expert_load = std::max(Seconds(0), a.load_time - fixed.load_mha - fixed.load_gate);
      t.cpu = a.cpu_time;
      t.loaded_share = 0;
      for (size_t i = 0; i < a.experts.size(); ++i) {
        if (a.on_gpu[i]) {
          expert_gpu += a.experts[i].gpu;
          t.loaded_share += 1.0 / static_cast<double>(a.experts.size());
        } else {
          t.cpu_tokens += a.experts[i].tokens;
        }
      }
    }
  }
  // Offload plans keep only each layer's input (full recompute), so backward first replays the
  // layer's forward, experts included; an expert's backward cost (eq. 1's) is twice its forward.
  // The head is not replayed.
  if (backward) {
    t.recompute = dense + expert_gpu * 0.5;
    t.cpu = t.cpu * 1.5;
  }
  t.gpu += expert_gpu + t.recompute;
  return t;
}

int64_t offload_stage_first_layer(int64_t layers, int64_t stages, int64_t stage) {
  return stage * (layers / stages) + std::min(stage, layers % stages);
}

int64_t offload_stage_layers(int64_t layers, int64_t stages, int64_t stage) {
  return layers / stages + (stage < layers % stages ? 1 : 0);
}

int64_t offload_gpu_of(OffloadSystem system, int64_t stages, int64_t gpus, int64_t stage) {
  if (system == OffloadSystem::kGPipeOffload) return stage / ((stages + gpus - 1) / gpus);
  return stage % gpus;
}

bool offload_resident_in_backward(OffloadSystem system, int64_t stages, int64_t gpus,
                                  int64_t stage) {
  // Backward visits a GPU's stages from the highest down; the ones forward loaded last are
  // still there: the GPU's top two (prefetch buffer) or its top one (GPipeOffload).
  const int64_t g = offload_gpu_of(system, stages, gpus, stage);
  int64_t above = 0;
  for (int64_t s = stage + 1; s < stages; ++s)
    above += offload_gpu_of(system, stages, gpus, s) == g;
  return above < (system == OffloadSystem::kGPipeOffload ? 1 : 2);
}

Seconds offload_schedule_makespan(const std::vector<OffloadStagePass>& forward,
                                  const std::vector<OffloadStagePass>& backward, int64_t gpus,
                                  int64_t micro) {
  const int64_t stages = static_cast<int64_t>(forward.size());
  const double m = static_cast<double>(std::max<int64_t>(micro, 1));
  // Per GPU: when its compute and its host-to-device copies are next free, and when each of
  // its visits so far finished computing (a load waits for the visit two before it to leave).
  std::vector<Seconds> free(static_cast<size_t>(gpus)), copy_free(static_cast<size_t>(gpus));
  std::vector<std::vector<Seconds>> visits(static_cast<size_t>(gpus));
  // done[i]: when the stage just walked finished micro-batch i (its input for the next stage).
  std::vector<Seconds> done(static_cast<size_t>(std::max<int64_t>(micro, 1)));
  auto walk = [&](int64_t s, const OffloadStagePass& pass, bool first) {
    const size_t g = static_cast<size_t>(offload_gpu_of(OffloadSystem::kAptMoe, stages, gpus, s));
    std::vector<Seconds>& past = visits[g];
    const Seconds room = past.size() >= 2 ? past[past.size() - 2] : Seconds(0);
    copy_free[g] = std::max(copy_free[g], room) + pass.load;
    Seconds& gpu = free[g];
    gpu = std::max(gpu, copy_free[g]);
    const Seconds per_micro = pass.work / m;
    for (Seconds& d : done) {
      gpu = std::max(gpu, first ? Seconds(0) : d) + per_micro;
      d = gpu;
    }
    past.push_back(gpu);
  };
  for (int64_t s = 0; s < stages; ++s) walk(s, forward[static_cast<size_t>(s)], s == 0);
  // The last stage turns round once its forward is through: its GPU's clock already says so.
  for (int64_t s = stages - 1; s >= 0; --s) walk(s, backward[static_cast<size_t>(s)], false);
  return *std::max_element(free.begin(), free.end());
}

std::vector<int> host_sockets(const NodeSpec& node, int64_t gpus) {
  std::vector<int> sockets;
  for (int g = 0; g < std::min<int64_t>(gpus, node.num_gpus); ++g) {
    const int cpu = node.cpu_of_gpu(g);
    if (std::find(sockets.begin(), sockets.end(), cpu) == sockets.end()) sockets.push_back(cpu);
  }
  return sockets;
}

Seconds offload_optimizer_time(const TimeContext& ctx, const ClusterSpec& c, int64_t gpus) {
  const int64_t nodes = (gpus + c.node.num_gpus - 1) / c.node.num_gpus;
  BytesPerSec host;
  for (int s : host_sockets(c.node, gpus))
    host += c.node.cpus[static_cast<size_t>(s)].memory_bandwidth;
  return Bytes(ctx.params.total() * 28.0 / static_cast<double>(nodes)) /
         (host * ctx.eff.memory_bound);
}

namespace {

struct PassTimes {
  Seconds total, gpu, load, cpu, recompute;
  Seconds work;  // what runs micro-batch by micro-batch: GPU, CPU experts, gradient offload
  double loaded_share = 0;
};

}  // namespace

OffloadEstimate estimate_offload(const TimeContext& ctx, const ClusterSpec& c, int64_t gpus,
                                 int64_t stages, int64_t mbs, int64_t gbs, Precision precision,
                                 double alpha) {
  const ModelSpec& m = *ctx.model;
  const NodeSpec& node = c.node;
  OffloadEstimate out;
  const int64_t micro = gbs / mbs;
  const double tokens = offload_pass_tokens(gbs, mbs, ctx.seq_len);
  const double weight_bytes = offload_weight_bytes(precision);
  const double host_per_param = precision == Precision::kFp32 ? 20.0 : 18.0;

  const aptmoe::Rates rates = offload_rates(ctx, c, gpus, precision, micro);
  auto pass = [&](int64_t layer, aptmoe::Pass kind, bool resident) {
    const OffloadLayer l =
        offload_layer(ctx, rates, layer, stages, kind, tokens, precision, OffloadSystem::kAptMoe);
    PassTimes t;
    t.gpu = l.gpu;
    t.recompute = l.recompute;
    t.cpu = l.cpu;
    t.load = resident ? Seconds(0) : l.load;
    t.loaded_share = l.loaded_share;
    // Backward also sends the loaded weights' gradients back over the other PCIe direction.
    const Seconds offload_grads = kind == aptmoe::Pass::kBackward ? l.load : Seconds(0);
    t.work = std::max({t.gpu, t.cpu, offload_grads});
    t.total = std::max(t.load, t.work);
    return t;
  };

  // Each GPU's time (forward + backward of its stages for all micro-batches), and its parts: its
  // own work and what it waited for beyond it, by cause.
  struct GpuTime {
    Seconds total, gpu, recompute, load_wait, cpu_wait;
  };
  std::vector<GpuTime> per_gpu(static_cast<size_t>(gpus));
  // Each stage's forward and backward pass over all micro-batches, for the schedule walk.
  std::vector<OffloadStagePass> stage_forward(static_cast<size_t>(stages)),
      stage_backward(static_cast<size_t>(stages));
  double share_sum = 0;
  int64_t moe_layers = 0;
  int64_t layer = 0;
  Bytes largest_stage_weights;
  for (int64_t s = 0; s < stages; ++s) {
    const int64_t count = offload_stage_layers(m.num_layers, stages, s);
    const bool resident = offload_resident_in_backward(OffloadSystem::kAptMoe, stages, gpus, s);
    GpuTime& g =
        per_gpu[static_cast<size_t>(offload_gpu_of(OffloadSystem::kAptMoe, stages, gpus, s))];
    double loaded_params = 0;
    for (int64_t i = 0; i < count; ++i, ++layer) {
      for (aptmoe::Pass kind : {aptmoe::Pass::kForward, aptmoe::Pass::kBackward}) {
        const PassTimes t = pass(layer, kind, resident && kind == aptmoe::Pass::kBackward);
        OffloadStagePass& walked =
            (kind == aptmoe::Pass::kForward ? stage_forward
                                            : stage_backward)[static_cast<size_t>(s)];
        walked.work += t.work;
        walked.load += t.load;
        g.total += t.total;
        g.gpu += t.gpu;
        g.recompute += t.recompute;
        const Seconds waited = t.total - t.gpu;
        if (waited.value() > 0) (t.cpu > t.load ? g.cpu_wait : g.load_wait) += waited;
        if (kind == aptmoe::Pass::kForward && m.moe_layer[layer]) {
          share_sum += t.loaded_share;
          ++moe_layers;
        }
        if (kind == aptmoe::Pass::kForward) {
          const LayerParams& lp = ctx.params.layers[layer];
          loaded_params += lp.total() - lp.routed_experts + lp.routed_experts * t.loaded_share +
                           offload_edge_params(ctx.params, layer, m.num_layers, stages);
        }
      }
    }
    largest_stage_weights =
        std::max(largest_stage_weights, Bytes(loaded_params * weight_bytes * 2.0));  // + grads
  }
  // The breakdown is the busiest GPU's work; the schedule walk adds what the pipeline makes it
  // (or another GPU) wait, the bubble, so the terms add up to the iteration.
  const GpuTime& busiest =
      *std::max_element(per_gpu.begin(), per_gpu.end(),
                        [](const GpuTime& a, const GpuTime& b) { return a.total < b.total; });
  const Seconds makespan = offload_schedule_makespan(stage_forward, stage_backward, gpus, micro);

  // Activations: full recompute keeps each layer's input for every micro-batch of the stage,
  // plus one layer's working set (MemFine eq. 2 with m_g = 1).
  ParallelConfig p;
  p.tp = p.cp = p.pp = p.dp = p.ep = p.etp = p.edp = p.vpp = 1;
  p.mbs = mbs;
  const memfine::LayerShape shape = moe_layer_shape(m, p, ctx.seq_len, weight_bytes);
  const Bytes one_layer =
      memfine::activation(shape, 1.0, balanced_received_tokens(m, ctx.seq_len), 1);
  const Bytes checkpoints = memfine::recompute_checkpoints(
      shape, static_cast<double>(micro), offload_stage_layers(m.num_layers, stages, 0));
  out.gpu_peak = largest_stage_weights + one_layer + checkpoints;

  const ModelParams& all = ctx.params;
  const int64_t nodes = (gpus + node.num_gpus - 1) / node.num_gpus;
  Bytes host_per_node;
  for (int s : host_sockets(node, gpus)) host_per_node += node.cpus[static_cast<size_t>(s)].memory;
  out.host_capacity = host_per_node;
  out.host_bytes = Bytes(all.total() * host_per_param / static_cast<double>(nodes));
  out.fits =
      out.gpu_peak <= ctx.gpu.hbm_capacity * alpha && out.host_bytes <= host_per_node * alpha;
  out.experts_on_gpu = moe_layers > 0 ? share_sum / static_cast<double>(moe_layers) : 1.0;

  TimeBreakdown& t = out.time;
  t.microbatches = micro;
  t.compute = busiest.gpu - busiest.recompute;
  t.recompute = busiest.recompute;
  t.pcie_load = busiest.load_wait;
  t.cpu_experts = busiest.cpu_wait;
  t.bubble = std::max(Seconds(0), makespan - busiest.total);
  t.optimizer = offload_optimizer_time(ctx, c, gpus);
  t.iteration = busiest.total + t.bubble + t.optimizer;
  return out;
}

}  // namespace moe
