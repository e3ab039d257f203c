#include "tools/moeplan/explain_layers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/layer_ops.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct ExplainedLayer {
  int64_t layer = 0;
  bool moe = false, linear = false;
  double expert_load = 1.0;  // the busiest EP rank's routed tokens over the balanced share
  std::vector<LayerOp> ops;
  std::vector<ReplayedOp> replayed;
  StageTimes passes;
};

// The first layer of each kind: every layer of a kind costs the same (time_model.cpp).
std::vector<ExplainedLayer> explained_layers(const TimeContext& ctx, const Plan& plan) {
  const ModelSpec& m = *ctx.model;
  const PlanChoice& c = plan.choice;
  std::vector<ExplainedLayer> out;
  for (int64_t first : ctx.first_layer_of_kind) {
    if (first < 0) continue;
    const auto i = static_cast<size_t>(first);
    ExplainedLayer e;
    e.layer = first;
    e.moe = m.moe_layer[i];
    e.linear = ctx.params.layers[i].linear;
    e.expert_load = e.moe ? ctx.skew.imbalance(m, *c.parallel.ep) : 1.0;
    e.ops = layer_forward_ops(ctx, c, ctx.params.layers[i], e.moe, e.expert_load,
                              layer_fcda_chunks(m, c, first));
    e.replayed = recompute_ops(ctx, c, e.moe, e.expert_load, e.ops);
    e.passes = layer_pass_times(ctx, c, first);
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(),
            [](const ExplainedLayer& a, const ExplainedLayer& b) { return a.layer < b.layer; });
  return out;
}

// The work column and the rate it implies: FLOPs against the op's peak, HBM bytes against the
// GPU's bandwidth, a collective's size over its time (nccl-tests' algbw).
struct Rate {
  std::string work, rate, of_peak;
};
Rate rate_of(const TimeContext& ctx, const LayerOp& op) {
  const double t = op.time.value();
  Rate r{"-", "-", "-"};
  if (!(t > 0)) return r;
  if (op.kind == OpKind::kCompute && op.flops > 0) {
    r.work = fmt::format("{:.1f} GFLOP", op.flops / 1e9);
    if (op.bytes > 0) r.work += fmt::format(" + {:.1f} MB", op.bytes / 1e6);
    r.rate = fmt::format("{:.0f} TFLOP/s", op.flops / t / 1e12);
    if (op.peak > 0) r.of_peak = fmt::format("{:.1f} %", 100.0 * op.flops / t / op.peak);
  } else if (op.kind == OpKind::kCompute && op.bytes > 0) {
    r.work = fmt::format("{:.1f} MB HBM", op.bytes / 1e6);
    r.rate = as_gbps(op.bytes / t);
    const double hbm = ctx.links.hbm.value();
    if (hbm > 0) r.of_peak = fmt::format("{:.1f} %", 100.0 * op.bytes / t / hbm);
  } else if (op.bytes > 0) {
    r.work = fmt::format("{:.1f} MB", op.bytes / 1e6);
    r.rate = as_gbps(op.bytes / t) + " algbw";
  }
  return r;
}

nlohmann::json op_json(const LayerOp& op) {
  return nlohmann::json{{"name", op.name},           {"kind", op_kind_name(op.kind)},
                        {"time_s", op.time.value()}, {"flops", op.flops},
                        {"peak_flops", op.peak},     {"bytes", op.bytes}};
}

std::string layer_title(const ExplainedLayer& e) {
  return fmt::format("{}, {} attention", e.moe ? "MoE" : "dense FFN",
                     e.linear ? "linear" : "softmax");
}

Table op_table(const TimeContext& ctx, const std::vector<LayerOp>& ops, Seconds sum) {
  Table t({"operator", "kind", "time", "share", "work", "rate", "of peak"});
  for (const LayerOp& op : ops) {
    const Rate r = rate_of(ctx, op);
    t.add({op.name, op_kind_name(op.kind), as_ms(op.time),
           fmt::format("{:.1f} %", sum.value() > 0 ? 100.0 * op.time.value() / sum.value() : 0),
           r.work, r.rate, r.of_peak});
  }
  return t;
}

}  // namespace

void print_layer_explanation(const TimeContext& ctx, const Plan& plan) {
  const PlanChoice& c = plan.choice;
  const double tokens = static_cast<double>(*c.parallel.mbs * ctx.seq_len) /
                        static_cast<double>(*c.parallel.tp * *c.parallel.cp);
  fmt::print(
      "\nThe best plan's layers, operator by operator (forward of one micro-batch on one GPU, "
      "{:.0f} of its tokens; backward runs twice the compute and the same communication{}):\n",
      tokens,
      c.compute_clock < 1
          ? fmt::format("; GEMMs and fused attention at {:.2f} of full clock, the power limit's",
                        c.compute_clock)
          : "");
  for (const ExplainedLayer& e : explained_layers(ctx, plan)) {
    fmt::print("\nLayer {} ({}){}:\n", e.layer, layer_title(e),
               e.moe ? fmt::format(", the busiest EP rank's experts at {:.2f}x the balanced tokens",
                                   e.expert_load)
                     : "");
    Seconds sum;
    for (const LayerOp& op : e.ops) sum += op.time;
    fmt::print("{}", op_table(ctx, e.ops, sum).render());
    if (!e.replayed.empty()) {
      std::vector<std::string> names;
      for (const ReplayedOp& r : e.replayed)
        names.push_back(fmt::format("{} {}", r.op.name, as_ms(r.op.time)));
      fmt::print("  recomputed before its backward: {}\n", fmt::join(names, ", "));
    }
    const StageTimes& p = e.passes;
    // What each pass holds besides its operators.
    auto within = [](std::vector<std::string> parts) {
      std::erase(parts, std::string());
      return parts.empty() ? std::string() : fmt::format(" (of which {})", fmt::join(parts, ", "));
    };
    auto part = [](Seconds t, const char* what) {
      return t.value() > 0 ? fmt::format("{} {}", as_ms(t), what) : std::string();
    };
    fmt::print(
        "  operators sum to {}; the layer's forward pass takes {}{}, its backward {}{}{}\n",
        as_ms(sum), as_ms(p.forward),
        within({part(p.host_forward, "waiting for the host"),
                part(p.offload_forward, "waiting for offload copies")}),
        as_ms(p.backward),
        within({part(p.recompute, "recompute"), part(p.host_backward, "waiting for the host"),
                part(p.offload_backward, "waiting for offload copies")}),
        c.overlap ? "; communication pipelines behind compute" : "");
  }
  const LayerOp head = output_head_op(ctx, c);
  const LossPasses loss = cross_entropy_passes(ctx, c);
  fmt::print(
      "\nOnce a micro-batch, on the last stage{}:\n{}",
      ctx.model->mtp_layers > 0
          ? fmt::format(" ({} runs it again, after a layer priced as the model's last)",
                        ctx.model->mtp_layers == 1
                            ? std::string("the MTP module")
                            : fmt::format("each of the {} MTP modules", ctx.model->mtp_layers))
          : "",
      op_table(ctx, {head, loss.forward}, head.time + loss.forward.time).render());
  fmt::print(
      "  the loss ({} kernel) takes {} in backward and keeps {:.2f} GB of logits until then\n",
      cross_entropy_name(c.cross_entropy), as_ms(loss.backward), loss.held.value() / 1e9);
  const LayerOp embedding = embedding_gradient_op(ctx, c);
  fmt::print("\nOnce a micro-batch's backward, on the first stage{}:\n{}",
             ctx.model->mtp_layers > 0 ? " (and once a module, on the MTP modules' stage)" : "",
             op_table(ctx, {embedding}, embedding.time).render());
}

nlohmann::json layer_explanation_json(const TimeContext& ctx, const Plan& plan) {
  nlohmann::json layers = nlohmann::json::array();
  for (const ExplainedLayer& e : explained_layers(ctx, plan)) {
    nlohmann::json ops = nlohmann::json::array(), replayed = nlohmann::json::array();
    for (const LayerOp& op : e.ops) ops.push_back(op_json(op));
    for (const ReplayedOp& r : e.replayed) replayed.push_back(op_json(r.op));
    layers.push_back({{"layer", e.layer},
                      {"moe", e.moe},
                      {"linear_attention", e.linear},
                      {"expert_load", e.expert_load},
                      {"forward_ops", std::move(ops)},
                      {"recomputed_ops", std::move(replayed)},
                      {"forward_s", e.passes.forward.value()},
                      {"backward_s", e.passes.backward.value()},
                      {"recompute_s", e.passes.recompute.value()},
                      {"host_wait_s", e.passes.host().value()},
                      {"offload_wait_s", e.passes.offload().value()}});
  }
  const LossPasses loss = cross_entropy_passes(ctx, plan.choice);
  return {{"layers", std::move(layers)},
          {"output_head", op_json(output_head_op(ctx, plan.choice))},
          {"loss", op_json(loss.forward)},
          {"loss_backward_s", loss.backward.value()},
          {"loss_held_GB", loss.held.value() / 1e9},
          {"embedding_gradient", op_json(embedding_gradient_op(ctx, plan.choice))}};
}

}  // namespace moe::cli
